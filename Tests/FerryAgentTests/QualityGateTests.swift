@testable import FerryAgent
import FerryAgentTestKit
import FerryMetrics
import FerryMetricSamples
import FerryPeer
import FerryProtocol
import FerryQuality
@testable import FerryStorage
import FerryTestKit
import FerryIntegrationKit
import FerryHTTPIngest
import Foundation
import Glibc
import Synchronization
import Testing

/// The quality stage in the agent (issue 31): each action over both kinds of ingest path, the
/// quarantine's replay and drop, reload, erasure, a full quarantine and a damaged entry.
@Suite("Quality gate in the agent: actions, quarantine, reload")
struct QualityGateTests {
    /// A plan naming the test events ("Test Event") and nothing else; unplanned events break it.
    static let plan = #"{"events":[{"type":"track","name":"Test Event","properties":{"type":"object"}}]}"#
    /// A plan that also names "Unplanned Thing" (the fix of the tests that reload).
    static let fixedPlan = #"{"events":[{"type":"track","name":"Test Event","properties":{"type":"object"}},{"type":"track","name":"Unplanned Thing","properties":{"type":"object"}}]}"#

    /// The path an event takes: the ZeroMQ socket, or the gateway every other path (the HTTP
    /// API) submits through.
    enum Path: String, CaseIterable, Sendable { case zeromq, gateway }

    struct Setup {
        let scratch: ScratchDirectory
        let configuration: AgentConfiguration
        let planPath: String
    }

    static func setup(_ action: ViolationAction, quarantineMaxBytes: Int = 64 << 20) throws -> Setup {
        let scratch = try ScratchDirectory(short: true)
        let planPath = scratch.appending("plan.json")
        try writeText(plan, to: planPath)
        var configuration = agentConfiguration(scratch)
        configuration.quality = AgentConfiguration.Quality(
            configuration: QualityConfiguration(planPath: planPath, onViolation: action, allowUnplanned: false),
            quarantineMaxBytes: quarantineMaxBytes)
        return Setup(scratch: scratch, configuration: configuration, planPath: planPath)
    }

    static func bad(_ sequence: UInt64) -> [UInt8] { Events.make(sequence, name: "Unplanned Thing").encoded() }

    /// Sends `frames` by `path` and returns their ack entries.
    static func send(_ frames: [[UInt8]], by path: Path, agent: InProcessAgent, gateway: GatewayPath, runtimeDirectory: String) async throws -> [AckEntry] {
        switch path {
        case .zeromq:
            let replies = try await exchange(runtimeDirectory: runtimeDirectory, [[eventsHeader(1)] + frames])
            guard case .ack(_, let entries) = replies.first else { throw TestFailure("no ack: \(replies)") }
            return entries
        case .gateway:
            return try await gateway.submit(frames)
        }
    }

