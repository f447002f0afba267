import Foundation
import Testing

/// Replays the plan, redact and judge fuzzers' seed corpora (`Fuzz/corpus-plan/`,
/// `Fuzz/corpus-redact/`, `Fuzz/corpus-judge/`) with the checks the libFuzzer targets run
/// (``QualityChecks``).
@Suite("Tracking plan, redact table and judgement fuzz corpus replay")
struct QualityCorpusTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func corpus(_ name: String) -> [String] {
        let directory = root.appendingPathComponent("Fuzz/\(name)").path
        return ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
            .map { directory + "/" + $0 }
    }

    @Test("every plan corpus file keeps the properties; valid-* compile, bad-* are refused", arguments: corpus("corpus-plan"))
    func plan(path: String) throws {
        let bytes = try #require(FileManager.default.contents(atPath: path))
        let name = URL(fileURLWithPath: path).lastPathComponent
        switch QualityChecks.plan(Array(bytes)) {
        case .failure(let violation): Issue.record("\(name): \(violation)")
        case .success(let outcome): #expect(outcome == (name.hasPrefix("valid-") ? .compiled : .refused), "\(name)")
        }
    }

    @Test("every redact corpus file keeps the properties; valid-* compile, bad-* are refused", arguments: corpus("corpus-redact"))
    func redact(path: String) throws {
        let bytes = try #require(FileManager.default.contents(atPath: path))
        let name = URL(fileURLWithPath: path).lastPathComponent
        switch QualityChecks.redact(Array(bytes)) {
        case .failure(let violation): Issue.record("\(name): \(violation)")
        case .success(let outcome): #expect(outcome == (name.hasPrefix("valid-") ? .compiled : .refused), "\(name)")
        }
    }

    @Test("every judge corpus file: the in-place judgement passes nothing the gate changes or refuses", arguments: corpus("corpus-judge"))
    func judge(path: String) throws {
        let bytes = try #require(FileManager.default.contents(atPath: path))
        if let violation = QualityChecks.inPlaceJudgementAgrees(Array(bytes)) {
            Issue.record("\(URL(fileURLWithPath: path).lastPathComponent): \(violation)")
        }
    }

    @Test func corporaArePresent() {
        #expect(Self.corpus("corpus-judge").count >= 9)
        #expect(Self.corpus("corpus-plan").count >= 10)
        #expect(Self.corpus("corpus-redact").count >= 8)
    }
}
