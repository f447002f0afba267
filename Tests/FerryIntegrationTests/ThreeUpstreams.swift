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
    /// The three upstreams and the configuration that sends to them (shared with
    /// `RevokeCrashTests`, which runs its agent itself).
    let servers: WorkedExampleUpstreams
    let agent: AgentProcess

    var collector: SegmentCollector { servers.collector }
    var analytics: HTTPTestServer { servers.analytics }
    var partner: HTTPTestServer { servers.partner }
    var api: SegmentPublicAPI { servers.api }
    var archiveDirectory: String { servers.archiveDirectory }

    private init(dir: TemporaryDirectory, servers: WorkedExampleUpstreams, agent: AgentProcess) {
        self.dir = dir
        self.servers = servers
        self.agent = agent
    }

    /// Starts the upstreams and the agent (consent `undetermined` under `hold`, as in the
    /// example) and waits until it is ready. ``stop()`` undoes it all.
    static func start() async throws -> ThreeUpstreams {
        let dir = try TemporaryDirectory()
        let servers = try await WorkedExampleUpstreams.start(in: dir)
        let agent = try AgentProcess(in: dir, extraArguments: servers.configuration)
        let upstreams = ThreeUpstreams(dir: dir, servers: servers, agent: agent)
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
        await servers.shutdown()
        dir.remove()
    }

    /// The archive's events by name (an `identify` has none: `""`).
    func archive() throws -> [String] { try servers.archive() }
    /// The collector's accepted events by name (`(identify)` for one without).
    func segment() -> [String] { servers.segment() }
    /// The partner's events by name.
    func ads() -> [String] { servers.ads() }

    /// One sink's entry of `status`.
    func status(_ sink: String) async throws -> [String: Any] { try await WorkedExampleUpstreams.status(sink, of: agent) }

    /// `ferry emit --stdin --wait` of one JSON line (over ZeroMQ).
    func emit(_ line: String) async throws {
        let result = try await runCLI(["emit", "--stdin", "--wait", "--source", "shop"], stdin: line + "\n", environment: agent.environment)
        #expect(result.status == .exited(0), "\(result)")
    }

    /// A Segment `track` of `user` through the local HTTP API, carrying `categoryPreferences`.
    func post(_ messageID: String, _ name: String, user: String = "u-42", preferences: String) async throws {
        let answer = await WorkedExampleUpstreams.post([(messageID, name)], user: user, preferences: preferences, to: agent)
        #expect(answer?.contains(#""accepted":1"#) == true, "\(answer ?? "no answer")")
    }

    /// `ferry consent set CATEGORY VALUE`.
    func setConsent(_ category: String, _ value: String) async throws {
        #expect(try await WorkedExampleUpstreams.setConsent(category, value, on: agent), "consent set \(category) \(value)")
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
