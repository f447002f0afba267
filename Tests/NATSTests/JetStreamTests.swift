import FerryIntegrationKit
import FerryTestKit
import NATS
import Testing

/// The NATS wrapper against a real single-node `nats-server -js`.
@Suite("NATS JetStream wrapper", .serialized)
struct JetStreamTests {
    @Test("async publish is acknowledged, a repeated Nats-Msg-Id is acknowledged as a duplicate, fetchAll reads it all back")
    func publishDedupFetch() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try NATSServerProcess(in: dir)
        defer { server.cleanup() }
        try await server.waitUntilReady()

        let connection = try NATSConnection(options: .init(servers: server.urls, name: "wrapper-test"))
        defer { connection.close() }
        let js = try JetStreamContext(connection: connection, options: .init(maxPending: 8))
        #expect(try js.streamInfo("T") == nil)
        let created = try js.addStream(StreamConfiguration(name: "T", subjects: ["t.>"], duplicateWindow: .seconds(60)))
        #expect(created.duplicateWindow == .seconds(60))
        #expect(created.subjects == ["t.>"])

        // More messages than the window: the publisher stalls and resumes as acks arrive.
        let messages = (0..<50).map { i in
            JetStreamMessage(subject: "t.\(i % 3)", payload: Array("m\(i)".utf8), headers: [("X-Index", "\(i)")], messageID: "id-\(i)")
        }
        let first = js.publish(messages, ackWait: .seconds(5))
        let acks = try await first.acknowledgements(timeout: .seconds(10)).map { try $0.get() }
        #expect(acks.count == 50)
        #expect(acks.allSatisfy { !$0.duplicate && $0.stream == "T" })
        #expect(Set(acks.map(\.sequence)) == Set(1...50))

        let again = js.publish(Array(messages[10..<20]), ackWait: .seconds(5))
        let repeats = try await again.acknowledgements(timeout: .seconds(10)).map { try $0.get() }
        #expect(repeats.allSatisfy { $0.duplicate })
        #expect(try js.streamInfo("T")?.messages == 50)

        let read = try js.fetchAll(stream: "T")
        #expect(read.count == 50)
        #expect(read.map(\.messageID) == (0..<50).map { "id-\($0)" })
        #expect(read[7].headers["X-Index"] == "7")
        #expect(read[7].payload == Array("m7".utf8))
        #expect(read[7].sequence == 8)
        #expect(try js.fetchAll(stream: "T", subject: "t.1").count == 17)
    }

    @Test("a subject no stream captures fails with no responders; connecting to nothing retries in the background")
    func failures() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try NATSServerProcess(in: dir, start: false)
        defer { server.cleanup() }
        // Nothing listens yet: with retryOnFailedConnect the connection is returned, not connected.
        let connection = try NATSConnection(options: .init(servers: server.urls, reconnectWait: .milliseconds(50)))
        defer { connection.close() }
        #expect(!connection.isConnected)
        #expect(throws: NATSError.self) {
            _ = try NATSConnection(options: .init(servers: server.urls, retryOnFailedConnect: false))
        }
        try server.start(node: 0)
        try await server.waitUntilReady()
        try await eventually("the connection to come up") { connection.isConnected }
        let js = try JetStreamContext(connection: connection)
        let batch = js.publish([JetStreamMessage(subject: "nowhere", payload: [1])], ackWait: .seconds(2))
        let result = await batch.acknowledgements(timeout: .seconds(5))
        #expect(throws: NATSError.self) { try result[0].get() }
        if case .failure(let error) = result[0] { #expect(error.isNoResponders, "\(error)") }
    }
}
