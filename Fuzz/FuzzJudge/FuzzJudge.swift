// libFuzzer entry point for the ingest path's in-place judgement (QualityGate.passesUntouched: the
// gate's engine over the frame's fields in place) against the gate's judgement of the decoded event,
// built by scripts/fuzz through the package in Fuzz/ with `swift build --sanitize fuzzer`. The
// checks live in QualityChecks.swift (a link to Tests/FerryQualityTests/QualityChecks.swift) so
// the corpus replay test runs the same code.

/// Called by libFuzzer with each input: an event's properties (and context). A broken property
/// stops the run (libFuzzer saves the input as `crash-<sha1>`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJudge(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    if let violation = QualityChecks.inPlaceJudgementAgrees(input) {
        fatalError("in-place judgement property broken: \(violation)")
    }
    return 0
}
