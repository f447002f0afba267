@testable import FerryQuality
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing

/// ``Regex`` (the Pike VM tracking plans' `pattern` runs on) against an independent engine,
/// Python's `re`: generated patterns of the supported subset (``RegexReference``), each with
/// texts made to match it, near misses and random texts. Every pattern must compile and every
/// text must match or not as `re.search` says. The fuzz target (`scripts/fuzz 60 regex`) does
/// the same with patterns and texts drawn from libFuzzer's inputs.
@Suite("Regex against Python's re")
struct RegexDifferentialTests {
    static let patterns = 3000

    @Test("3 000 generated patterns, 6 texts each: compiled, and matching as re.search does",
          .enabled(if: PythonReference.isAvailable, "needs /usr/bin/python3"))
    func agreesWithPython() async throws {
        var choices = RegexReference.Seeded(seed: 37)
        let cases = (0..<Self.patterns).map { _ in RegexReference.generate(&choices) }
        // The child process is waited on by a thread of its own, off the cooperative pool.
        let answers: [String] = try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try PythonReference.answers(cases) }) }.start()
        }
        try #require(answers.count == cases.count, "python answered \(answers.count) of \(cases.count) cases")
        let disagreements = zip(cases, answers).compactMap { RegexReference.disagreement($0, python: $1) }
        #expect(disagreements.isEmpty, "\(disagreements.count) disagreements:\n\(disagreements.prefix(20).joined(separator: "\n"))")
        // re gave up on few cases (its backtracking), and both answers are common: the generator
        // is not one-sided.
        let answered = answers.filter { $0 != "T" }.joined()
        #expect(answers.count - answers.filter { $0 != "T" }.count < Self.patterns / 100)
        let matched = answered.filter { $0 == "1" }.count
        #expect(matched > Self.patterns && answered.count - matched > Self.patterns, "\(matched) of \(answered.count) texts matched")
    }

    @Test("a reference that ends is started again once, with how it ended kept; a second ending fails",
          .enabled(if: PythonReference.isAvailable, "needs /usr/bin/python3"))
    func restartOnce() async throws {
        var choices = RegexReference.Seeded(seed: 7)
        let reference = RegexReference.generate(&choices)
        let (expected, afterRestart, endings, second): (String, String, [String], String) = try await withCheckedThrowingContinuation { continuation in
            Thread {
                continuation.resume(with: Result {
                    // A write to the ended process must fail with EPIPE, not end this one.
                    signal(SIGPIPE, SIG_IGN)
                    let python = try PythonReference()
                    defer { python.close() }
                    let expected = try python.answer(reference)
                    python.end(signal: SIGKILL)
                    let afterRestart = try python.answer(reference)
                    let endings = python.endings
                    python.end(signal: SIGKILL)
                    var second = ""
                    do { _ = try python.answer(reference) } catch let error as PythonReferenceError { second = error.message }
                    return (expected, afterRestart, endings, second)
                })
            }.start()
        }
        #expect(afterRestart == expected)
        #expect(endings.count == 1 && endings[0].contains("killed by signal \(SIGKILL)"), "\(endings)")
        #expect(second.contains("stopped answering again"), "\(second)")
    }

    @Test("the regex fuzzer's seed corpus (Fuzz/corpus-regex) agrees too",
          .enabled(if: PythonReference.isAvailable, "needs /usr/bin/python3"))
    func corpus() async throws {
        let inputs = try QualityCorpusTests.corpus("corpus-regex").map { try #require(FileManager.default.contents(atPath: $0)) }
        #expect(inputs.count >= 8)
        let disagreements: [String] = try await withCheckedThrowingContinuation { continuation in
            Thread {
                continuation.resume(with: Result {
                    let python = try PythonReference()
                    defer { python.close() }
                    return try inputs.compactMap { input in
                        var choices = RegexReference.Bytes(Array(input))
                        let reference = RegexReference.generate(&choices)
                        return RegexReference.disagreement(reference, python: try python.answer(reference))
                    }
                })
            }.start()
        }
        #expect(disagreements.isEmpty, "\(disagreements)")
    }
}
