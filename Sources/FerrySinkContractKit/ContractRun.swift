#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryIntegrationKit
import FerryTestKit
import Foundation

/// A broken promise of the sink contract: what was expected and what the sink did.
public struct ContractViolation: Error, CustomStringConvertible {
    /// What went wrong, with the fixture's name.
    public var description: String

    /// A violation.
    public init(_ description: String) { self.description = description }
}

/// One contract test's world: a temporary directory, the fixture's upstream and a real `ferryd`
/// with one sink named `contract` delivering to it. ``finish()`` stops everything and removes
/// the directory (kept with `FERRY_KEEP_TEST_DIRS=1`).
final class ContractRun: Sendable {
    /// The sink's name in the configuration (its cursor file, dead-letter directory).
    static let sink = "contract"

    let fixture: any SinkFixture
    let directory: TemporaryDirectory
    let upstream: any SinkUpstream
    let agent: AgentProcess
    /// Where crash points reached are recorded (``progressEnvironment``).
    var progressPath: String { directory.appending("progress") }
    /// `FERRY_PROGRESS_FILE` set to ``progressPath``.
    var progressEnvironment: [String: String] { ["FERRY_PROGRESS_FILE": progressPath] }
    /// A value in each event's `context.contract_secret`, which ``Settings/withholding`` drops.
    let secret = "withheld-" + UUID().uuidString
    /// A value in each event's properties: what the sink must carry.
    let visible = "visible-" + UUID().uuidString

    /// The sink settings the contract varies.
    struct Settings {
        /// `consent.autoStart`: `false` queues everything until ``startDelivery()``.
        var autoStart = true
        /// `retry.maxElapsedMilliseconds`.
        var maxElapsedMilliseconds: Int?
        /// The sink's `disclose` object.
        var disclose = #"{}"#
        /// `batch.maxEvents`.
        var batchEvents = 10
        /// Whether the sink gets the upstream's ``SinkUpstream/erasureKeys``.
        var erasure = false
        /// More keys of the sink object (`"requiresConsent": […], "route": {…}`), or empty.
        var routing = ""

        /// Withholds everything: origin, process details and the context key holding the secret.
        static let withholding = #"{"origin": false, "process": false, "dropContext": ["contract_secret"]}"#
        /// Discloses everything.
        static let disclosing = #"{"origin": true, "process": true}"#
    }

    private init(fixture: any SinkFixture, directory: TemporaryDirectory, upstream: any SinkUpstream, agent: AgentProcess) {
        self.fixture = fixture
        self.directory = directory
        self.upstream = upstream
        self.agent = agent
    }

    /// Starts the upstream and `ferryd` (with `environment` added for this run) and waits until
    /// the agent is ready. With `recordProgress`, every crash point reached is appended to
    /// ``progressPath``.
    static func start(_ fixture: any SinkFixture, _ settings: Settings = Settings(), environment: [String: String] = [:],
                      recordProgress: Bool = false) async throws -> ContractRun {
        let directory = try TemporaryDirectory()
        var started: (any SinkUpstream)?
        do {
            let upstream = try await fixture.makeUpstream(in: directory)
            started = upstream
            let arguments = try AgentProcess.configurationArguments(configuration(upstream, settings), in: directory)
            let agent = try AgentProcess(in: directory, extraArguments: arguments, start: false)
            let run = ContractRun(fixture: fixture, directory: directory, upstream: upstream, agent: agent)
            try agent.start(extraEnvironment: recordProgress ? environment.merging(run.progressEnvironment) { $1 } : environment)
            try await agent.waitUntilReady()
            return run
        } catch {
            await started?.shutdown()
            directory.remove()
            throw error
        }
    }

