@testable import FerryFileSink
@testable import FerryAgent
import FerryIntegrationKit
@testable import FerryStorage
@testable import FerryJetStreamSink
import FerryProtocol
import FerryTestKit
import Foundation
import NATS
import Testing

@Suite("JetStream sink: subject template and configuration")
struct JetStreamSinkConfigurationTests {
    @Test("rendering replaces each placeholder with one sanitised token", arguments: [
        ("ferry.events.{category}.{type}", "track", UInt8(0), "app", "ferry.events.0.track"),
        ("ferry.{source}.{type}", "identify", 3, "my.app *>", "ferry.my_app___.identify"),
        ("e.{source}", "track", 0, "", "e._"),
        ("e.src-{source}-x.{category}", "page", 255, "Zoë", "e.src-Zo_-x.255"),
        ("plain.subject", "track", 1, "a", "plain.subject"),
    ])
    func render(template: String, type: String, category: UInt8, source: String, expected: String) throws {
        #expect(try SubjectTemplate(template).render(type: type, category: category, source: source) == expected)
    }

    @Test("invalid templates are refused with a reason", arguments: [
        "", "a..b", "a.{nope}", "a.{type", "a.*", "a.>", "a b.{type}", ".a",
    ])
    func invalidTemplate(template: String) {
        #expect(throws: SubjectTemplate.Invalid.self) { try SubjectTemplate(template) }
    }

