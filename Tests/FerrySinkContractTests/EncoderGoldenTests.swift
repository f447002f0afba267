@testable import FerryFileSink
import Foundation
@testable import FerryAgent
@testable import FerryHTTPSink
@testable import FerryJetStreamSink
@testable import FerryStorage
import FerryProtocol
import NATS
import Testing

/// Every body encoder's bytes for a varied corpus of stored events, pinned in
/// `Tests/Vectors/encoder-golden.txt` (written by the encoders before the delivery speed-ups of
/// issue 24): the file sink's lines in every line format, the stored event object, JetStream
/// message bodies, the HTTP `envelope` and `segment` bodies in both body versions, Segment's
/// rejections, under several `disclose` choices and consent stamps. A faster encoder must change
/// no byte.
@Suite("Encoders: golden bytes")
struct EncoderGoldenTests {
    static let goldenPath = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Vectors/encoder-golden.txt").path
    static let regenerate = "FERRY_REGENERATE_VECTORS=1 swift test --filter EncoderGolden"

    static func id(_ n: UInt64) -> EventID { EventID(high: 0x0190_0000_0000_7000 | n, low: 0x8000_0000_0000_0000 | (n * 7919)) }

    static let fullOrigin = EventOrigin(uid: 1000, gid: 100, pid: 4242, comm: "shop", exe: "/usr/bin/shop \"q\"", unit: "shop.service")

