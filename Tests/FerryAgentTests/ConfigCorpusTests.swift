import FerryAgent
import FerryHTTPIngest
import Foundation
import Testing

/// Replays the configuration fuzzer's seed corpus (`Fuzz/corpus-config/`) through the loader with
/// the checks the libFuzzer target runs (``ConfigChecks``).
@Suite("Configuration fuzz corpus replay")
struct ConfigCorpusTests {
    static let corpusDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz/corpus-config").path

    static func corpus() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: corpusDirectory)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
    }

    @Test("the corpus is there, with files that load and files that are refused")
    func corpusPresent() {
        let names = Self.corpus()
        #expect(names.count >= 20, "\(Self.corpusDirectory) holds \(names.count) files")
        #expect(names.contains("valid-example") && names.contains { $0.hasPrefix("bad-") })
    }

    @Test("every corpus file keeps the loader properties; valid-* load, bad-* are refused", arguments: corpus())
    func replay(name: String) throws {
        let bytes = try #require(FileManager.default.contents(atPath: Self.corpusDirectory + "/" + name))
        switch ConfigChecks.run(Array(bytes), ingestPathKinds: IngestPathRegistry([.http])) {
        case .failure(let violation):
            Issue.record("\(name): \(violation)")
        case .success(let outcome):
            if name.hasPrefix("valid-") { #expect(outcome == .loaded, "\(name)") }
            if name.hasPrefix("bad-") { #expect(outcome == .refused, "\(name)") }
        }
    }

    @Test("the example configuration in daemon/ is in the corpus as it is")
    func exampleIsCurrent() throws {
        let root = URL(fileURLWithPath: Self.corpusDirectory).deletingLastPathComponent().deletingLastPathComponent()
        let example = try #require(FileManager.default.contents(atPath: root.appendingPathComponent("daemon/ferryd.example.json").path))
        #expect(FileManager.default.contents(atPath: Self.corpusDirectory + "/valid-example") == example)
    }
}
