// libFuzzer entry point for the control protocol's JSON decoders. Built by scripts/fuzz with
// `swiftc -sanitize=fuzzer,address -parse-as-library -module-name FerryProtocol` over
// Sources/FerryProtocol/*.swift, Tests/FerryProtocolTests/ControlChecks.swift and this file.
// The checks themselves live in ControlChecks.swift so the corpus replay test runs the same code.

/// Called by libFuzzer with each input: the bytes of one request (or reply) as they would arrive
/// on the control socket. A broken property stops the run (libFuzzer saves the input as
/// `crash-<sha1>`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzControl(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    if case .failure(let violation) = ControlChecks.run(input) {
        fatalError("control protocol decoder property broken: \(violation)")
    }
    return 0
}
