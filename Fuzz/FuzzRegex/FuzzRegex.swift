// libFuzzer entry point for the tracking plans' regex (FerryQuality's Pike VM) against Python's
// `re`, built by scripts/fuzz through the package in Fuzz/ with `swift build --sanitize fuzzer`.
// The generator and the comparison live in RegexReference.swift (a link to
// Tests/FerryQualityTests/RegexReference.swift), so RegexDifferentialTests runs the same code.

#if canImport(Glibc)
import Glibc
#endif

/// The reference, started once: one Python process answers every input (started again once if
/// it ends; what it said goes to this process's stderr, the run's fuzz.log). A write to a
/// reference that has ended then fails with EPIPE instead of killing the fuzzer.
nonisolated(unsafe) let python: PythonReference = {
    signal(SIGPIPE, SIG_IGN)
    return try! PythonReference()
}()

/// Called by libFuzzer with each input: the bytes choose a pattern of the supported subset and
/// texts (``RegexReference/Bytes``). A disagreement with `re.search` stops the run (libFuzzer
/// saves the input as `crash-<sha1>`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRegex(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var choices = RegexReference.Bytes(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
    let reference = RegexReference.generate(&choices)
    let answer: String
    do {
        answer = try python.answer(reference)
    } catch {
        fatalError("the Python reference failed: \(error)")
    }
    if let disagreement = RegexReference.disagreement(reference, python: answer) {
        fatalError("Regex disagrees with Python's re: \(disagreement)")
    }
    return 0
}
