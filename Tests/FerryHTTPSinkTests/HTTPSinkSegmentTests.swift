import Foundation
@testable import FerryAgent
@testable import FerryStorage
@testable import FerryHTTPSink
import FerryIntegrationKit
import FerryProtocol
import FerryTestKit
import Testing

/// `format: segment` against a Segment-like collector (FerryTestKit's ``SegmentCollector`` on a
/// real ``HTTPTestServer``): write key, limits, splitting, per-type shapes.
@Suite("HTTP sink, segment format")
struct HTTPSinkSegmentTests {
    static let writeKey = "wk_" + UUID().uuidString.replacingOccurrences(of: "-", with: "")

    /// A track event `e-<sequence>` for user `u<sequence>` (no user when `userID` is empty) with
    /// `padding` bytes of properties.
    static func event(_ sequence: UInt64, type: EventType = .track, name: String? = nil, userID: String? = nil,
                      padding: Int = 0) -> WireEvent {
        var event = Events.make(sequence, name: name ?? "e-\(sequence)", padding: padding)
        event.type = type
        event.userID = userID ?? "u\(sequence)"
        return event
    }

    static func batch(_ events: [WireEvent]) -> DeliveryBatch {
        DeliveryBatch(events: storedEvents(events), consent: HTTPSinkTests.consent)
    }

    /// A collector for ``writeKey``, a server answering with it (or with `handler`, given the
    /// collector), a segment sink with the write key in a file; runs `body`.
    static func withCollector<T>(
        handler: ((SegmentCollector) -> HTTPTestServer.Handler)? = nil,
        configure: (inout HTTPSinkConfiguration) -> Void = { _ in },
        _ body: (SegmentCollector, HTTPTestServer, HTTPSink, ScratchDirectory) async throws -> T
    ) async throws -> T {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        try writeBytes(Array((writeKey + "\n").utf8), to: scratch.appending("segment.key"))
        chmod(scratch.appending("segment.key"), 0o600)
        let collector = SegmentCollector(writeKey: writeKey)
        return try await HTTPSinkTests.withServer(handler?(collector) ?? collector.handler) { server in
            try await HTTPSinkTests.withSink(server, configure: {
                $0.format = .segment
                $0.writeKeyFile = scratch.appending("segment.key")
                configure(&$0)
            }) { sink in try await body(collector, server, sink, scratch) }
        }
    }

    @Test("an event with the app's messageId (the local HTTP API's) is sent with it; Ferry's id goes in context.ferry.id")
    func appMessageID() throws {
        var event = Self.event(1)
        event.extensions = [EventExtension(tag: .messageID, value: Array("order-42:retry-safe".utf8))]
        let message = try #require(JSONSerialization.jsonObject(with: Data(HTTPBatchBody.segmentEvent(storedEvents([event])[0]))) as? [String: Any])
        #expect(message["messageId"] as? String == "order-42:retry-safe")
        let ferry = (message["context"] as? [String: Any])?["ferry"] as? [String: Any]
        #expect(ferry?["id"] as? String == event.id.description)
        let other = Self.event(2)
        let plain = try #require(JSONSerialization.jsonObject(with: Data(HTTPBatchBody.segmentEvent(storedEvents([other])[0]))) as? [String: Any])
        #expect(plain["messageId"] as? String == other.id.description)
        #expect(((plain["context"] as? [String: Any])?["ferry"] as? [String: Any])?["id"] == nil)
    }

    @Test("the collector accepts every type's body; the write key goes as HTTP Basic with an empty password")
    func shapes() async throws {
        try await Self.withCollector { collector, server, sink, _ in
            let events = [
                Self.event(1, type: .track, name: "Signed Up"),
                Self.event(2, type: .identify, name: ""),
                Self.event(3, type: .page, name: "Pricing"),
                Self.event(4, type: .screen, name: "Home"),
            ]
            _ = try await sink.deliver(Self.batch(events))
            #expect(collector.refusals.isEmpty, "\(collector.refusals)")
            let request = try #require(server.requests.first)
            let expected = "Basic " + Data("\(Self.writeKey):".utf8).base64EncodedString()
            #expect(request.header("Authorization") == expected)
            let accepted = collector.accepted
            #expect(accepted.map(\.messageID) == events.map { $0.id.description })
            #expect(accepted.map(\.type) == ["track", "identify", "page", "screen"])
            #expect(accepted[0].json["event"] as? String == "Signed Up")
            #expect(accepted[1].json["traits"] is [String: Any])
            #expect(accepted[2].json["name"] as? String == "Pricing")
            #expect(accepted.allSatisfy { $0.userID != nil })
        }
    }