    @Test("each action over each path: block refuses, quarantine keeps durably and acks quarantined, tag delivers with the violations",
          arguments: [ViolationAction.block, .quarantine, .tag], Path.allCases)
    func actions(action: ViolationAction, path: Path) async throws {
        let setup = try Self.setup(action)
        defer { setup.scratch.remove() }
        let gateway = GatewayPath()
        let running = try await InProcessAgent(setup.configuration, paths: [gateway])
        let good = Events.make(1).encoded(), bad = Self.bad(2)
        let entries = try await Self.send([good, bad], by: path, agent: running, gateway: gateway,
                                          runtimeDirectory: setup.configuration.runtimeDirectory)
        #expect(entries.first == AckEntry(id: Events.id(of: good), status: .accepted))
        let quarantine = QuarantineStore(dataDirectory: setup.configuration.dataDirectory)
        switch action {
        case .block:
            #expect(entries.last == AckEntry(id: Events.id(of: bad), status: .rejected, reason: .planViolation))
        case .quarantine:
            #expect(entries.last == AckEntry(id: Events.id(of: bad), status: .accepted, reason: .quarantined))
            // Durable before the ack: the entry is on disk now, with what it broke.
            let entry = try #require(try quarantine.load(Events.id(of: bad)))
            #expect(entry.frame == bad)
            #expect(entry.violations.contains("unplanned"))
        case .tag:
            #expect(entries.last == AckEntry(id: Events.id(of: bad), status: .accepted))
        }
        let sinkDirectory = setup.configuration.fileSinkDirectory
        let expected = action == .tag ? 2 : 1
        try await waitUntil("\(expected) events delivered") { try sinkLines(sinkDirectory).count >= expected }
        let lines = try sinkLines(sinkDirectory)
        #expect(lines.count == expected)
        if action == .tag {
            let tagged = try #require(lines.first { $0["id"] as? String == Events.id(of: bad).description })
            let context = try #require(tagged["context"] as? [String: Any])
            let violations = try #require((context["ferry"] as? [String: Any])?["violations"] as? [[String: Any]])
            #expect(violations.first?["rule"] as? String == "unplanned")
        }
        if action != .quarantine { #expect(try quarantine.ids().isEmpty) }
        let samples = MetricSamples(parsing: running.agent.metricsExposition())
        #expect(samples.value("ferry_plan_violations_total", ["event": "other", "rule": "unplanned"]) == 1)
        #expect(samples.value("ferry_quarantined_events") == (action == .quarantine ? 1 : 0))
        #expect(samples.value("ferry_events_quarantined_total") == (action == .quarantine ? 1 : 0))
        try await running.stop()
    }

    @Test("quarantine, a bad plan on reload keeps the gate, the fixed plan reloaded, replay --all stores each event once; drop")
    func reloadAndReplay() async throws {
        let setup = try Self.setup(.quarantine)
        defer { setup.scratch.remove() }
        let gateway = GatewayPath()
        let running = try await InProcessAgent(setup.configuration, paths: [gateway])
        let runtime = setup.configuration.runtimeDirectory
        let bad = (1...3).map { Self.bad(UInt64($0)) }
        let entries = try await Self.send(bad, by: .zeromq, agent: running, gateway: gateway, runtimeDirectory: runtime)
        #expect(entries.allSatisfy { $0.status == .accepted && $0.reason == .quarantined })

        // Still breaking the plan: replay keeps them.
        let early = try await controlJSON(runtime, ["op": "quarantine_replay", "all": true])
        #expect(early["ok"] as? Bool == true)
        #expect((early["results"] as? [[String: Any]])?.map { $0["outcome"] as? String } == ["violating", "violating", "violating"])

        // A plan that does not parse: the reload is refused, naming the key; the gate stays.
        try writeText("{not json", to: setup.planPath)
        await #expect { try await running.agent.reload(setup.configuration) } throws: { error in
            "\(error)".contains("quality.plan") && "\(error)".contains("kept")
        }
        let stillBad = Self.bad(4)
        #expect(try await Self.send([stillBad], by: .gateway, agent: running, gateway: gateway, runtimeDirectory: runtime)
                == [AckEntry(id: Events.id(of: stillBad), status: .accepted, reason: .quarantined)])

