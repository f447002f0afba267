// libFuzzer entry point for the redact table parser (and, through what compiles, redaction of
// events), built by scripts/fuzz through the package in Fuzz/ with `swift build --sanitize
// fuzzer`. The checks live in QualityChecks.swift (a link to
// Tests/FerryQualityTests/QualityChecks.swift) so the corpus replay test runs the same code.

/// Called by libFuzzer with each input: the bytes of a `redact` table. A broken property stops
/// the run (libFuzzer saves the input as `crash-<sha1>`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRedact(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    if case .failure(let violation) = QualityChecks.redact(input) {
        fatalError("redact table property broken: \(violation)")
    }
    return 0
}
