#if canImport(Glibc)
import Glibc
#endif
import FerryIntegrationKit
import FerryTestKit
import Foundation
import Testing

/// docs/CONSENT.md's three upstreams live, around the real `ferryd`: a file archive,
/// FerryIntegrationKit's Segment collector (analytics, with Segment's Public API stand-in for its
/// erasures) and an HTTP test server as the advertising partner (requires `advertising`, takes
/// `track` events only). `WorkedExampleTests` and `RecipientsIntegrationTests` run on it.
final class ThreeUpstreams: @unchecked Sendable {
    let dir: TemporaryDirectory
    let collector: SegmentCollector
    let analytics: HTTPTestServer
    let partner: HTTPTestServer
    let api: SegmentPublicAPI
    let agent: AgentProcess
    let archiveDirectory: String

    private init(dir: TemporaryDirectory, collector: SegmentCollector, analytics: HTTPTestServer, partner: HTTPTestServer,
                 api: SegmentPublicAPI, agent: AgentProcess, archiveDirectory: String) {
        self.dir = dir
        self.collector = collector
        self.analytics = analytics
        self.partner = partner
        self.api = api
        self.agent = agent
        self.archiveDirectory = archiveDirectory
    }

    /// Starts the upstreams and the agent (consent `undetermined` under `hold`, as in the
    /// example) and waits until it is ready. ``stop()`` undoes it all.
    static func start() async throws -> ThreeUpstreams {
        let dir = try TemporaryDirectory()
        let writeKey = "wk_example_" + UUID().uuidString
        let collector = SegmentCollector(writeKey: writeKey)
        let analytics = try await HTTPTestServer.start(handler: collector.handler)
        let partner = try await HTTPTestServer.start()
        let api = try await SegmentPublicAPI.start(token: "sp_example")
        let keyPath = dir.appending("segment.key"), tokenPath = dir.appending("api.token")
        try Data((writeKey + "\n").utf8).write(to: URL(fileURLWithPath: keyPath))
        try Data("sp_example\n".utf8).write(to: URL(fileURLWithPath: tokenPath))
        chmod(keyPath, 0o600)
        chmod(tokenPath, 0o600)
        let archiveDirectory = dir.appending("archive")
        let config = try AgentProcess.configurationArguments("""
            {"consent": {"defaultConsent": "undetermined", "undetermined": {"policy": "hold", "allowTypes": []}},
             "sinks": [
               {"name": "archive", "type": "file", "directory": "\(archiveDirectory)", "batch": {"maxWaitMilliseconds": 20}},
               {"name": "analytics", "type": "http", "format": "segment", "url": "\(analytics.url())", "writeKeyFile": "\(keyPath)",
                "erasure": {"apiURL": "\(api.url)", "tokenFile": "\(tokenPath)"},
                "requiresConsent": ["analytics"], "batch": {"maxWaitMilliseconds": 20}},
               {"name": "ads", "type": "http", "url": "\(partner.url("/v1/events"))",
                "requiresConsent": ["advertising"], "route": {"include": {"types": ["track"]}}, "batch": {"maxWaitMilliseconds": 20}}]}
            """, in: dir)
        let agent = try AgentProcess(in: dir, extraArguments: config)
        let upstreams = ThreeUpstreams(dir: dir, collector: collector, analytics: analytics, partner: partner, api: api,
                                       agent: agent, archiveDirectory: archiveDirectory)
        do {
            try await agent.waitUntilReady()
        } catch {
            await upstreams.stop()
            throw error
        }
        return upstreams
    }

    /// Starts them, runs `body` and stops them, whether `body` throws or not.
    static func with(_ body: (ThreeUpstreams) async throws -> Void) async throws {
        let upstreams = try await start()
        do {
            try await body(upstreams)
        } catch {
            await upstreams.stop()
            throw error
        }
        await upstreams.stop()
    }

    /// Stops the agent and the upstreams and removes the directory.
    func stop() async {
        agent.cleanup()
        api.stop()
        await analytics.shutdown()
        await partner.shutdown()
        dir.remove()
    }

    /// The archive's events by name (an `identify` has none: `""`).
    func archive() throws -> [String] { try deliveredEvents(in: archiveDirectory).map(\.name) }
    /// The collector's accepted events by name (`(identify)` for one without).
    func segment() -> [String] { collector.accepted.map { $0.json["event"] as? String ?? "(\($0.type))" } }
    /// The partner's events by name.
    func ads() -> [String] { partner.requests.filter { $0.path == "/v1/events" }.flatMap(\.batchEvents).map { $0["name"] as? String ?? "?" } }

    /// One sink's entry of `status`.
    func status(_ sink: String) async throws -> [String: Any] {
        (try await agent.status().object["sinks"] as? [[String: Any]] ?? []).first { $0["name"] as? String == sink } ?? [:]
    }

    /// `ferry emit --stdin --wait` of one JSON line (over ZeroMQ).
    func emit(_ line: String) async throws {
        let result = try await runCLI(["emit", "--stdin", "--wait", "--source", "shop"], stdin: line + "\n", environment: agent.environment)
        #expect(result.status == .exited(0), "\(result)")
    }

    /// A Segment `track` of `user` through the local HTTP API, carrying `categoryPreferences`.
    func post(_ messageID: String, _ name: String, user: String = "u-42", preferences: String) async throws {
        let body = #"{"batch":[{"type":"track","event":"\#(name)","userId":"\#(user)","messageId":"\#(messageID)","properties":{},"context":{"consent":{"categoryPreferences":\#(preferences)}}}]}"#
        let response = try await httpPost(unixSocket: agent.runtimeDirectory + "/http", path: "/v1/batch", json: body)
        #expect(response.status == 200 && response.body.contains(#""accepted":1"#), "\(response)")
    }

    /// `ferry consent set CATEGORY VALUE`.
    func setConsent(_ category: String, _ value: String) async throws {
        let result = try await runCLI(["consent", "set", category, value], environment: agent.environment)
        #expect(result.status == .exited(0), "\(result)")
    }

    /// The sinks the newest erasure request is for, each with its state (`forget_status`).
    func erasureStates() async throws -> [String: String] {
        let reply = try await agent.control(["op": "forget_status"])
        let sinks = ((reply["erasures"] as? [[String: Any]])?.last?["sinks"] as? [[String: Any]]) ?? []
        return Dictionary(uniqueKeysWithValues: sinks.compactMap { sink in
            (sink["sink"] as? String).map { ($0, sink["state"] as? String ?? "") }
        })
    }
}
