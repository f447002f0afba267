import FerryIntegrationKit
import FerryTestKit
import Foundation

/// One sink type (or one mode of it) as the sink contract drives it: how to configure it in
/// `ferryd`, the real upstream it delivers to, how to read back what that upstream holds, how to
/// make the upstream fail, and the sink's own crash points.
///
/// A new sink joins the contract with one fixture and one line in the contract suite's list
/// (`Tests/FerrySinkContractTests`): every test of ``SinkContract`` then runs against it.
public protocol SinkFixture: Sendable {
    /// The fixture's name in test output (`file`, `http-envelope`, `jetstream-batched`).
    var name: String { get }
    /// The sink's own crash points (``CrashPoints`` names it reaches while delivering a batch),
    /// besides the two every sink reaches (``SinkContract/deliveryCrashPoints``). The contract
    /// kills `ferryd` at each, and checks that a delivery reaches no undeclared point.
    var crashPoints: [String] { get }
    /// What the upstream can be made to do wrong (``SinkUpstream/inject(_:)``), each with what the
    /// sink must make of it. The first ``SinkFault/Outcome/retried`` fault also stands for "an
    /// upstream that stays down" in the dead-letter test.
    var faults: [SinkFault] { get }
    /// Starts the upstream for one test, its files under `directory`.
    func makeUpstream(in directory: TemporaryDirectory) async throws -> any SinkUpstream
    /// What this machine lacks to run the upstream (`"needs nats-server (scripts/install-deps)"`),
    /// nil when it has it. A fixture gates on its own dependency only: the contract suite runs
    /// every fixture whose dependency is there (``Array/runnable``) and names the others.
    var missingDependency: String? { get }
}

extension SinkFixture {
    /// Nothing beyond `ferryd` and this process (the file sink's directory, an in-process HTTP
    /// server).
    public var missingDependency: String? { nil }
}

/// The real upstream one test's sink delivers to (a directory, an HTTP server, a nats-server).
public protocol SinkUpstream: Sendable {
    /// The keys of the sink's object in the `sinks` array of the configuration, without `name`,
    /// `batch`, `retry` and `disclose` (the contract's own): `"type": "http", "url": "…"`.
    var sinkKeys: String { get }
    /// What the upstream holds, as it keeps it: one record per event, in arrival order, after the
    /// deduplication the sink's protocol relies on (an HTTP collector dropping an event id it
    /// already has, JetStream's `Nats-Msg-Id`; none for files). Events the upstream refused are
    /// not there.
    func delivered() async throws -> [DeliveredRecord]
    /// Starts failing as `fault` describes (until ``clear(_:)``).
    func inject(_ fault: SinkFault) async throws
    /// Stops failing.
    func clear(_ fault: SinkFault) async throws
    /// Stops the upstream (its processes, servers) at the end of the test.
    func shutdown() async

    /// The keys the sink's object gets, besides ``sinkKeys``, for `ferry forget --user` to reach
    /// this upstream (docs/CONSENT.md, "Erasure upstream"): its `erasure` object and what the
    /// sink's erasure needs (JetStream: a `subjectTemplate` with `{user}`); empty when it needs
    /// none (the file sink).
    var erasureKeys: String { get }
    /// Whether the sink's erasure deletes the user's events from the upstream itself (the file
    /// sink overwrites their lines, JetStream purges the user's subjects), so that ``delivered()``
    /// no longer holds them; an HTTP upstream keeps them and is asked to delete them.
    var erasureDeletes: Bool { get }
    /// The erasure requests for `user` the upstream accepted, each time it accepted one (a
    /// request sent again counts again): envelope erasure messages answered `2xx`, Segment
    /// regulations answered `200`, erasure messages in the stream (after its `Nats-Msg-Id`
    /// deduplication). An upstream that keeps no record of a request (the file sink's
    /// directory) counts the distinct request ids its erased lines name, and 0 while a line of
    /// `user` is left.
    func erasures(of user: String) async throws -> Int
}

/// One event as the upstream holds it.
public struct DeliveredRecord: @unchecked Sendable, CustomStringConvertible {
    /// The event's name as it was emitted (`track` name; Segment's `event`).
    public var name: String
    /// The event object as the sink wrote it (a file line, one event of a request body or a
    /// JetStream message), for checks of what it carries.
    public var object: [String: Any]

    /// A record.
    public init(name: String, object: [String: Any]) {
        self.name = name
        self.object = object
    }

    /// The object as JSON text (sorted keys), for searching what it carries.
    public var text: String {
        (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])).map { String(decoding: $0, as: UTF8.self) } ?? ""
    }

    /// Whether `key` is a key of the object or of any object nested in it.
    public func hasKey(_ key: String) -> Bool {
        func search(_ value: Any) -> Bool {
            if let object = value as? [String: Any] { return object.keys.contains(key) || object.values.contains(where: search) }
            if let array = value as? [Any] { return array.contains(where: search) }
            return false
        }
        return search(object)
    }

    public var description: String { "\(name): \(text.prefix(300))" }
}

/// A way the upstream fails, and what the sink must make of it.
public struct SinkFault: Sendable, Hashable, CustomStringConvertible {
    /// What delivery must do while the fault lasts.
    public enum Outcome: Sendable, Hashable {
        /// Transient: attempts are retried (no dead letter) and every event arrives once after
        /// the fault is cleared.
        case retried
        /// Handled by the sink on its own (a `413` splits the batch): every event arrives once
        /// while the fault lasts, nothing dead-lettered.
        case absorbed
        /// Permanent: every batch is dead-lettered (reason `permanent`, or `rejected`), nothing
        /// arrives; after the fault is cleared `ferry deadletter replay` delivers each once.
        case deadLettered
    }

    /// A name the fixture understands (`503-retry-after`, `server-down`), shown in test output.
    public var name: String
    /// What delivery must do.
    public var outcome: Outcome

    /// A fault.
    public init(_ name: String, _ outcome: Outcome) {
        self.name = name
        self.outcome = outcome
    }

    public var description: String { name }
}

/// One test case: a fixture and one of its crash points or faults, named for the test output.
public struct SinkCase<Detail: Sendable & CustomStringConvertible>: Sendable, CustomStringConvertible {
    /// The sink.
    public var fixture: any SinkFixture
    /// The crash point or fault.
    public var detail: Detail

    /// A case.
    public init(_ fixture: any SinkFixture, _ detail: Detail) {
        self.fixture = fixture
        self.detail = detail
    }

    public var description: String { "\(fixture.name) \(detail)" }
}

extension Array where Element == any SinkFixture {
    /// The fixtures whose upstream this machine can run (``SinkFixture/missingDependency`` nil).
    public var runnable: [any SinkFixture] { filter { $0.missingDependency == nil } }

    /// Every fixture with every crash point it reaches (the delivery loop's and its own).
    public var crashCases: [SinkCase<String>] {
        flatMap { fixture in (SinkContract.deliveryCrashPoints + fixture.crashPoints).map { SinkCase(fixture, $0) } }
    }

    /// Every fixture with every fault it can inject.
    public var faultCases: [SinkCase<SinkFault>] {
        flatMap { fixture in fixture.faults.map { SinkCase(fixture, $0) } }
    }
}
