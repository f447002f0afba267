#if canImport(Glibc)
import Glibc
#endif
import FerryIntegrationKit
import FerryProtocol
import FerryTestKit
import Foundation
import Testing

/// The HTTP API's events through the stages every ingest path shares, seen from outside: the bus
/// and the file sink of the real `ferryd`, fed over its Unix socket and its TCP listener.
@Suite("HTTP API events on the bus and in the file sink")
struct HTTPIngestBusTests {
    static func agent(_ dir: TemporaryDirectory, port: Int) throws -> AgentProcess {
        let config = try AgentProcess.configurationArguments(
            #"{"consent": {"initialConsent": {"analytics": "granted"}}, "http": {"listen": "127.0.0.1:\#(port)"}}"#, in: dir)
        return try AgentProcess(in: dir, extraArguments: config)
    }

    static func track(_ messageID: String, _ name: String, extra: String = "") -> String {
        #"{"batch":[{"type":"track","event":"\#(name)","userId":"u1","messageId":"\#(messageID)","properties":{}\#(extra)}]}"#
    }

    @Test("a message its own context.consent.categoryPreferences denies is published on `blocked` with its code as the reason")
    func categoryPreferencesBlockedOnTheBus() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, port: try freeLocalPort())
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let tail = try BusTail(topics: ["blocked", "accepted"], environment: agent.environment, outputDirectory: dir.path)
        defer { tail.cleanup() }
        try await tail.waitUntilSubscribed()

        let body = Self.track("m-denied", "Denied By Message",
                              extra: #","context":{"consent":{"categoryPreferences":{"analytics":false}}}"#)
        let response = try await httpPost(unixSocket: agent.runtimeDirectory + "/http", path: "/v1/batch", json: body)
        #expect(response.status == 200, "\(response)")
        #expect(response.body.contains("category_preferences:analytics"), "\(response)")
        try await eventually("the blocked message on the bus") {
            try tail.messages(topic: "blocked").contains { $0["name"] as? String == "Denied By Message" }
        }
        let blocked = try #require(try tail.messages(topic: "blocked").first { $0["name"] as? String == "Denied By Message" })
        #expect(blocked["reason"] as? String == "category_preferences:analytics", "\(blocked)")
        #expect(blocked["type"] as? String == "track", "\(blocked)")
        #expect(try tail.messages(topic: "accepted").allSatisfy { $0["name"] as? String != "Denied By Message" })
    }

    @Test("an unpaired surrogate escape in a context is refused on both ingest paths, stored by neither; a surrogate pair passes (docs/PROTOCOL.md, JSON)")
    func unpairedSurrogateOnBothPaths() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, port: try freeLocalPort())
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let unpaired = #"{"locale":"en","x":"\ud800"}"#, paired = #"{"locale":"en","x":"\ud83d\ude00"}"#

        // ZeroMQ (protocol 2): the context extension is checked at ingest.
        var refused = TestEvents.wireEvent(name: "Unpaired Over ZeroMQ", source: "raw", sequence: 1)
        refused.context = Array(unpaired.utf8)
        var accepted = TestEvents.wireEvent(name: "Paired Over ZeroMQ", source: "raw", sequence: 2)
        accepted.context = Array(paired.utf8)
        let replies = try await RawIngestClient.exchange(runtimeDirectory: agent.runtimeDirectory, messages: [
            [TestEvents.header(requestID: 1), refused.encoded(), accepted.encoded()],
        ])
        #expect(replies.first?.entries == [AckEntry(id: refused.id, status: .rejected, reason: .invalidField),
                                           AckEntry(id: accepted.id, status: .accepted)], "\(replies)")

        // HTTP: the same JSON text in a request's context is not JSON to the API either.
        let http = try await httpPost(unixSocket: agent.runtimeDirectory + "/http", path: "/v1/batch",
                                      json: Self.track("m-unpaired", "Unpaired Over HTTP", extra: #","context":"# + unpaired))
        #expect(http.status == 400 && http.body.contains("invalid_json"), "\(http)")
        let pairedHTTP = try await httpPost(unixSocket: agent.runtimeDirectory + "/http", path: "/v1/batch",
                                            json: Self.track("m-paired", "Paired Over HTTP", extra: #","context":"# + paired))
        #expect(pairedHTTP.status == 200, "\(pairedHTTP)")

        try await eventually("the two paired events delivered") {
            Set(try agent.deliveredEvents().map(\.name)) == ["Paired Over ZeroMQ", "Paired Over HTTP"]
        }
        let lines = try deliveredEventObjects(in: agent.sinkDirectory)
        #expect(lines.count == 2 && lines.allSatisfy { ($0["context"] as? [String: Any])?["x"] as? String == "😀" }, "\(lines)")
    }

    @Test("what the HTTP API does not know is left out: no seq on any event, no pid from the TCP listener")
    func unknownPidAndSeqLeftOut() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let port = try freeLocalPort()
        let agent = try Self.agent(dir, port: port)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let tail = try BusTail(topics: ["accepted"], environment: agent.environment, outputDirectory: dir.path)
        defer { tail.cleanup() }
        try await tail.waitUntilSubscribed()

        let overUnix = try await httpPost(unixSocket: agent.runtimeDirectory + "/http", path: "/v1/batch",
                                          json: Self.track("m-unix", "Over Unix"))
        #expect(overUnix.status == 200, "\(overUnix)")
        let overTCP = try await httpPost(port: port, path: "/v1/batch", json: Self.track("m-tcp", "Over TCP"))
        #expect(overTCP.status == 200, "\(overTCP)")

        var lines: [String: [String: Any]] = [:]
        try await eventually("both events delivered to the file sink") {
            lines = Dictionary(try deliveredEventObjects(in: agent.sinkDirectory).compactMap { object in
                (object["name"] as? String).map { ($0, object) }
            }, uniquingKeysWith: { first, _ in first })
            return lines["Over Unix"] != nil && lines["Over TCP"] != nil
        }
        let unix = try #require(lines["Over Unix"]), tcp = try #require(lines["Over TCP"])
        // The Unix socket's peer is this test process (SO_PEERCRED): its pid is known.
        #expect((unix["pid"] as? NSNumber)?.int32Value == getpid(), "\(unix)")
        #expect(unix["seq"] == nil, "\(unix)")
        #expect(tcp["pid"] == nil, "\(tcp)")
        #expect(tcp["seq"] == nil, "\(tcp)")

        try await eventually("both on the bus") {
            let names = try tail.messages(topic: "accepted").compactMap { $0["name"] as? String }
            return names.contains("Over Unix") && names.contains("Over TCP")
        }
        for message in try tail.messages(topic: "accepted") where (message["source"] as? String) == "http" {
            #expect(message["seq"] == nil, "\(message)")
            #expect((message["pid"] as? NSNumber)?.intValue != 0, "\(message)")
            if message["name"] as? String == "Over TCP" { #expect(message["pid"] == nil, "\(message)") }
        }
    }
}