    @Test("stream subjects must capture every rendered subject when the sink creates the stream")
    func coverage() throws {
        try JetStreamSinkConfiguration().validate()
        try JetStreamSinkConfiguration(subjectTemplate: "x.{source}.{type}", streamSubjects: ["x.*.*"]).validate()
        try JetStreamSinkConfiguration(subjectTemplate: "x.{source}.{type}", streamSubjects: ["y.>", "x.>"]).validate()
        #expect(throws: AgentError.self) {
            try JetStreamSinkConfiguration(subjectTemplate: "x.{source}.{type}", streamSubjects: ["x.*.track"]).validate()
        }
        #expect(throws: AgentError.self) {
            try JetStreamSinkConfiguration(subjectTemplate: "x.{type}", streamSubjects: ["x.*.*"]).validate()
        }
        // Not creating the stream: the operator's stream decides.
        try JetStreamSinkConfiguration(subjectTemplate: "x.{type}", createStream: false, streamSubjects: ["other"]).validate()
        #expect(throws: AgentError.self) { try JetStreamSinkConfiguration(replicas: 2).validate() }
        #expect(throws: AgentError.self) { try JetStreamSinkConfiguration(servers: []).validate() }
        #expect(throws: AgentError.self) { try JetStreamSinkConfiguration(stream: "a.b").validate() }
        #expect(throws: AgentError.self) { try JetStreamSinkConfiguration(streamSubjects: ["a.>.b"]).validate() }
    }

    static func load(_ json: String) throws -> AgentConfiguration {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.appending("ferryd.json")
        try Data(json.utf8).write(to: URL(fileURLWithPath: path))
        return try AgentConfiguration.load(fromFile: path, base: AgentConfiguration(runtimeDirectory: "/tmp/fj-base", dataDirectory: "/tmp/fj-data"),
                                           sinkKinds: .builtIn.registering(.jetstream))
    }

    static func error(_ json: String) -> String {
        do {
            _ = try load(json)
            return "no error"
        } catch {
            return "\(error)"
        }
    }

    @Test("every bad value of one jetstream sink is reported, each on its own line with the sink's key path")
    func everyValueError() {
        let message = Self.error(#"""
        {"sinks": [{"name": "js", "type": "jetstream", "servers": ["nats://a b"], "stream": "a.b", "replicas": 2,
                    "maxInFlight": 0, "eventsPerMessage": 0}]}
        """#)
        let lines = message.split(separator: "\n").filter { $0.contains("sinks[0]: sink (jetstream): ") }
        for part in ["server URL \"nats://a b\"", "stream name \"a.b\"", "replicas must be 1, 3 or 5", "maxInFlight must be at least 1",
                     "eventsPerMessage must be"] {
            #expect(lines.contains { $0.contains(part) }, "\(part) missing from: \(message)")
        }
        #expect(lines.count == 5, "\(message)")
    }

    @Test("a jetstream sink object sets every field it names")
    func parse() throws {
        let config = try Self.load("""
        {"sink": {"type": "jetstream", "servers": ["nats://a:1", "nats://b:2"], "subjectTemplate": "ev.{source}.{type}",
                  "stream": "EV", "createStream": false, "streamSubjects": ["ev.>"], "replicas": 3,
                  "duplicateWindowSeconds": 600, "maxInFlight": 64, "ackTimeoutMilliseconds": 9000,
                  "connectTimeoutMilliseconds": 700, "reconnectWaitMilliseconds": 90,
                  "credentialsFile": "/etc/n.creds", "tokenFile": "/etc/n.token"}}
        """)
        #expect(config.sinks.first?.settings(as: JetStreamSinkConfiguration.self) == .jetstream(JetStreamSinkConfiguration(
            servers: ["nats://a:1", "nats://b:2"], subjectTemplate: "ev.{source}.{type}", stream: "EV", createStream: false,
            streamSubjects: ["ev.>"], replicas: 3, duplicateWindowSeconds: 600, maxInFlight: 64, ackTimeoutMilliseconds: 9000,
            connectTimeoutMilliseconds: 700, reconnectWaitMilliseconds: 90, credentialsFile: "/etc/n.creds", tokenFile: "/etc/n.token")))
        #expect(try Self.load(#"{"sink": {"type": "jetstream"}}"#).sinks.first?.settings(as: JetStreamSinkConfiguration.self) == .jetstream(JetStreamSinkConfiguration()))
        // The file sink still parses as before.
        #expect(try Self.load(#"{"sink": {"directory": "/tmp/x"}}"#).sinks.first?.settings(as: FileSinkSettings.self) == .file(directory: "/tmp/x", maxFileBytes: 64 << 20))
    }

    @Test("daemon/ferryd.jetstream.example.json loads")
    func exampleFile() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let config = try AgentConfiguration.load(fromFile: root.path + "/daemon/ferryd.jetstream.example.json",
                                                 sinkKinds: .builtIn.registering(.jetstream))
        guard let jetstream = config.sinks.first?.settings(as: JetStreamSinkConfiguration.self) else {
            Issue.record("not a jetstream sink: \(String(describing: config.sinks))")
            return
        }
        #expect(jetstream.replicas == 3)
        #expect(jetstream.servers.count == 3)
        #expect(jetstream.duplicateWindowSeconds == 120)
    }

    @Test("mistakes in a jetstream sink object are errors naming the key", arguments: [
        (#"{"sink": {"type": "jetstream", "server": ["nats://a:1"]}}"#, "sink.server: unknown key"),
        (#"{"sink": {"type": "jetstream", "directory": "/tmp"}}"#, "sink.directory: unknown key"),
        (#"{"sink": {"type": "jetstream", "createStream": "yes"}}"#, "sink.createStream: expected true or false"),
        (#"{"sink": {"type": "jetstream", "servers": []}}"#, "servers must list at least one URL"),
        (#"{"sink": {"type": "jetstream", "servers": "nats://a:1"}}"#, "sink.servers: expected an array of strings"),
        (#"{"sink": {"type": "jetstream", "replicas": 1.5}}"#, "sink.replicas: expected an integer"),
        (#"{"sink": {"type": "jetstream", "replicas": 2}}"#, "replicas must be 1, 3 or 5"),
        (#"{"sink": {"type": "jetstream", "subjectTemplate": "a.{kind}"}}"#, "unknown placeholder {kind}"),
        (#"{"sink": {"type": "jetstream", "subjectTemplate": "other.{type}"}}"#, "do not capture every subject"),
        (#"{"sink": {"type": "kafka"}}"#, "sink.type: expected one of: file, jetstream"),
        (#"{"sink": {"type": "file", "stream": "X"}}"#, "sink.stream: unknown key"),
    ])
    func parseErrors(json: String, expected: String) {
        let message = Self.error(json)
        #expect(message.contains(expected), "\(message)")
    }
}

/// The sink against a real single-node `nats-server -js`.
@Suite("JetStream sink: delivery", .serialized)
struct JetStreamSinkDeliveryTests {
    static func stored(_ events: [WireEvent]) -> [StoredEvent] {
        events.enumerated().map { index, event in
            let frame = event.encoded()
            return StoredEvent(position: LogPosition(segment: 1, offset: 16 + Int64(index) * 1000),
                               size: LogRecord.framedSize(frameSize: frame.count), acceptedAt: 1_700_000_000_000, frame: frame)
        }
    }

    @Test("a batch is stored once per event with id, headers and JSON body; re-delivering it stores nothing new")
    func deliverAndRedeliver() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try NATSServerProcess(in: dir)
        defer { server.cleanup() }
        try await server.waitUntilReady()

        let sink = JetStreamSink(configuration: JetStreamSinkConfiguration(servers: server.urls, maxInFlight: 16), logger: quietLogger)
        #expect(try await sink.recover(checkpoint: nil) == nil)
        // More than one chunk (JetStreamSink.chunkSize) of events: all arrive, in log order.
        let events = (1...300).map { Events.make(UInt64($0), source: $0 % 2 == 0 ? "app.even" : "odd") }
        #expect(events.count > 2 * JetStreamSink.chunkSize)
        let batch = DeliveryBatch(events: Self.stored(events), consent: ["ad_storage": "denied", "analytics_storage": "granted"])
        _ = try await sink.deliver(batch)

        var messages = try await server.streamMessages("FERRY")
        #expect(messages.map(\.messageID) == events.map(\.id.description))
        let first = try #require(messages.first)
        #expect(first.subject == "ferry.events.0.track")
        #expect(first.headers["Ferry-Batch"] == batch.idempotencyKey)
        // Two headers only: the consent stamp and the origin are in the body.
        #expect(Set(first.headers.keys) == ["Nats-Msg-Id", "Ferry-Batch"])
        let body = try #require(try JSONSerialization.jsonObject(with: Data(first.payload)) as? [String: Any])
        #expect(body["id"] as? String == events[0].id.description)
        #expect(body["source"] as? String == "odd")
        #expect((body["properties"] as? [String: Any])?["i"] as? Int == 1)
        let consent = try #require(body["consent"] as? [String: Any])
        #expect(consent["ad_storage"] as? String == "denied")
        #expect(consent["analytics_storage"] as? String == "granted")
        #expect(body.keys.contains("origin"))
        // The body is the file sink's line object (without `line_format`) for the same batch.
        var line: [UInt8] = []
        FileSink.appendLine(for: Self.stored(events)[0], consent: FileSink.consentJSON(batch.consent), to: &line)
        var fileObject = try #require(try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any])
        #expect(fileObject.removeValue(forKey: "line_format") != nil)
        #expect(NSDictionary(dictionary: fileObject).isEqual(to: body))

        // The same batch again (a retry after a lost cursor update): every PubAck is a duplicate.
        _ = try await sink.deliver(batch)
        // An overlapping batch: only the new events are stored.
        let more = (301...310).map { Events.make(UInt64($0)) }
        _ = try await sink.deliver(DeliveryBatch(events: Self.stored(Array(events.suffix(5)) + more)))
        messages = try await server.streamMessages("FERRY")
        #expect(messages.count == 310)
        #expect(Set(messages.compactMap(\.messageID)) == Set((events + more).map(\.id.description)))
        let info = try #require(try await server.streamInfo("FERRY"))
        #expect(info.duplicateWindow == .seconds(120))
        try await sink.shutdown()
    }

    @Test("each message's subject is rendered from its own event, also when sources, types and categories alternate")
    func subjectsPerEvent() throws {
        let template = try SubjectTemplate("ferry.{source}.{type}.{category}")
        var events: [WireEvent] = []
        for index in 1...12 {
            var event = Events.make(UInt64(index), source: ["app.a", "app.b", "app.b"][index % 3])
            if index % 4 == 0 { event.type = .identify }
            if index % 5 == 0 { event.category = 7 }
            events.append(event)
        }
        let messages = JetStreamSink.messages(for: DeliveryBatch(events: Self.stored(events)), template: template)
        #expect(messages.map(\.subject) == events.map {
            template.render(type: $0.type.description, category: $0.category, source: $0.source)
        })
        #expect(messages.map(\.messageID) == events.map(\.id.description))
        #expect(messages.allSatisfy { $0.headers.count == 1 && $0.headers[0].0 == "Ferry-Batch" })
    }

    @Test("a missing stream with createStream false is permanent; a server that is down is retryable")
    func failures() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try NATSServerProcess(in: dir)
        defer { server.cleanup() }
        try await server.waitUntilReady()
        let batch = DeliveryBatch(events: Self.stored([Events.make(1)]))

        let strict = JetStreamSink(configuration: JetStreamSinkConfiguration(servers: server.urls, createStream: false), logger: quietLogger)
        do {
            _ = try await strict.deliver(batch)
            Issue.record("delivered to a missing stream")
        } catch let error as SinkError {
            #expect(error.disposition == .permanent, "\(error)")
        }
        try await strict.shutdown()

        server.kill9(node: 0)
        let sink = JetStreamSink(configuration: JetStreamSinkConfiguration(
            servers: server.urls, ackTimeoutMilliseconds: 300, connectTimeoutMilliseconds: 200), logger: quietLogger)
        do {
            _ = try await sink.deliver(batch)
            Issue.record("delivered with the server down")
        } catch let error as SinkError {
            #expect(error.disposition == .retry(after: nil), "\(error)")
            #expect(error.message.contains("not connected to NATS"), "\(error)")
        }
        // The server comes back: the same sink delivers (its connection reconnected).
        try server.start(node: 0)
        try await server.waitUntilReady()
        try await eventually("the batch to be delivered once the server is back", timeout: .seconds(20)) {
            _ = try await sink.deliver(batch)
            return true
        }
        #expect(try await server.streamMessages("FERRY").map(\.messageID) == [batch.events[0].decodedID.description])
        try await sink.shutdown()
    }

    /// docs/DELIVERY.md, "Routes and consent per sink": nothing an attempt published reaches the
    /// stream after the attempt failed. Without closing the connection, nats.c would send the
    /// failed attempt's publishes (kept while it reconnects) once the server is back, on the same
    /// connection and before the next batch's.
    @Test("an attempt failing while the client reconnects leaves nothing behind: its publishes never reach the stream")
    func failedAttemptLeavesNothing() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try NATSServerProcess(in: dir)
        defer { server.cleanup() }
        try await server.waitUntilReady()
        let sink = JetStreamSink(configuration: JetStreamSinkConfiguration(
            servers: server.urls, ackTimeoutMilliseconds: 300, connectTimeoutMilliseconds: 200, reconnectWaitMilliseconds: 50), logger: quietLogger)
        let first = DeliveryBatch(events: Self.stored([Events.make(1)]))
        _ = try await sink.deliver(first)
        server.kill9(node: 0)
        let failed = DeliveryBatch(events: Self.stored([Events.make(2), Events.make(3)]))
        do {
            _ = try await sink.deliver(failed)
            Issue.record("delivered with the server down")
        } catch let error as SinkError {
            #expect(error.disposition == .retry(after: nil) && error.message.contains("the connection is closed"), "\(error)")
        }
        try server.start(node: 0)
        try await server.waitUntilReady()
        let later = DeliveryBatch(events: Self.stored([Events.make(4)]))
        try await eventually("the next batch delivered once the server is back", timeout: .seconds(20)) {
            _ = try await sink.deliver(later)
            return true
        }
        let stored = try await server.streamMessages("FERRY").map(\.messageID)
        #expect(stored == (first.events + later.events).map { $0.decodedID.description }, "\(stored)")
        try await sink.shutdown()
    }
}