        // The fixed plan, reloaded with no key changed: replay stores each event once.
        try writeText(Self.fixedPlan, to: setup.planPath)
        try await running.agent.reload(setup.configuration)
        let dropped = try await controlJSON(runtime, ["op": "quarantine_drop", "id": Events.id(of: stillBad).description])
        #expect((dropped["results"] as? [[String: Any]])?.first?["outcome"] as? String == "dropped")
        let replay = try await controlJSON(runtime, ["op": "quarantine_replay", "all": true])
        #expect((replay["results"] as? [[String: Any]])?.map { $0["outcome"] as? String } == ["stored", "stored", "stored"], "\(replay)")
        let again = try await controlJSON(runtime, ["op": "quarantine_replay", "all": true])
        #expect((again["results"] as? [[String: Any]])?.isEmpty == true)
        let missing = try await controlJSON(runtime, ["op": "quarantine_drop", "id": Events.id(of: stillBad).description])
        #expect(missing["ok"] as? Bool == false)
        // A resend of a replayed event is a duplicate, not a new quarantine entry.
        #expect(try await Self.send([bad[0]], by: .zeromq, agent: running, gateway: gateway, runtimeDirectory: runtime)
                == [AckEntry(id: Events.id(of: bad[0]), status: .duplicate)])
        let sinkDirectory = setup.configuration.fileSinkDirectory
        try await waitUntil("3 events delivered") { try sinkLines(sinkDirectory).count >= 3 }
        #expect(try sinkLines(sinkDirectory).compactMap { $0["id"] as? String }.sorted() == bad.map { Events.id(of: $0).description }.sorted())
        #expect(try QuarantineStore(dataDirectory: setup.configuration.dataDirectory).ids().isEmpty)
        try await running.stop()
    }

    @Test("forget and a denied category reach the quarantine; a quarantined event of a denied category is blocked, never kept")
    func erasureReachesQuarantine() async throws {
        let setup = try Self.setup(.quarantine)
        defer { setup.scratch.remove() }
        let gateway = GatewayPath()
        let running = try await InProcessAgent(setup.configuration, paths: [gateway])
        let runtime = setup.configuration.runtimeDirectory
        var mine = Events.make(1, name: "Unplanned Thing")
        mine.userID = "user-42"
        let other = Self.bad(2)
        _ = try await Self.send([mine.encoded(), other], by: .zeromq, agent: running, gateway: gateway, runtimeDirectory: runtime)
        let store = QuarantineStore(dataDirectory: setup.configuration.dataDirectory)
        #expect(try store.ids().count == 2)
        let forget = try await controlJSON(runtime, ["op": "forget", "user_id": "user-42"])
        #expect(forget["ok"] as? Bool == true, "\(forget)")
        #expect(try store.ids() == [Events.id(of: other)])
        // Denying the category erases the rest, and a new violating event of it is blocked.
        let denied = try await controlJSON(runtime, ["op": "set_consent", "category": "analytics", "status": "denied"])
        #expect(denied["ok"] as? Bool == true, "\(denied)")
        #expect(try store.ids().isEmpty)
        let late = Self.bad(3)
        #expect(try await Self.send([late], by: .gateway, agent: running, gateway: gateway, runtimeDirectory: runtime)
                == [AckEntry(id: Events.id(of: late), status: .blocked, reason: .consentDenied)])
        #expect(try store.ids().isEmpty)
        try await running.stop()
    }

    @Test("a full quarantine answers full (retryable) and keeps nothing more; a damaged entry is reported and skipped at start")
    func fullAndDamaged() async throws {
        let setup = try Self.setup(.quarantine, quarantineMaxBytes: 4096)
        defer { setup.scratch.remove() }
        // A damaged entry from an earlier run: the agent starts, skips it, and drop removes it.
        let store = QuarantineStore(dataDirectory: setup.configuration.dataDirectory)
        let damaged = Events.make(9, name: "Unplanned Thing")
        try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        try writeText("FERRYQ1\ntruncated", to: store.path(damaged.id))
        let gateway = GatewayPath()
        let running = try await InProcessAgent(setup.configuration, paths: [gateway])
        let runtime = setup.configuration.runtimeDirectory
        let frames = (1...3).map { Events.make(UInt64($0), name: "Unplanned Thing", padding: 1500).encoded() }
        let entries = try await Self.send(frames, by: .zeromq, agent: running, gateway: gateway, runtimeDirectory: runtime)
        #expect(entries.map(\.status) == [.accepted, .accepted, .rejected])
        #expect(entries.last?.reason == .full)
        let replay = try await controlJSON(runtime, ["op": "quarantine_replay", "id": damaged.id.description])
        #expect((replay["results"] as? [[String: Any]])?.first?["outcome"] as? String == "corrupt")
        let drop = try await controlJSON(runtime, ["op": "quarantine_drop", "id": damaged.id.description])
        #expect((drop["results"] as? [[String: Any]])?.first?["outcome"] as? String == "dropped")
        #expect(try store.ids().count == 2)
        try await running.stop()
    }
}