    /// The corpus: every event type, every optional field, escapes, non-ASCII text, properties and
    /// contexts plain, non-plain, not JSON and multi-line, origins whole, partial, invalid UTF-8
    /// and absent, an undecodable frame and an erased record.
    static func corpus() -> [StoredEvent] {
        var events: [(WireEvent, RecordMetadata)] = []
        func add(_ n: UInt64, _ type: EventType, name: String, source: String = "web", user: String = "",
                 properties: String = "", metadata: RecordMetadata = fullOrigin.metadata,
                 _ change: (inout WireEvent) -> Void = { _ in }) {
            var event = WireEvent(id: id(n), timestamp: 1_714_564_799_000 + n * 1001, sequence: n, pid: 40 + UInt32(n), type: type,
                                  source: source, name: name, userID: user, properties: Array(properties.utf8))
            change(&event)
            events.append((event, metadata))
        }
        add(1, .track, name: "Signed Up", user: "u1", properties: #"{"plan":"pro","n":3,"ok":true,"x":null}"#) {
            $0.session = id(900)
        }
        add(2, .page, name: "Say \"hi\" \\ back\nnew\ttab\u{01}\u{1f}/", source: "ferry·app", user: "ユーザー",
            properties: #"{"path":"/a\"b\\c\n","list":[1,2.5,-3,{"d":[]}]}"#)
        add(3, .screen, name: "Écran 🇫🇷", user: "u3", properties: "{\n  \"pretty\": 1,\r\n  \"y\": [ 1 ]\n}")
        add(4, .identify, name: "", properties: #"{"email":"a@example.com"}"#) { $0.anonymousID = "anon-4" }
        add(5, .group, name: "Acme", user: "u5", properties: #"{"name":"Acm\u00e9","big":12345678901234567,"e":1e3,"é":"ü"}"#) {
            $0.groupID = "g-5"
        }
        add(6, .alias, name: "", user: "u6", properties: #"{"a":1}"#) { $0.previousID = "old-6" }
        add(7, .alias, name: "", user: "u7", properties: "{}") { $0.previousID = "old-7" }
        add(8, .alias, name: "", user: "u8", properties: "not json") { $0.previousID = "old-8" }
        add(9, .track, name: "Raw", user: "u9", properties: "[1,2]")
        add(10, .track, name: "Empty", user: "u10", properties: "")
        add(11, .track, name: "Ctx", user: "u11", properties: #"{"k":"v"}"#) {
            $0.context = Array(#"{"ip":"203.0.113.9","locale":"de-DE","device":{"id":"d-1"}}"#.utf8)
            $0.anonymousID = "anon-11"
            $0.flags = .localOnly
            $0.onceKey = "once \"11\""
            $0.category = 7
        }
        add(12, .track, name: "Ferry key", user: "u12", properties: #"{"k":1}"#) {
            $0.context = Array("{\"ferry\":{\"x\":1},\n\"app\":{\"v\":\"1.0\"}}".utf8)
        }
        add(13, .track, name: "Empty ctx", user: "u13") { $0.context = Array("{}".utf8) }
        add(14, .track, name: "Not a ctx", user: "u14") { $0.context = Array("[\"nope\"]".utf8) }
        add(15, .track, name: "consent_updated", source: "ferryd",
            properties: #"{"anonymous_id":"agent-anon","ad_storage":"granted"}"#) { $0.category = ConsentCategories.consentCode }
        add(16, .track, name: "No user")
        add(17, .track, name: "", user: "u17")
        add(18, .group, name: "", user: "u18")
        add(19, .track, name: "Partial origin", user: "u19", properties: #"{"deep":[[[[{"a":[0.5,-0,"\u0041"]}]]]]}"#,
            metadata: EventOrigin(uid: 0, comm: "sh").metadata)
        add(20, .track, name: "No origin", user: "u20", metadata: RecordMetadata())
        add(21, .track, name: "Bad origin", user: "u21",
            metadata: RecordMetadata(fields: [.init(tag: EventOrigin.Tag.uid, value: [1, 2]),
                                              .init(tag: EventOrigin.Tag.comm, value: [0x66, 0xff, 0x6f]),
                                              .init(tag: EventOrigin.Tag.exe, value: Array("/bin/ü\u{7f}".utf8)),
                                              .init(tag: 200, value: [9])]))
        add(22, .screen, name: "Long", user: "u22", properties: "{\"pad\":\"" + String(repeating: "z", count: 2100) + "\"}") {
            $0.session = id(901)
            $0.groupID = "g\u{0}nul"
        }
        var stored = events.enumerated().map { index, pair in
            let frame = pair.0.encoded()
            return StoredEvent(position: LogPosition(segment: 1, offset: 16 + Int64(index) * 4096),
                               size: LogRecord.framedSize(frameSize: frame.count), acceptedAt: 1_714_564_800_000 + UInt64(index),
                               frame: frame, metadata: pair.1)
        }
        // An undecodable frame (a valid id, then a header that does not hold) and an erased record.
        var garbage = id(30).bytes
        garbage += [UInt8](repeating: 0xEE, count: 60)
        stored.append(StoredEvent(position: LogPosition(segment: 2, offset: 16), size: 200, acceptedAt: 1_714_564_800_100, frame: garbage))
        stored.append(StoredEvent(position: LogPosition(segment: 2, offset: 216), size: 200, acceptedAt: 1_714_564_800_101,
                                  frame: id(31).bytes + [UInt8](repeating: 0, count: 40), kind: .erased))
        return stored
    }

    static let disclosures: [(String, Disclosure?)] = [
        ("default", nil), ("all", .all), ("minimal", .minimal),
        ("origin", Disclosure(origin: true, process: false)), ("process", Disclosure(origin: false, process: true)),
        ("drop", Disclosure(origin: true, process: true, dropContext: ["ip", "device", "ferry"])),
    ]
    static let stamps: [[String: String]] = [
        [:], ["consent_seq": "3", "anonymous_id": "a-1", "ad_storage": "granted", "analytics_storage": "denied"],
    ]

    /// The text of the golden file: one labelled line per output.
    static func golden() throws -> [UInt8] {
        var out: [UInt8] = []
        func emit(_ label: String, _ bytes: [UInt8]) {
            out += Array(label.utf8) + [UInt8(ascii: " ")] + bytes
            if out.last != UInt8(ascii: "\n") { out.append(UInt8(ascii: "\n")) }
        }
        let corpus = corpus()
        let template = try SubjectTemplate("ferry.events.{type}.{source}")
        for (index, stored) in corpus.enumerated() {
            emit("object \(index)", JSONWriter.storedEventObject(stored))
            var line: [UInt8] = []
            JSONWriter.appendLine(for: stored, consent: Array(#"{"c":1}"#.utf8), to: &line)
            emit("line \(index)", line)
        }
        for (stampIndex, stamp) in stamps.enumerated() {
            for (name, disclosure) in disclosures {
                let batch = DeliveryBatch(events: corpus, consent: stamp, disclosure: disclosure)
                let tag = "stamp \(stampIndex) disclose \(name)"
                // The older line formats and body version 1 differ in the stamp only.
                for lineFormat in FileSink.lineFormats where name == "default" || lineFormat == FileSink.currentLineFormat {
                    var lines: [UInt8] = []
                    let consent = FileSink.consentJSON(stamp, lineFormat: lineFormat)
                    // The batch path the sink writes with (its origin memo included).
                    FileSink.appendLines(for: corpus, consent: consent, lineFormat: lineFormat, disclosure: disclosure ?? .all, to: &lines)
                    emit("file \(tag) format \(lineFormat)\n", lines)
                }
                for message in JetStreamSink.messages(for: batch, template: template) {
                    emit("jetstream \(tag) \(message.subject) \(message.messageID ?? "-")", message.payload)
                }
                for version in HTTPSinkConfiguration.bodyVersions where name == "default" || version == HTTPSinkConfiguration.currentBodyVersion {
                    emit("envelope \(tag) version \(version)", HTTPBatchBody.encode(batch, format: .envelope, version: version, sentAt: 1_714_564_800_999))
                    emit("segment \(tag) version \(version)", HTTPBatchBody.encode(batch, format: .segment, version: version, sentAt: 1_714_564_800_999))
                    let plan = HTTPBatchBody.segmentPlan(batch, version: version, maxMessageBytes: 2000, maxBatchBytes: 3000)
                    for rejection in plan.rejections {
                        emit("segment-rejection \(tag) version \(version) \(rejection.event.decodedID)", Array(rejection.reason.utf8))
                    }
                    for (partIndex, part) in plan.parts.enumerated() {
                        emit("segment-part \(tag) version \(version) \(partIndex)",
                             HTTPBatchBody.encode(part, format: .segment, version: version, sentAt: 1_714_564_800_999))
                    }
                }
            }
        }
        return out
    }

    @Test("Tests/Vectors/encoder-golden.txt is what the encoders write")
    func encodersMatchGolden() throws {
        let generated = try Self.golden()
        if ProcessInfo.processInfo.environment["FERRY_REGENERATE_VECTORS"] == "1" {
            try Data(generated).write(to: URL(fileURLWithPath: Self.goldenPath))
            return
        }
        guard let committed = FileManager.default.contents(atPath: Self.goldenPath) else {
            Issue.record("\(Self.goldenPath) is missing; write it with `\(Self.regenerate)`")
            return
        }
        if Array(committed) != generated {
            let old = String(decoding: committed, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
            let new = String(decoding: generated, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
            let line = (0..<min(old.count, new.count)).first { old[$0] != new[$0] } ?? min(old.count, new.count)
            Issue.record("""
                an encoder's output changed (first difference at line \(line + 1)): golden \
                \(line < old.count ? String(old[line]) : "<end>"), now \(line < new.count ? String(new[line]) : "<end>")
                """)
        }
    }

    @Test("a segment plan's messages make the very body of each part; a plan is reused only for the same events, stamp and disclosure")
    func segmentPlanMessages() throws {
        let corpus = Self.corpus()
        let batch = DeliveryBatch(events: corpus, consent: Self.stamps[1], disclosure: nil)
        let plan = HTTPBatchBody.segmentPlan(batch, maxMessageBytes: 2000, maxBatchBytes: 3000)
        #expect(plan.parts.count == plan.messages.count && plan.parts.count > 1)
        for (part, messages) in zip(plan.parts, plan.messages) {
            #expect(HTTPBatchBody.segment(messages: messages, consent: part.consent, sentAt: 5) == HTTPBatchBody.encode(part, format: .segment, sentAt: 5))
        }
        #expect(HTTPBatchBody.sameBatch(batch, batch))
        #expect(HTTPBatchBody.sameBatch(batch, DeliveryBatch(events: corpus, consent: Self.stamps[1])))
        #expect(!HTTPBatchBody.sameBatch(batch, DeliveryBatch(events: corpus, consent: Self.stamps[1], disclosure: .all)))
        #expect(!HTTPBatchBody.sameBatch(batch, DeliveryBatch(events: corpus, consent: Self.stamps[0])))
        #expect(!HTTPBatchBody.sameBatch(batch, DeliveryBatch(events: Array(corpus.dropLast()), consent: Self.stamps[1])))
        var changed = corpus
        changed[3].frame[changed[3].frame.count - 2] ^= 1
        #expect(!HTTPBatchBody.sameBatch(batch, DeliveryBatch(events: changed, consent: Self.stamps[1])))
        var erased = corpus
        erased[0].kind = .erased
        #expect(!HTTPBatchBody.sameBatch(batch, DeliveryBatch(events: erased, consent: Self.stamps[1])))
    }

    @Test("ISO 8601 written as bytes: the text the string version always gave")
    func iso8601() {
        for (ms, text) in [(0 as UInt64, "1970-01-01T00:00:00.000Z"), (1_714_564_800_999, "2024-05-01T12:00:00.999Z"),
                           (951_782_400_007, "2000-02-29T00:00:00.007Z"), (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
                           (253_402_300_800_000, "10000-01-01T00:00:00.000Z")] {
            #expect(CivilTime.iso8601(milliseconds: ms) == text)
        }
    }

    @Test("every output of the corpus is valid JSON (each line of the file sink's output)")
    func outputsAreJSON() throws {
        let corpus = Self.corpus()
        for (name, disclosure) in Self.disclosures {
            let batch = DeliveryBatch(events: corpus, consent: Self.stamps[1], disclosure: disclosure)
            var lines: [UInt8] = []
            for stored in corpus { FileSink.appendLine(for: stored, consent: FileSink.consentJSON(Self.stamps[1]), disclosure: disclosure ?? .all, to: &lines) }
            for line in lines.split(separator: UInt8(ascii: "\n")) {
                #expect((try? JSONSerialization.jsonObject(with: Data(line))) is [String: Any], "\(name): \(String(decoding: line, as: UTF8.self))")
            }
            for format in [HTTPSinkConfiguration.BodyFormat.envelope, .segment] {
                let body = HTTPBatchBody.encode(batch, format: format, sentAt: 1)
                #expect((try? JSONSerialization.jsonObject(with: Data(body))) is [String: Any], "\(name) \(format)")
            }
        }
    }
}
