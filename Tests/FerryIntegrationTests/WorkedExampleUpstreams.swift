#if canImport(Glibc)
import Glibc
#endif
import FerryIntegrationKit
import FerryTestKit
import Foundation
import Testing

/// The three live upstreams of docs/CONSENT.md's worked example and the configuration that sends
/// to them: a file archive (everything), FerryIntegrationKit's Segment collector as the analytics
/// upstream (`requiresConsent: ["analytics"]`, with Segment's public API for erasures) and an HTTP
/// test server as the advertising partner (`requiresConsent: ["advertising"]`, track events only).
/// Shared by `RevokeCrashTests` and `ThreeUpstreams` (`WorkedExampleTests`, `RecipientsIntegrationTests`).
struct WorkedExampleUpstreams: Sendable {
    let collector: SegmentCollector
    let analytics: HTTPTestServer
    let partner: HTTPTestServer
    let api: SegmentPublicAPI
    let archiveDirectory: String
    /// `--config` arguments for an `AgentProcess` in the same directory.
    let configuration: [String]

    /// Starts the upstreams and writes the configuration into `dir`; `partner` decides the
    /// advertising partner's answers (default: 200).
    static func start(in dir: TemporaryDirectory, partner partnerHandler: @escaping HTTPTestServer.Handler = { _ in .ok }) async throws -> Self {
        let writeKey = "wk_example_" + UUID().uuidString
        let collector = SegmentCollector(writeKey: writeKey)
        let analytics = try await HTTPTestServer.start(handler: collector.handler)
        let partner = try await HTTPTestServer.start(handler: partnerHandler)
        let api = try await SegmentPublicAPI.start(token: "sp_example")
        let keyPath = dir.appending("segment.key"), tokenPath = dir.appending("api.token")
        try writeText(writeKey + "\n", to: keyPath)
        try writeText("sp_example\n", to: tokenPath)
        chmod(keyPath, 0o600)
        chmod(tokenPath, 0o600)
        let archiveDirectory = dir.appending("archive")
        let configuration = try AgentProcess.configurationArguments("""
            {"consent": {"defaultConsent": "undetermined", "undetermined": {"policy": "hold", "allowTypes": []}},
             "sinks": [
               {"name": "archive", "type": "file", "directory": "\(archiveDirectory)", "batch": {"maxWaitMilliseconds": 20}},
               {"name": "analytics", "type": "http", "format": "segment", "url": "\(analytics.url())", "writeKeyFile": "\(keyPath)",
                "erasure": {"apiURL": "\(api.url)", "tokenFile": "\(tokenPath)"},
                "requiresConsent": ["analytics"], "batch": {"maxWaitMilliseconds": 20}},
               {"name": "ads", "type": "http", "url": "\(partner.url("/v1/events"))",
                "requiresConsent": ["advertising"], "route": {"include": {"types": ["track"]}}, "batch": {"maxWaitMilliseconds": 20}}]}
            """, in: dir)
        return Self(collector: collector, analytics: analytics, partner: partner, api: api,
                    archiveDirectory: archiveDirectory, configuration: configuration)
    }

    /// Stops the three servers.
    func shutdown() async {
        api.stop()
        await analytics.shutdown()
        await partner.shutdown()
    }

    /// The archive's events' names, in file order (an identify has none: "").
    func archive() throws -> [String] { try deliveredEvents(in: archiveDirectory).map(\.name) }

    /// The analytics collector's accepted messages' names (`(type)` for those without one).
    func segment() -> [String] { collector.accepted.map { $0.json["event"] as? String ?? "(\($0.type))" } }

    /// The partner's batch requests, in arrival order, each as its events' names.
    func adsRequests() -> [[String]] {
        partner.requests.filter { $0.path == "/v1/events" }.map { $0.batchEvents.map { $0["name"] as? String ?? "?" } }
    }

    /// Every event name the partner received, in arrival order.
    func ads() -> [String] { adsRequests().flatMap { $0 } }

    /// Sink `sink`'s object in the agent's status.
    static func status(_ sink: String, of agent: AgentProcess) async throws -> [String: Any] {
        (try await agent.status().object["sinks"] as? [[String: Any]] ?? []).first { $0["name"] as? String == sink } ?? [:]
    }

    /// Track events of `user` (`(messageId, name)` each) posted in one request to the agent's
    /// HTTP API: the answer's body when it was 200, nil when the request failed (the agent gone)
    /// or was answered otherwise.
    static func post(_ events: [(messageID: String, name: String)], user: String = "u-42", preferences: String? = nil,
                     to agent: AgentProcess) async -> String? {
        let context = preferences.map { #","context":{"consent":{"categoryPreferences":\#($0)}}"# } ?? ""
        let messages = events.map { #"{"type":"track","event":"\#($0.name)","userId":"\#(user)","messageId":"\#($0.messageID)","properties":{}\#(context)}"# }
        let body = #"{"batch":["# + messages.joined(separator: ",") + "]}"
        guard let response = try? await httpPost(unixSocket: agent.runtimeDirectory + "/http", path: "/v1/batch", json: body) else { return nil }
        return response.status == 200 ? response.body : nil
    }

    /// `ferry consent set category value`; whether it exited 0.
    static func setConsent(_ category: String, _ value: String, on agent: AgentProcess) async throws -> Bool {
        try await runCLI(["consent", "set", category, value], environment: agent.environment).status == .exited(0)
    }
}