extension QualityGateTests {
    static func event(_ sequence: UInt64, name: String, email: String) -> [UInt8] {
        WireEvent(id: Events.ids.next(), timestamp: WallClock.unixMilliseconds(), sequence: sequence, pid: 4242, type: .track,
                  source: "agent-tests", name: name, properties: Array(#"{"email":"\#(email)","i":\#(sequence)}"#.utf8)).encoded()
    }

    @Test("redaction before the write over both paths: the raw value is nowhere under the data directory, in the sink or the quarantine; a replay does not hash a hash")
    func redaction() async throws {
        var setup = try Self.setup(.quarantine)
        defer { setup.scratch.remove() }
        let keyPath = setup.scratch.appending("hmac.key")
        try writeBytes((0..<32).map { UInt8($0) }, to: keyPath)
        chmod(keyPath, 0o600)
        var configuration = setup.configuration
        configuration.redact = .init(RedactionConfiguration(keyFile: keyPath, rules: [RedactionRule(path: "properties.email", action: .hash)]))
        setup = Setup(scratch: setup.scratch, configuration: configuration, planPath: setup.planPath)
        let gateway = GatewayPath()
        let running = try await InProcessAgent(configuration, paths: [gateway])
        let runtime = configuration.runtimeDirectory
        let raw = "jane.\(UInt32.random(in: 0...UInt32.max))@example.com"
        let viaSocket = Self.event(1, name: "Test Event", email: raw), viaGateway = Self.event(2, name: "Test Event", email: raw)
        let bad = Self.event(3, name: "Unplanned Thing", email: raw)
        #expect(try await Self.send([viaSocket, bad], by: .zeromq, agent: running, gateway: gateway, runtimeDirectory: runtime).map(\.status)
                == [.accepted, .accepted])
        #expect(try await Self.send([viaGateway], by: .gateway, agent: running, gateway: gateway, runtimeDirectory: runtime).map(\.status)
                == [.accepted])
        let sinkDirectory = configuration.fileSinkDirectory
        try await waitUntil("2 events delivered") { try sinkLines(sinkDirectory).count >= 2 }
        let hashes = try sinkLines(sinkDirectory).compactMap { ($0["properties"] as? [String: Any])?["email"] as? String }
        #expect(hashes.count == 2 && Set(hashes).count == 1 && hashes[0].hasPrefix("hmac:"), "\(hashes)")
        #expect(filesContaining(raw, under: configuration.dataDirectory).isEmpty)
        let samples = MetricSamples(parsing: running.agent.metricsExposition())
        #expect(samples.value("ferry_events_redacted_total") == 3)
        // The plan fixed: the quarantined event is released with the same hash, not a hash of it.
        try writeText(Self.fixedPlan, to: setup.planPath)
        try await running.agent.reload(configuration)
        let replay = try await controlJSON(runtime, ["op": "quarantine_replay", "all": true])
        #expect((replay["results"] as? [[String: Any]])?.first?["outcome"] as? String == "stored", "\(replay)")
        try await waitUntil("3 events delivered") { try sinkLines(sinkDirectory).count >= 3 }
        let released = try #require(try sinkLines(sinkDirectory).first { $0["id"] as? String == Events.id(of: bad).description })
        #expect((released["properties"] as? [String: Any])?["email"] as? String == hashes.first)
        #expect(filesContaining(raw, under: configuration.dataDirectory).isEmpty)
        try await running.stop()
    }
}

/// An ingest path that submits through the agent's ``IngestGateway``, as the HTTP API does
/// (named and counted as its Unix socket listener).
final class GatewayPath: IngestPath {
    let name = "unix"
    var metricSet: IngestPathMetricSet? { .http }
    private let gateway = Mutex<IngestGateway?>(nil)

    func start(_ gateway: IngestGateway) async throws { self.gateway.withLock { $0 = gateway } }
    func stopIntake() {}
    func stop() async {}

    /// Submits `frames` as one request of this process and waits for their ack entries. Off the
    /// cooperative pool, as the HTTP API submits from its thread pool: with no commit in flight
    /// the submitting thread commits the request itself and blocks for its `fdatasync`.
    func submit(_ frames: [[UInt8]]) async throws -> [AckEntry] {
        guard let gateway = gateway.withLock({ $0 }) else { throw TestFailure("the path was not started") }
        let peer = PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid())
        return try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                let admission = gateway.submit(peer: peer, origin: [], receivedAt: 0, prepare: { frames.map { .event($0) } }) { answer in
                    continuation.resume(returning: answer.entries)
                }
                if admission != .submitted { continuation.resume(throwing: TestFailure("not admitted: \(admission)")) }
            }
        }
    }
}
