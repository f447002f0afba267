import Foundation
@testable import FerryAgent
@testable import FerryJetStreamSink
import FerryIntegrationKit
@testable import FerryStorage
import FerryProtocol
import FerryTestKit
import NATS
import Testing

@Suite("JetStream sink erasure: purge of the user's subjects and the erasure message", .serialized)
struct JetStreamErasureTests {
    @Test("{user} is a lossless token: ids that sanitize alike get different tokens; a filter reaches exactly one user",
          arguments: [("a.b", "a_2Eb"), ("a_b", "a_5Fb"), ("a b", "a_20b"), ("", "_"), ("u-1", "u-1"), ("é", "_C3_A9")])
    func userToken(user: String, token: String) throws {
        #expect(SubjectTemplate.userToken(user) == token)
        let template = try SubjectTemplate("ferry.users.{user}.{type}")
        #expect(template.render(type: "track", category: 0, source: "s", user: user) == "ferry.users.\(token).track")
        #expect(template.userFilter(user) == "ferry.users.\(token).*")
        #expect(try SubjectTemplate("ferry.events.{type}").userFilter(user) == nil)
        #expect(throws: SubjectTemplate.Invalid.self) { try SubjectTemplate("ferry.u-{user}") }
    }

    @Test("erase: the user's subjects are purged from the stream, the others stay, the erasure message arrives once")
    func purgeAndMessage() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try NATSServerProcess(in: dir)
        defer { server.cleanup() }
        try await server.waitUntilReady()
        var configuration = JetStreamSinkConfiguration(servers: server.urls, subjectTemplate: "ferry.users.{user}.{type}",
                                                       streamSubjects: ["ferry.>"])
        configuration.erasureSubject = "ferry.erasures"
        try configuration.validate()
        let sink = JetStreamSink(configuration: configuration, logger: quietLogger)
        _ = try await sink.recover(checkpoint: nil)
        func event(_ sequence: UInt64, _ user: String) -> WireEvent {
            WireEvent(id: Events.ids.next(), timestamp: 1, sequence: sequence, pid: 1, type: .track, source: "s", name: "n",
                      userID: user, properties: Array("{}".utf8))
        }
        let events = [event(1, "u.1"), event(2, "u_1"), event(3, "u.1"), event(4, "")]
        _ = try await sink.deliver(DeliveryBatch(events: JetStreamSinkDeliveryTests.stored(events)))
        #expect(try await server.streamMessages("FERRY").count == 4)

        let request = SinkErasure(id: "0190f5c2-7a3b-7c4d-8e5f-0123456789ab", userID: "u.1", requestedAt: 1_795_309_000_123)
        let reference = try await sink.erase(request)
        #expect(reference?.hasPrefix("seq ") == true)
        let left = try await server.streamMessages("FERRY")
        // u.1's two events are gone; u_1 (same sanitized shape, another user) and the anonymous one stay.
        #expect(Set(left.filter { $0.subject != "ferry.erasures" }.compactMap(\.messageID)) == [events[1].id.description, events[3].id.description])
        let erasures = left.filter { $0.subject == "ferry.erasures" }
        #expect(erasures.count == 1)
        let erasure = try #require(erasures.first)
        let body = try #require(try JSONSerialization.jsonObject(with: Data(erasure.payload)) as? [String: Any])
        #expect(body["type"] as? String == "erasure" && body["userId"] as? String == "u.1" && body["id"] as? String == request.id)
        #expect(erasures.first?.messageID == "erasure-" + request.id)

        // Again (a retry after a crash): nothing more to purge, the message is a duplicate.
        _ = try await sink.erase(request)
        #expect(try await server.streamMessages("FERRY").filter { $0.subject == "ferry.erasures" }.count == 1)
        try await sink.shutdown()
    }

    @Test("a template without {user} and no erasure.subject cannot erase: a permanent failure")
    func nothingToEraseWith() async throws {
        let sink = JetStreamSink(configuration: JetStreamSinkConfiguration(servers: ["nats://127.0.0.1:9"]), logger: quietLogger)
        do {
            _ = try await sink.erase(SinkErasure(id: "x", userID: "u", requestedAt: 1))
            Issue.record("must fail")
        } catch let error as SinkError {
            #expect(error.disposition == .permanent)
        }
    }

    @Test("erasure.subject must be a plain subject the created stream captures")
    func subjectChecked() {
        var configuration = JetStreamSinkConfiguration()
        configuration.erasureSubject = "other.erasures"
        #expect(throws: AgentError.self) { try configuration.validate() }
        configuration.erasureSubject = "ferry.events.*"
        #expect(throws: AgentError.self) { try configuration.validate() }
        configuration.erasureSubject = "ferry.events.erasures"
        #expect(throws: Never.self) { try configuration.validate() }
    }
}
