// libFuzzer entry point for the tracking plan parser (and, through what compiles, the schema
// checks, the regex engine and the JSON tape), built by scripts/fuzz through the package in Fuzz/
// with `swift build --sanitize fuzzer`. The checks live in QualityChecks.swift (a link to
// Tests/FerryQualityTests/QualityChecks.swift) so the corpus replay test runs the same code.

/// Called by libFuzzer with each input: the contents of a plan file. A broken property stops the
/// run (libFuzzer saves the input as `crash-<sha1>`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPlan(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    if case .failure(let violation) = QualityChecks.plan(input) {
        fatalError("tracking plan property broken: \(violation)")
    }
    return 0
}
