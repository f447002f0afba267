// libFuzzer entry point for Ferry's wire decoders. Built by scripts/fuzz with
// `swiftc -sanitize=fuzzer,address -parse-as-library -module-name FerryProtocol` over
// Sources/FerryProtocol/*.swift, Tests/FerryProtocolTests/FrameChecks.swift and this file.
// The checks themselves live in FrameChecks.swift so the corpus replay test runs the same code.

/// Called by libFuzzer with each input: the first byte picks the decoder, the rest is the frame.
/// A broken property stops the run (libFuzzer saves the input as `crash-<sha1>`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFrames(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    if case .failure(let violation) = FrameChecks.run(input) {
        fatalError("FerryProtocol decoder property broken: \(violation)")
    }
    return 0
}
