@testable import FerryFileSink
import Foundation
@testable import FerryAgent
@testable import FerryHTTPSink
@testable import FerryJetStreamSink
@testable import FerryStorage
import FerryProtocol
import FerryTestKit
import NATS
import Testing

/// What leaves the host (docs/DELIVERY.md, "What leaves the host"): a body for a third party
/// (`segment`) carries no origin and no process details unless the sink's `disclose` opts in;
/// Ferry's own bodies (file line, JetStream message, `envelope`) carry them unless it opts out;
/// `disclose.dropContext` removes context keys in every body.
@Suite("Disclosure: what each body carries about the host")
struct DisclosureTests {
    static let origin = EventOrigin(uid: 1000, gid: 1000, pid: 4242, comm: "shop", exe: "/usr/bin/shop", unit: "shop.service")

    /// One track event from a process with a session, a context holding `ip` and `locale`, stored
    /// with its origin.
    static func batch(_ disclosure: Disclosure?) -> DeliveryBatch {
        var event = Events.make(7, name: "Signed Up")
        event.userID = "u1"
        event.session = EventIDGenerator().next()
        event.context = Array(#"{"ip":"203.0.113.9","locale":"de-DE","device":{"id":"d-1"}}"#.utf8)
        let frame = event.encoded()
        let stored = StoredEvent(position: LogPosition(segment: 1, offset: 16), size: LogRecord.framedSize(frameSize: frame.count),
                                 acceptedAt: 1_700_000_000_000, frame: frame, metadata: origin.metadata)
        return DeliveryBatch(events: [stored], consent: ["consent_seq": "3", "anonymous_id": "a-1"], disclosure: disclosure)
    }

    /// The event object of each body for `batch`: file line, JetStream message, envelope event, and
    /// the segment message's `context.ferry` merged with its `context` (under `"context"`).
    static func objects(_ batch: DeliveryBatch) throws -> [String: [String: Any]] {
        func parse(_ bytes: [UInt8]) throws -> [String: Any] {
            try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
        }
        var line: [UInt8] = []
        FileSink.appendLine(for: batch.events[0], disclosure: batch.disclosure ?? .all, to: &line)
        let jetStream = JetStreamSink.messages(for: batch, template: try SubjectTemplate("ferry.events.{type}"))[0].payload
        let envelope = try parse(HTTPBatchBody.encode(batch, format: .envelope, sentAt: 1))
        let segment = try parse(HTTPBatchBody.encode(batch, format: .segment, sentAt: 1))
        let message = try #require((segment["batch"] as? [[String: Any]])?.first)
        var ferry = try #require((message["context"] as? [String: Any])?["ferry"] as? [String: Any])
        ferry["context"] = (message["context"] as? [String: Any])?.filter { $0.key != "ferry" }
        return [
            "file": try parse(line), "jetstream": try parse(jetStream),
            "envelope": try #require((envelope["events"] as? [[String: Any]])?.first), "segment": ferry,
        ]
    }

    @Test("segment by default: no origin, pid, seq or session; the event, its ids, timestamps and the consent stamp stay")
    func segmentMinimalByDefault() throws {
        let segment = try #require(try Self.objects(Self.batch(nil))["segment"])
        #expect(segment["origin"] == nil && segment["pid"] == nil && segment["seq"] == nil && segment["session"] == nil, "\(segment)")
        #expect(segment["source"] as? String == "agent-tests" && segment["accepted_at"] is NSNumber)
        let body = try #require(try JSONSerialization.jsonObject(with: Data(HTTPBatchBody.encode(Self.batch(nil), format: .segment, sentAt: 1))) as? [String: Any])
        let message = try #require((body["batch"] as? [[String: Any]])?.first)
        #expect(Set(message.keys) == ["messageId", "type", "event", "userId", "timestamp", "properties", "context"])
        #expect(((body["context"] as? [String: Any])?["consent"] as? [String: Any])?["consent_seq"] as? NSNumber == 3)
        let text = String(decoding: HTTPBatchBody.encode(Self.batch(nil), format: .segment, sentAt: 1), as: UTF8.self)
        for detail in ["/usr/bin/shop", "shop.service", "4242", "\"uid\""] {
            #expect(!text.contains(detail), "\(detail) leaves the host: \(text)")
        }
        // The sink type's default says the same.
        #expect(HTTPSinkConfiguration(url: "https://api.segment.io/v1/batch", format: .segment).defaultDisclosure == .minimal)
        #expect(HTTPSinkConfiguration(url: "https://collector.example/v1").defaultDisclosure == .all)
        #expect(JetStreamSinkConfiguration().defaultDisclosure == .all && FileSinkSettings().defaultDisclosure == .all)
    }

    @Test("file, JetStream and envelope by default: origin, pid, seq and session")
    func ownInfrastructureKeepsEverything() throws {
        for (sink, object) in try Self.objects(Self.batch(nil)) where sink != "segment" {
            let origin = try #require(object["origin"] as? [String: Any], "\(sink)")
            #expect(origin["exe"] as? String == "/usr/bin/shop" && origin["unit"] as? String == "shop.service", "\(sink)")
            #expect(object["pid"] as? NSNumber == 4242 && object["seq"] as? NSNumber == 7 && object["session"] is String, "\(sink)")
        }
    }

    @Test("opting in sends origin, pid and seq to segment; opting out removes them from every body", arguments: [
        Disclosure(origin: true, process: false), Disclosure(origin: false, process: true), Disclosure.all, Disclosure.minimal,
    ])
    func eachChoice(_ disclosure: Disclosure) throws {
        for (sink, object) in try Self.objects(Self.batch(disclosure)) {
            #expect((object["origin"] != nil) == disclosure.origin, "\(sink): \(object)")
            #expect((object["pid"] != nil) == disclosure.process && (object["seq"] != nil) == disclosure.process, "\(sink): \(object)")
            if sink != "segment" { #expect((object["session"] != nil) == disclosure.process, "\(sink)") }
            #expect(object["accepted_at"] is NSNumber && object["source"] is String, "\(sink)")
        }
    }

    /// An event of the HTTP API's TCP listener: pid 0 (the kernel gives no pid for a TCP peer)
    /// and seq 0 (the HTTP API has no client sequence), its origin only uid and gid.
    static func unknownProcessBatch() -> DeliveryBatch {
        var event = Events.make(0, name: "Over TCP")
        event.pid = 0
        event.userID = "u1"
        let frame = event.encoded()
        let stored = StoredEvent(position: LogPosition(segment: 1, offset: 16), size: LogRecord.framedSize(frameSize: frame.count),
                                 acceptedAt: 1_700_000_000_000, frame: frame, metadata: EventOrigin(uid: 1000, gid: 1000).metadata)
        return DeliveryBatch(events: [stored], consent: [:], disclosure: .all)
    }

    @Test("a pid and seq the sender did not have (0: an HTTP API event over TCP) are left out of every body, even with process details disclosed")
    func unknownPidAndSeqLeftOut() throws {
        // The four bodies: file, JetStream, envelope and segment (``objects(_:)``).
        for (sink, object) in try Self.objects(Self.unknownProcessBatch()) {
            #expect(object["pid"] == nil && object["seq"] == nil, "\(sink): \(object)")
            #expect(object["source"] as? String == "agent-tests" && object["accepted_at"] is NSNumber, "\(sink): \(object)")
        }
    }

    @Test("dropContext removes those top-level context keys in every body, and nothing else")
    func dropContext() throws {
        let disclosure = Disclosure(origin: true, process: true, dropContext: ["ip", "device", "absent"])
        for (sink, object) in try Self.objects(Self.batch(disclosure)) {
            let context = try #require(object["context"] as? [String: Any], "\(sink)")
            #expect(Set(context.keys) == ["locale"], "\(sink): \(context)")
        }
        // A context without the keys keeps its bytes.
        let same = Array(#"{"locale":"de-DE"}"#.utf8)
        #expect(disclosure.filteredContext(same) == same)
    }

    @Test("the message size limit is judged on the message as sent: opting in to origin makes it larger")
    func sizeFollowsDisclosure() throws {
        let stored = Self.batch(nil).events[0]
        #expect(HTTPBatchBody.segmentEvent(stored, disclosure: .all).count > HTTPBatchBody.segmentEvent(stored, disclosure: .minimal).count)
    }
}
