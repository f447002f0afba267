@testable import FerryFileSink
@testable import FerryAgent
import Logging
import Testing

/// An ingest path kind defined outside the agent's modules, the way a new path module adds one:
/// its settings (table `datagram`), its metrics, and the kind that reads the table.
struct DatagramSettings: IngestPathSettings {
    static let key = "datagram"
    var path = ""
    var maxBytes = 2048

    func validate() throws {
        guard maxBytes > 0 else { throw AgentError(code: .configuration, message: "datagram.maxBytes must be positive") }
    }

    var summary: String { "path=\(path.isEmpty ? "off" : path) maxBytes=\(maxBytes)" }
}

extension IngestPathMetricSet {
    static let datagram = IngestPathMetricSet(
        requests: MetricDescriptor("test_datagram_requests_total", .counter, labels: ["socket", "status"], help: "Datagrams answered."),
        events: MetricDescriptor("test_datagram_events_total", .counter, labels: ["socket", "outcome"], help: "Events of datagrams."),
        connections: MetricDescriptor("test_datagram_peers", .gauge, labels: ["socket"], help: "Peers now."))
}

extension IngestPathKind {
    static let datagram = IngestPathKind(DatagramSettings.self, metrics: .datagram) { table, base, fields, keyPath in
        let settings = FieldBox(base)
        try fields.apply(table, [
            "path": .string { settings.value.path = $0 },
            "maxBytes": .int { settings.value.maxBytes = $0 },
        ], at: keyPath)
        return settings.value
    } makePaths: { _, _, _ in [] }
}

/// The ingest path registry: the loader hands a registered kind its table, and the kind's keys,
/// errors, `ferryd validate` line and metrics are all its own.
@Suite("Ingest path registry: a path kind's table, errors, summary and metrics are its own")
struct IngestPathRegistryTests {
    static let kinds = IngestPathRegistry([.datagram])
    static let base = AgentConfiguration(runtimeDirectory: "/tmp/ferry-paths/run", dataDirectory: "/tmp/ferry-paths/data",
                                         sinks: [.defaultFile()])

    static func load(_ json: String, kinds: IngestPathRegistry = Self.kinds) throws -> AgentConfiguration {
        try AgentConfiguration.load(json: Array(json.utf8), path: "f.json", base: base, ingestPathKinds: kinds)
    }

    @Test("the kind reads its table; an absent table or one of defaults is the same configuration")
    func readsItsTable() throws {
        let loaded = try Self.load(#"{"datagram": {"path": "/run/d", "maxBytes": 512}}"#)
        #expect(loaded.ingestPaths[DatagramSettings.self] == DatagramSettings(path: "/run/d", maxBytes: 512))
        #expect(loaded.ingestPaths.keys == ["datagram"])
        #expect(try Self.load(#"{"datagram": {"maxBytes": 2048}}"#) == Self.base)
        #expect(try Self.load("{}") == Self.base)
        #expect(Self.kinds.summaryLines(loaded) == ["datagram: path=/run/d maxBytes=512"])
        #expect(Self.kinds.summaryLines(Self.base) == ["datagram: path=off maxBytes=2048"])
        #expect(Self.kinds.metrics.map(\.name) == ["test_datagram_requests_total", "test_datagram_events_total", "test_datagram_peers"])
    }

    @Test("its errors name their key path, in key order with the core's, each on its line")
    func errors() throws {
        let error = #expect(throws: AgentError.self) {
            _ = try Self.load(#"{"datagram": {"path": 5, "nope": 1}, "logLevel": "loud", "dedup": {"maxEntries": "x"}}"#)
        }
        #expect(error?.message.split(separator: "\n") == [
            "f.json: datagram.nope: unknown key; valid keys here: maxBytes, path",
            "f.json: datagram.path: expected a string",
            "f.json: dedup.maxEntries: expected an integer",
            "f.json: logLevel: expected one of: trace, debug, info, notice, warning, error, critical",
        ])
        #expect(throws: AgentError.self) { _ = try Self.load(#"{"datagram": []}"#) }
        let invalid = #expect(throws: AgentError.self) { _ = try Self.load(#"{"datagram": {"maxBytes": 0}}"#) }
        #expect(invalid?.message == "f.json: datagram.maxBytes must be positive")
        // Not registered: the core knows no such key.
        let unknown = #expect(throws: AgentError.self) { _ = try Self.load(#"{"datagram": {}}"#, kinds: .none) }
        #expect(unknown?.message.hasPrefix("f.json: datagram: unknown key") == true)
    }

    @Test("a flag applies keys of the table over the file's; a change to the table needs a restart")
    func flagAndReload() throws {
        var configuration = try Self.load(#"{"datagram": {"maxBytes": 512}}"#)
        try Self.kinds.apply(["path": "/run/flag"], toKind: "datagram", of: &configuration, source: "--datagram-path")
        #expect(configuration.ingestPaths[DatagramSettings.self] == DatagramSettings(path: "/run/flag", maxBytes: 512))
        let wrong = #expect(throws: AgentError.self) {
            try Self.kinds.apply(["path": 1], toKind: "datagram", of: &configuration, source: "--datagram-path")
        }
        #expect(wrong?.message == "--datagram-path: datagram.path: expected a string")
        #expect(throws: AgentError.self) { try IngestPathRegistry.none.apply([:], toKind: "datagram", of: &configuration, source: "--x") }
        #expect(ReloadPlan(from: Self.base, to: configuration).restartOnly == ["datagram"])
        #expect(ReloadPlan(from: configuration, to: configuration).restartOnly.isEmpty)
    }
}
