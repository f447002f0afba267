import Foundation
import FerryProtocol
import Testing

/// Replays the control fuzzer's seed corpus (`Fuzz/corpus-control/`) through the control
/// protocol's decoders with the checks the libFuzzer target runs (``ControlChecks``).
@Suite("Control fuzz corpus replay")
struct ControlCorpusTests {
    static let corpusDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz/corpus-control").path

    static func corpus() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: corpusDirectory)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
    }

    @Test("the corpus is there and has requests of every op")
    func corpusPresent() throws {
        let names = Self.corpus()
        #expect(names.count >= 30, "\(Self.corpusDirectory) holds \(names.count) files")
        let ops = try Set(names.filter { $0.hasPrefix("valid-") }.map { name in
            try ControlRequest.decode(json: Array(try #require(FileManager.default.contents(atPath: Self.corpusDirectory + "/" + name)))).op
        })
        #expect(ops == Set(ControlRequest.ops))
    }

    @Test("every corpus file keeps the decoder properties; valid-* decode, bad-* are refused", arguments: corpus())
    func replay(name: String) throws {
        let bytes = try #require(FileManager.default.contents(atPath: Self.corpusDirectory + "/" + name))
        switch ControlChecks.run(Array(bytes)) {
        case .failure(let violation):
            Issue.record("\(name): \(violation)")
        case .success(let outcome):
            if name.hasPrefix("valid-") { #expect(outcome == .request, "\(name)") }
            if name.hasPrefix("bad-") { #expect(outcome == .refused, "\(name)") }
        }
    }

    @Test("every prefix and every single-byte change of the valid requests keeps the properties")
    func mutations() throws {
        // A deterministic miniature of the fuzzer for `scripts/test`: truncations and byte flips.
        var checked = 0
        for name in Self.corpus() where name.hasPrefix("valid-") {
            let input = Array(try #require(FileManager.default.contents(atPath: Self.corpusDirectory + "/" + name)))
            var variants: [[UInt8]] = (0..<input.count).map { Array(input.prefix($0)) }
            for index in input.indices {
                for mask: UInt8 in [0x01, 0x20, 0x80] {
                    var changed = input
                    changed[index] ^= mask
                    variants.append(changed)
                }
            }
            for variant in variants {
                if case .failure(let violation) = ControlChecks.run(variant) { Issue.record("\(name) variant: \(violation)") }
                checked += 1
            }
        }
        #expect(checked > 1000)
    }
}
