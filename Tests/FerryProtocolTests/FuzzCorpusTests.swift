import Foundation
import FerryProtocol
import Testing

/// Replays the fuzzer's seed corpus (`Fuzz/corpus/`, written by `Fuzz/make_corpus.py`) through the
/// wire decoders with the same checks the libFuzzer target runs (``FrameChecks``): every input
/// decodes or is refused with a ``ProtocolError``, never crashes, and round-trips when it decodes.
@Suite("Fuzz corpus replay")
struct FuzzCorpusTests {
    static let corpusDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz/corpus").path

    static func corpus() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: corpusDirectory)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
    }

    @Test("the corpus is there and covers every decoder")
    func corpusPresent() throws {
        let names = Self.corpus()
        #expect(names.count >= 40, "\(Self.corpusDirectory) holds \(names.count) files")
        let targets = try Set(names.map { name in
            let bytes = try #require(FileManager.default.contents(atPath: Self.corpusDirectory + "/" + name))
            return bytes.first.map { $0 % UInt8(FrameChecks.Target.allCases.count) }
        })
        #expect(targets == Set(FrameChecks.Target.allCases.map { Optional($0.rawValue) }))
    }

    @Test("every corpus file decodes or is refused; valid-* decode, bad-* are refused", arguments: corpus())
    func replay(name: String) throws {
        let bytes = try #require(FileManager.default.contents(atPath: Self.corpusDirectory + "/" + name))
        switch FrameChecks.run(Array(bytes)) {
        case .failure(let violation):
            Issue.record("\(name): \(violation)")
        case .success(let outcome):
            if name.hasPrefix("valid-") { #expect(outcome == .decoded, "\(name)") }
            if name.hasPrefix("bad-") { #expect(outcome == .refused, "\(name)") }
        }
    }

    @Test("every prefix and every single-byte change of the valid inputs decodes or is refused")
    func mutations() throws {
        // A deterministic miniature of the fuzzer for `scripts/test`: truncations and byte flips.
        var checked = 0
        for name in Self.corpus() where name.hasPrefix("valid-") {
            let input = Array(try #require(FileManager.default.contents(atPath: Self.corpusDirectory + "/" + name)))
            var variants: [[UInt8]] = (1..<input.count).map { Array(input.prefix($0)) }
            for index in 1..<input.count {
                for mask: UInt8 in [0x01, 0x80, 0xFF] {
                    var changed = input
                    changed[index] ^= mask
                    variants.append(changed)
                }
            }
            for variant in variants {
                if case .failure(let violation) = FrameChecks.run(variant) { Issue.record("\(name) variant: \(violation)") }
                checked += 1
            }
        }
        #expect(checked > 1000)
    }
}