    static func configuration(_ upstream: any SinkUpstream, _ settings: Settings) -> String {
        let elapsed = settings.maxElapsedMilliseconds.map { #", "maxElapsedMilliseconds": \#($0)"# } ?? ""
        let erasure = settings.erasure && !upstream.erasureKeys.isEmpty ? ", " + upstream.erasureKeys : ""
        return """
        {"consent": {"autoStart": \(settings.autoStart)},
         "sinks": [{"name": "\(sink)", \(upstream.sinkKeys)\(erasure),
                    "batch": {"maxEvents": \(settings.batchEvents), "maxWaitMilliseconds": 20},
                    "retry": {"initialMilliseconds": 20, "maxMilliseconds": 200\(elapsed)},
                    "circuit": {"failureThreshold": 5, "openMilliseconds": 200},
                    "disclose": \(settings.disclose)\(settings.routing.isEmpty ? "" : ", " + settings.routing)}]}
        """
    }

    /// Writes a new configuration and sends `SIGHUP`; returns once the agent logged the reload.
    func reload(_ settings: Settings) async throws {
        let before = agent.logs.components(separatedBy: "configuration reloaded").count
        _ = try AgentProcess.configurationArguments(Self.configuration(upstream, settings), in: directory)
        agent.kill(signal: SIGHUP)
        try await eventually("\(fixture.name): the reload applied") {
            agent.logs.components(separatedBy: "configuration reloaded").count > before
        }
    }

    /// The names of events `first...last` with `prefix`.
    static func names(_ prefix: String, _ range: ClosedRange<Int>) -> [String] { range.map { "\(prefix)-\($0)" } }

    /// Emits events `range` named `<prefix>-<i>` with `ferry emit --stdin --wait`: each with a
    /// user id (Segment needs one), the visible marker in its properties and the secret in its
    /// context.
    func emit(_ prefix: String, _ range: ClosedRange<Int>) async throws {
        var lines = ""
        for i in range {
            lines += #"{"name":"\#(prefix)-\#(i)","userId":"u-\#(i)","properties":{"i":\#(i),"note":"\#(visible)"},"context":{"contract_secret":"\#(secret)","locale":"fr-FR"}}"# + "\n"
        }
        let result = try await runCLI(["emit", "--stdin", "--wait", "--source", "contract"], stdin: lines, environment: agent.environment)
        guard result.status == .exited(0), result.stdout == "accepted=\(range.count) duplicate=0 rejected=0\n" else {
            throw ContractViolation("\(fixture.name): ferry emit of \(range.count) events: \(result)")
        }
    }

    /// Emits one event `name` (user `u-1`) whose context is `context` (a JSON object's text).
    func emit(_ name: String, context: String) async throws {
        let line = #"{"name":"\#(name)","userId":"u-1","properties":{"note":"\#(visible)"},"context":\#(context)}"# + "\n"
        let result = try await runCLI(["emit", "--stdin", "--wait", "--source", "contract"], stdin: line, environment: agent.environment)
        guard result.status == .exited(0), result.stdout == "accepted=1 duplicate=0 rejected=0\n" else {
            throw ContractViolation("\(fixture.name): ferry emit of \(name): \(result)")
        }
    }

    /// `ferry consent set <category> <status>`.
    func setConsent(_ category: String, _ status: String) async throws {
        let result = try await runCLI(["consent", "set", category, status], environment: agent.environment)
        guard result.status == .exited(0) else { throw ContractViolation("\(fixture.name): ferry consent set: \(result)") }
    }

    /// `ferry start` (delivery of an agent configured with `autoStart: false`).
    func startDelivery() async throws {
        let result = try await runCLI(["start"], environment: agent.environment)
        guard result.status == .exited(0) else { throw ContractViolation("\(fixture.name): ferry start: \(result)") }
    }

    /// The sink's entry in `ferry status`.
    func sinkStatus() async throws -> [String: Any] {
        let sinks = try await agent.status().object["sinks"] as? [[String: Any]] ?? []
        return sinks.first { $0["name"] as? String == Self.sink } ?? [:]
    }

    /// Waits until the upstream holds every one of `names` and the agent's queue is empty, then
    /// checks that it holds each exactly once and nothing else (but the names in `besides`, such
    /// as the agent's own `consent_updated`, in any number). Returns the records by name.
    @discardableResult
    func expectExactlyOnce(_ names: [String], besides: Set<String> = [], timeout: Duration = .seconds(30)) async throws -> [String: DeliveredRecord] {
        let wanted = Set(names)
        do {
            try await eventually("\(fixture.name): \(names.count) events delivered", timeout: timeout, pollInterval: .milliseconds(100)) {
                let held = Set(try await upstream.delivered().map(\.name))
                guard wanted.isSubset(of: held) else { return false }
                return try await agent.status().queuedEvents == 0
            }
        } catch {
            let held = (try? await upstream.delivered().map(\.name)) ?? []
            throw ContractViolation("\(fixture.name): \(error); the upstream holds \(held.count) events, missing \(wanted.subtracting(held).sorted().prefix(10))\n--- ferryd ---\n\(agent.logs.suffix(3000))")
        }
        let records = try await upstream.delivered().filter { !besides.contains($0.name) }
        let counts = Dictionary(grouping: records, by: \.name).mapValues(\.count)
        let twice = counts.filter { $0.value > 1 }.keys.sorted()
        guard twice.isEmpty else {
            throw ContractViolation("\(fixture.name): \(twice.count) events held more than once, e.g. \(twice.prefix(10)) (\(records.count) records for \(names.count) events)")
        }
        let unexpected = Set(counts.keys).subtracting(wanted)
        guard unexpected.isEmpty else {
            throw ContractViolation("\(fixture.name): the upstream holds events never emitted or refused: \(unexpected.sorted().prefix(10))")
        }
        return Dictionary(uniqueKeysWithValues: records.map { ($0.name, $0) })
    }

    /// `ferry deadletter list --json` of the agent's data directory.
    func deadLetters() async throws -> [[String: Any]] {
        let result = try await runCLI(["deadletter", "list", "--json", "--data-dir", agent.dataDirectory])
        guard result.status == .exited(0),
              let letters = try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]] else {
            throw ContractViolation("\(fixture.name): ferry deadletter list: \(result)")
        }
        return letters
    }

    /// Replays every dead letter with `ferry deadletter replay`; each must succeed.
    func replayDeadLetters(_ letters: [[String: Any]]) async throws {
        for id in letters.compactMap({ $0["id"] as? String }) {
            let result = try await runCLI(["deadletter", "replay", id], environment: agent.environment)
            guard result.status == .exited(0) else {
                throw ContractViolation("\(fixture.name): ferry deadletter replay \(id): \(result)\n--- ferryd ---\n\(agent.logs.suffix(2000))")
            }
        }
    }

    /// The contract sink's entry of the newest request in `forget_status` (nil before any).
    func erasureStatus() async throws -> [String: Any]? {
        let reply = try await agent.control(["op": "forget_status"])
        let sinks = ((reply["erasures"] as? [[String: Any]])?.last?["sinks"] as? [[String: Any]]) ?? []
        return sinks.first { $0["sink"] as? String == Self.sink }
    }

    /// Stops the agent and the upstream and removes the directory.
    func finish() async {
        agent.cleanup()
        await upstream.shutdown()
        directory.remove()
    }
}

