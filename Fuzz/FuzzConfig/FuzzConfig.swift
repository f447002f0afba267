// libFuzzer entry point for the agent's configuration loader, built by scripts/fuzz through the
// package in Fuzz/ with `swift build --sanitize fuzzer`. The checks live in ConfigChecks.swift (a
// link to Tests/FerryAgentTests/ConfigChecks.swift) so the corpus replay test runs the same code.

/// Called by libFuzzer with each input: the contents of a configuration file. A broken property
/// stops the run (libFuzzer saves the input as `crash-<sha1>`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzConfig(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    if case .failure(let violation) = ConfigChecks.run(input) {
        fatalError("configuration loader property broken: \(violation)")
    }
    return 0
}
