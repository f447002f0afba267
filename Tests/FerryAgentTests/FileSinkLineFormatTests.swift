@testable import FerryFileSink
@testable import FerryAgent
@testable import FerryStorage
import FerryProtocol
import FerryTestKit
import Foundation
import Testing

/// The file sink's line formats (docs/PROTOCOL.md, "File sink lines"): format 2 says so on every
/// line and writes `consent_seq` as a number; format 1 stays available; a file written across an
/// upgrade holds both, and the reader's rule (`line_format` absent = 1) reads both.
@Suite("File sink line format")
struct FileSinkLineFormatTests {
    static let stamp = GDPRRecord().stamp.merging(["anonymous_id": "a-1", "consent_seq": "42"]) { $1 }

    /// The raw lines of every sink file, in order.
    static func rawLines(_ directory: String) throws -> [String] {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".jsonl") }.sorted()
        return try names.flatMap { name in
            try String(contentsOfFile: directory + "/" + name, encoding: .utf8).split(separator: "\n").map(String.init)
        }
    }

    /// `consent_seq` of a line read by the documented rule: a number from format 2, a string of
    /// digits from format 1.
    static func consentSeq(_ line: [String: Any]) -> Int? {
        let consent = line["consent"] as? [String: Any]
        if (line["line_format"] as? Int ?? 1) >= 2 {
            guard let number = consent?["consent_seq"] as? NSNumber, !(consent?["consent_seq"] is String) else { return nil }
            return number.intValue
        }
        return (consent?["consent_seq"] as? String).flatMap { Int($0) }
    }

    @Test("format 2 starts every line with line_format 2 and writes consent_seq as a number; nothing else differs from format 1")
    func formatTwo() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let events = FileSinkTests.stored((1...3).map { Events.make(UInt64($0)) })
        var parsed: [Int: [[String: Any]]] = [:]
        for format in FileSink.lineFormats {
            let directory = scratch.appending("format-\(format)")
            let sink = FileSink(directory: directory, lineFormat: format)
            _ = try await sink.recover(checkpoint: nil)
            _ = try await sink.deliver(DeliveryBatch(events: events, consent: Self.stamp))
            let raw = try Self.rawLines(directory)
            try #require(raw.count == 3)
            for line in raw {
                #expect(line.hasPrefix(format == 1 ? #"{"id":"# : #"{"line_format":\#(format),"id":"#), "\(line)")
                #expect(line.contains(format == 3 ? #""ad_personalization":"# : #""ads_personalization":"#), "\(line)")
                #expect(line.contains(format == 1 ? #""consent_seq":"42""# : #""consent_seq":42"#), "\(line)")
            }
            parsed[format] = try sinkLines(directory)
        }
        let one = try #require(parsed[1]), two = try #require(parsed[2]), three = try #require(parsed[3])
        // Format 3 differs from 2 in the stamp's ad-personalisation key only (Consent Mode v2's name).
        for (old, new) in zip(two, three) {
            #expect(new["line_format"] as? Int == 3)
            var renamed = new
            renamed["line_format"] = 2
            var consent = try #require(renamed["consent"] as? [String: Any])
            consent["ads_personalization"] = consent.removeValue(forKey: "ad_personalization")
            renamed["consent"] = consent
            #expect(NSDictionary(dictionary: renamed).isEqual(to: old), "\(old) vs \(new)")
        }
        for (old, new) in zip(one, two) {
            #expect(old["line_format"] == nil)
            #expect(new["line_format"] as? Int == 2)
            #expect(Self.consentSeq(old) == 42 && Self.consentSeq(new) == 42)
            var stripped = new
            stripped["line_format"] = nil
            var consent = try #require(stripped["consent"] as? [String: Any])
            consent["consent_seq"] = "42"
            stripped["consent"] = consent
            #expect(NSDictionary(dictionary: stripped).isEqual(to: old), "\(old) vs \(new)")
        }
    }

    @Test("an upgrade mid-file: format 1 lines, then format 2 lines after the checkpoint; the reader's rule reads all of them")
    func upgradeMidFile() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("delivered")
        let first = FileSinkTests.stored((1...2).map { Events.make(UInt64($0)) })
        let second = FileSinkTests.stored((3...4).map { Events.make(UInt64($0)) })
        let old = FileSink(directory: directory, lineFormat: 1)
        _ = try await old.recover(checkpoint: nil)
        let checkpoint = try await old.deliver(DeliveryBatch(events: first, consent: Self.stamp))

        let new = FileSink(directory: directory)
        #expect(new.lineFormat == 3, "format 3 is the default")
        #expect(try await new.recover(checkpoint: checkpoint) == checkpoint, "the checkpoint of a format 1 sink is valid")
        _ = try await new.deliver(DeliveryBatch(events: second, consent: Self.stamp))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == [FileSink.fileName(1)], "the same file goes on")
        let lines = try sinkLines(directory)
        #expect(lines.map { $0["line_format"] as? Int } == [nil, nil, 3, 3])
        #expect(lines.map(Self.consentSeq) == [42, 42, 42, 42])
        #expect(FileSinkTests.ids(lines) == (first + second).map { $0.decodedID.description })
    }

    @Test("lineFormat loads from the configuration; a format the agent does not know is refused with its key path")
    func configuration() throws {
        let one = try ConfigurationTests.load(#"{"sinks": [{"name": "old", "type": "file", "lineFormat": 1}]}"#)
        #expect(one.sinks.first?.settings(as: FileSinkSettings.self)?.lineFormat == 1)
        let fallback = try ConfigurationTests.load(#"{"sinks": [{"name": "new", "type": "file"}]}"#)
        #expect(fallback.sinks.first?.settings(as: FileSinkSettings.self)?.lineFormat == 3)
        for bad in [#"4"#, #"0"#, #""2""#] {
            #expect {
                _ = try ConfigurationTests.load(#"{"sinks": [{"name": "x", "type": "file", "lineFormat": \#(bad)}]}"#)
            } throws: { error in
                let text = "\(error)"
                return text.contains("lineFormat") && text.contains("x")
            }
        }
    }
}