/// Runs `body` with a started ``ContractRun`` and always finishes it.
func withRun<T>(_ fixture: any SinkFixture, _ settings: ContractRun.Settings = .init(), environment: [String: String] = [:],
                recordProgress: Bool = false, _ body: (ContractRun) async throws -> T) async throws -> T {
    await RunSlots.shared.acquire()
    do {
        let run = try await ContractRun.start(fixture, settings, environment: environment, recordProgress: recordProgress)
        do {
            let result = try await body(run)
            await run.finish()
            await RunSlots.shared.release()
            return result
        } catch {
            await run.finish()
            throw error
        }
    } catch {
        await RunSlots.shared.release()
        throw error
    }
}

/// At most this many contract runs at once (`FERRY_CONTRACT_PARALLEL`, default 4): Swift Testing
/// starts every case of the suite together, and each run is a `ferryd` and an upstream process
/// on a machine of few cores, where 50 at once would only make each wait past its deadlines.
actor RunSlots {
    static let shared = RunSlots(limit: Int(ProcessInfo.processInfo.environment["FERRY_CONTRACT_PARALLEL"] ?? "") ?? 4)

    private let limit: Int
    private var running = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(limit: Int) { self.limit = max(1, limit) }

    /// Waits for a free slot and takes it.
    func acquire() async {
        if running < limit {
            running += 1
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    /// Gives the slot back (to the longest waiting run, if any).
    func release() {
        if waiting.isEmpty {
            running -= 1
        } else {
            waiting.removeFirst().resume()
        }
    }
}