    @Test("group, alias, anonymousId and the event's context: the Segment fields, context merged with context.ferry")
    func eventModelFields() async throws {
        try await Self.withCollector { collector, _, sink, _ in
            var anonymous = Self.event(1, name: "Viewed", userID: "")
            anonymous.anonymousID = "anon-1"
            anonymous.context = Array(#"{"app": {"name": "shop", "version": "1.2"}, "locale": "de-DE", "ip": "10.0.0.1"}"#.utf8)
            var group = Self.event(2, type: .group, name: "")
            group.groupID = "g-42"
            group.properties = Array(#"{"plan":"team"}"#.utf8)
            var alias = Self.event(3, type: .alias, name: "", userID: "u-new")
            alias.previousID = "anon-1"
            var clientFerry = Self.event(4, type: .identify, name: "")
            clientFerry.context = Array(#"{"ferry":"mine","timezone":"Europe/Berlin"}"#.utf8)
            var emptyContext = Self.event(5, type: .page, name: "Home")
            emptyContext.context = Array("{ }".utf8)
            _ = try await sink.deliver(Self.batch([anonymous, group, alias, clientFerry, emptyContext]))
            #expect(collector.refusals.isEmpty, "\(collector.refusals)")
            let accepted = collector.accepted.map(\.json)
            try #require(accepted.count == 5)

            #expect(accepted[0]["anonymousId"] as? String == "anon-1" && accepted[0]["userId"] == nil)
            let context = try #require(accepted[0]["context"] as? [String: Any])
            #expect(Set(context.keys) == ["app", "locale", "ip", "ferry"])
            #expect((context["app"] as? [String: Any])?["version"] as? String == "1.2")
            #expect((context["ferry"] as? [String: Any])?["source"] as? String == "agent-tests")

            #expect(accepted[1]["type"] as? String == "group" && accepted[1]["groupId"] as? String == "g-42")
            #expect((accepted[1]["traits"] as? [String: Any])?["plan"] as? String == "team")
            #expect(accepted[2]["type"] as? String == "alias" && accepted[2]["previousId"] as? String == "anon-1")
            #expect(accepted[2]["userId"] as? String == "u-new" && accepted[2]["properties"] == nil, "alias has no properties in Segment's spec")
            let aliasFerry = (accepted[2]["context"] as? [String: Any])?["ferry"] as? [String: Any]
            #expect((aliasFerry?["properties"] as? [String: Any])?["i"] as? NSNumber == 3, "kept under context.ferry.properties")

            let replaced = try #require(accepted[3]["context"] as? [String: Any])
            #expect(replaced["timezone"] as? String == "Europe/Berlin")
            #expect((replaced["ferry"] as? [String: Any])?["source"] as? String == "agent-tests", "Ferry's fields replace the client's ferry key")
            #expect(Set((accepted[4]["context"] as? [String: Any] ?? [:]).keys) == ["ferry"])
        }
    }

    @Test("the agent's own consent_updated is a valid message: its anonymousId, or for one queued by an earlier release (none in the frame) the anonymous_id of its properties")
    func agentConsentEvents() throws {
        let properties = Array(#"{"change":"consent","anonymous_id":"0190f5c2-7a3b-7c4d-8e5f-0123456789ab"}"#.utf8)
        var legacy = WireEvent(id: EventIDGenerator().next(), timestamp: 1, sequence: 1, pid: 1, type: .track,
                               category: ConsentCategories.consentCode, source: "ferryd", name: "consent_updated", properties: properties)
        var current = legacy
        current.anonymousID = "a-host"
        for (event, expected) in [(legacy, "0190f5c2-7a3b-7c4d-8e5f-0123456789ab"), (current, "a-host")] {
            let stored = storedEvents([event])[0]
            let message = HTTPBatchBody.segmentEvent(stored)
            #expect(HTTPBatchBody.segmentRejection(stored, messageBytes: message.count) == nil)
            let json = try #require(try JSONSerialization.jsonObject(with: Data(message)) as? [String: Any])
            #expect(json["anonymousId"] as? String == expected && json["userId"] == nil, "\(json)")
        }
        // Only the agent's own: an app's event without a user is still refused.
        legacy.source = "app"
        let app = storedEvents([legacy])[0]
        #expect(HTTPBatchBody.segmentRejection(app, messageBytes: 10)?.contains("needs a userId or an anonymousId") == true)
    }

    @Test("a group without groupId and an alias without previousId are rejected with the reason")
    func eventModelRejections() {
        var group = Self.event(1, type: .group, name: "")
        var alias = Self.event(2, type: .alias, name: "")
        let plan = HTTPBatchBody.segmentPlan(Self.batch([group, alias]))
        #expect(plan.rejections.map(\.reason) == ["segment: a group message needs a groupId; the event has none",
                                                   "segment: an alias message needs a previousId and a userId; the event lacks previousId"])
        group.groupID = "g"
        alias.previousID = "p"
        var anonymousOnly = Self.event(3, userID: "")
        anonymousOnly.anonymousID = "a"
        let fixed = HTTPBatchBody.segmentPlan(Self.batch([group, alias, anonymousOnly]))
        #expect(fixed.rejections.isEmpty && fixed.parts.map(\.events.count) == [3])
    }

    @Test("the reason for a message without userId or anonymousId names its type with the right article", arguments: [
        (EventType.track, "a track"), (.screen, "a screen"), (.identify, "an identify"), (.group, "a group"),
        (.alias, "an alias"), (.page, "a page"),
    ])
    func missingIdentityReason(type: EventType, phrase: String) {
        var event = Self.event(1, type: type, userID: "")
        event.groupID = "g"
        event.previousID = "p"
        let plan = HTTPBatchBody.segmentPlan(Self.batch([event]))
        #expect(plan.rejections.map(\.reason) == ["segment: \(phrase) message needs a userId or an anonymousId; the event has neither"])
    }

    @Test("an event without userId, a track without a name and a message over 32 KB are rejected with the reason; the rest is sent")
    func rejections() async throws {
        try await Self.withCollector { collector, server, sink, _ in
            let events = [
                Self.event(1),
                Self.event(2, userID: ""),
                Self.event(3, padding: 40_000),
                Self.event(4, name: ""),
                Self.event(5),
            ]
            let batch = Self.batch(events)
            let rejections = sink.rejections(in: batch)
            #expect(rejections.map(\.event.decodedID) == [events[1].id, events[2].id, events[3].id])
            #expect(rejections[0].reason == "segment: a track message needs a userId or an anonymousId; the event has neither")
            #expect(rejections[1].reason.hasPrefix("segment: the message is 40"), "\(rejections[1].reason)")
            #expect(rejections[1].reason.hasSuffix("bytes, over Segment's limit of 32000 bytes per message"))
            #expect(rejections[2].reason == "segment: a track message needs an event name; the event's name is empty")

            // Handed the whole batch anyway (a replayed dead letter), the sink refuses it for good
            // without sending anything.
            let error = await HTTPSinkTests.sinkError { _ = try await sink.deliver(batch) }
            #expect(error?.disposition == .permanent)
            #expect(error?.message == rejections[0].reason + " (and 2 more events that Segment cannot accept)")
            #expect(server.requests.isEmpty)

            // What the delivery loop sends: the rest.
            _ = try await sink.deliver(Self.batch([events[0], events[4]]))
            #expect(collector.accepted.map(\.messageID) == [events[0].id.description, events[4].id.description])
            // The collector would have refused them too.
            for event in [events[1], events[2], events[3]] {
                #expect(throws: FerryTestKitError.self) {
                    try SegmentCollector.validate(body: HTTPBatchBody.segment(Self.batch([event]), sentAt: 0))
                }
            }
        }
    }

    @Test("a message of exactly 32,000 bytes is sent, one byte more is rejected")
    func messageLimitBoundary() async throws {
        let base = HTTPBatchBody.segmentEvent(storedEvents([Self.event(1, padding: 1)])[0]).count
        let exact = Self.event(1, padding: 1 + HTTPBatchBody.segmentMaxMessageBytes - base)
        let over = Self.event(2, padding: 2 + HTTPBatchBody.segmentMaxMessageBytes - base)
        let stored = storedEvents([exact, over])
        #expect(HTTPBatchBody.segmentEvent(stored[0]).count == 32_000)
        #expect(HTTPBatchBody.segmentEvent(stored[1]).count == 32_001)
        try await Self.withCollector { collector, _, sink, _ in
            let batch = Self.batch([exact, over])
            #expect(sink.rejections(in: batch).map(\.event.decodedID) == [over.id])
            _ = try await sink.deliver(Self.batch([exact]))
            #expect(collector.accepted.map(\.raw.count) == [32_000])
        }
    }

    @Test("a batch over 500 KB goes out in parts under 500 KB, in order, each event once, each part with its own key")
    func split() async throws {
        // Three requests of ~500 KB each through the debug-built test server and collector, which
        // parses every message: a whole parallel test run on two cores can take it past the
        // harness's 10 s, so this test allows a minute (it asserts what arrives, not how fast).
        try await Self.withCollector(configure: { $0.requestTimeoutMilliseconds = 60_000 }) { collector, server, sink, _ in
            let events = (1...40).map { Self.event(UInt64($0), padding: 30_000) }
            let batch = Self.batch(events)
            #expect(HTTPBatchBody.segment(batch, sentAt: 0).count > 1_000_000)
            _ = try await sink.deliver(batch)
            #expect(collector.refusals.isEmpty, "\(collector.refusals)")
            let requests = server.requests
            #expect(requests.count == 3, "\(requests.map(\.body.count))")
            #expect(requests.allSatisfy { $0.body.count <= 500_000 })
            // Greedy: each part but the last is as full as it can be.
            for request in requests.dropLast() {
                #expect(request.body.count + 30_100 > 500_000, "\(request.body.count)")
            }
            #expect(collector.accepted.map(\.messageID) == events.map { $0.id.description })
            for request in requests {
                let ids = request.batchEventIDs
                #expect(request.header("Idempotency-Key") == "\(ids[0])-\(ids.count)")
                #expect(request.header("Ferry-Batch-Size") == String(ids.count))
            }
            print("[measure] 40 messages of ~30 KB (\(HTTPBatchBody.segment(batch, sentAt: 0).count) bytes) in \(requests.count) requests of \(requests.map(\.body.count)) bytes")
        }
    }

    @Test("a later part failing with 503: the retry of the batch sends only the parts not yet acknowledged")
    func partialFailure() async throws {
        try await Self.withCollector(handler: { collector in
            { request in request.index == 1 ? .status(503, body: "busy") : collector.answer(request) }
        }) { collector, server, sink, _ in
            let events = (1...40).map { Self.event(UInt64($0), padding: 30_000) }
            let batch = Self.batch(events)
            let error = await HTTPSinkTests.sinkError { _ = try await sink.deliver(batch) }
            #expect(error?.disposition == .retry(after: nil))
            let first = collector.accepted.count
            #expect(first > 0 && first < 40)
            _ = try await sink.deliver(batch)  // the delivery loop's retry: the same batch
            #expect(collector.accepted.map(\.messageID) == events.map { $0.id.description }, "every event exactly once")
            #expect(server.requests.count == 4, "part 1, part 2 refused, then parts 2 and 3")
            // The next batch is not affected by what the sink remembered.
            let next = Self.batch([Self.event(41)])
            _ = try await sink.deliver(next)
            _ = try await sink.deliver(next)  // sent again when handed again after success
            #expect(collector.accepted.suffix(2).map(\.messageID) == [next.events[0].decodedID.description, next.events[0].decodedID.description])
        }
    }

    @Test("a wrong write key: 401 is permanent, the key never shows; after the file is fixed a reload makes it work")
    func wrongWriteKey() async throws {
        let logs = CapturedLogs()
        try await Self.withCollector(handler: { collector in
            // A collector that echoes the Authorization header in its error body.
            { request in
                let answer = collector.answer(request)
                return answer.status == 401 ? .status(401, body: "invalid write key: \(request.header("Authorization") ?? "-")") : answer
            }
        }) { collector, server, sink, scratch in
            let wrong = "wk_wrong_" + UUID().uuidString
            try writeBytes(Array(wrong.utf8), to: scratch.appending("segment.key"))
            await sink.reloadCredentials()
            let batch = Self.batch([Self.event(1)])
            let error = await HTTPSinkTests.sinkError { _ = try await sink.deliver(batch) }
            #expect(error?.disposition == .permanent)
            #expect(error?.upstreamStatus == 401)
            #expect(error?.upstreamBody == "invalid write key: Basic <redacted>")
            for text in [error?.message ?? "", error?.upstreamBody ?? "", sink.description, logs.text] {
                #expect(!text.contains(wrong) && !text.contains(Data("\(wrong):".utf8).base64EncodedString()))
            }
            #expect(collector.accepted.isEmpty)

            try writeBytes(Array(Self.writeKey.utf8), to: scratch.appending("segment.key"))
            _ = await HTTPSinkTests.sinkError { _ = try await sink.deliver(batch) }  // still the old key: not re-read by itself
            await sink.reloadCredentials()
            _ = try await sink.deliver(batch)
            #expect(collector.accepted.map(\.messageID) == [batch.events[0].decodedID.description])
            #expect(server.requests.count == 3)
        }
    }

    @Test("a write key that cannot be one (empty, a colon, a space) stops the sink at recover()",
          arguments: ["", "\n", "a:b", "a b", "clé"])
    func badWriteKey(key: String) async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        try writeBytes(Array(key.utf8), to: scratch.appending("key"))
        let sink = HTTPSink(configuration: HTTPSinkConfiguration(url: "http://127.0.0.1:9/", writeKeyFile: scratch.appending("key"), format: .segment),
                            logger: quietLogger)
        await #expect(throws: AgentError.self) { _ = try await sink.recover(checkpoint: nil) }
        let missing = HTTPSink(configuration: HTTPSinkConfiguration(url: "http://127.0.0.1:9/", writeKeyFile: scratch.appending("nope")), logger: quietLogger)
        await #expect(throws: AgentError.self) { _ = try await missing.recover(checkpoint: nil) }
        try await sink.shutdown()
        try await missing.shutdown()
    }
}
