import Logging

/// An ingest path (the ZeroMQ socket of `FerryZeroMQIngest`, the local HTTP API of
/// `FerryHTTPIngest`): a module with its own I/O (its own socket thread, SwiftNIO) that feeds the
/// agent through the stages every path shares, by its ``IngestGateway``, so the agent core never
/// imports it and names no path.
///
/// The agent owns the path's life: ``start(_:)`` once the commit pipeline runs (in registration
/// order, before the agent's bus and control sockets are bound, so once `status` answers every
/// path is served), ``stopIntake()`` when shutdown begins (from then on the path reads no more,
/// or refuses retryably), ``stop()`` after the pipeline has committed and answered everything it
/// was given. Paths are built from the configuration by their ``IngestPathKind``.
package protocol IngestPath: Sendable {
    /// The path's name, for logs, metrics and status (the HTTP API's `unix`, `tcp`; `zeromq`).
    var name: String { get }
    /// The metrics of its kind; the agent makes the path's instruments from them at start and
    /// lists the path's figures in `status`. Nil: the path has none of its own (the ZeroMQ
    /// socket, counted by the core's `ferry_messages_*` and `ferry_clients_connected`).
    var metricSet: IngestPathMetricSet? { get }
    /// Where the path is served, for `status` (the HTTP API's socket path, its TCP `host:port`);
    /// empty when it has no address to show there (the ZeroMQ socket, which `status` names itself).
    var endpoint: String { get }
    /// The shortest id window (seconds) the path needs: `dedup.maxAgeSeconds` is raised to it
    /// while the path is served (the HTTP API's clients expect a day). 0 by default.
    var minimumDedupSeconds: Int { get }
    /// Binds and starts serving, submitting through `gateway`. Throws if it cannot bind.
    func start(_ gateway: IngestGateway) async throws
    /// Stops taking new work: requests from now on are answered retryably (the agent is stopping).
    func stopIntake()
    /// Closes the path; called after the commit pipeline stopped, so every answer was delivered.
    func stop() async
}

extension IngestPath {
    /// No minimum: the configured id window.
    package var minimumDedupSeconds: Int { 0 }
    /// No address to show.
    package var endpoint: String { "" }
}

/// The metrics of a kind of ingest path, each labelled first by the path's name: requests
/// answered (by status), events (by outcome, ``IngestPathMetrics/outcomes``) and open
/// connections. The kind's module defines them (the HTTP API's `ferry_http_*{listener}`), so the
/// catalog of the core (``MetricDescriptor/catalog``) names no path.
public struct IngestPathMetricSet: Sendable, Hashable {
    /// Requests answered, labelled `[path, "status"]` (a counter).
    public let requests: MetricDescriptor
    /// Events of the requests, labelled `[path, "outcome"]` (a counter).
    public let events: MetricDescriptor
    /// Open connections, labelled `[path]` (a gauge).
    public let connections: MetricDescriptor

    /// A set of the three descriptors.
    public init(requests: MetricDescriptor, events: MetricDescriptor, connections: MetricDescriptor) {
        self.requests = requests
        self.events = events
        self.connections = connections
    }

    /// The three, in the order of docs/METRICS.md.
    public var all: [MetricDescriptor] { [requests, events, connections] }
}

/// The settings of one kind of ingest path: its table of the configuration file (key ``key``),
/// read and checked by the kind's module, so the agent core holds no path's settings. Stored in
/// ``AgentConfiguration/ingestPaths``; a configuration without the table has ``init()``.
public protocol IngestPathSettings: Sendable, Hashable {
    /// The key of its table in the configuration file, also its kind's name (`"http"`).
    static var key: String { get }
    /// The settings of a configuration that has no table for the path.
    init()
    /// Checks the values; throws ``AgentError`` with code `configuration` whose message starts
    /// with the key path (`http.listen "x" must be …`).
    func validate() throws
    /// The settings for `ferryd validate`, on one line without the key (`socket=true listen=off …`).
    var summary: String { get }
}

extension IngestPathSettings {
    /// Whether these are the settings of a configuration without the table.
    var isDefault: Bool { self == Self() }
    /// The settings as a type-erased hashable value (for comparing settings of any type).
    var anyHashable: AnyHashable { AnyHashable(self) }
}

extension AgentConfiguration {
    /// The settings of the ingest paths that have a table (not ZeroMQ's), one ``IngestPathSettings`` per kind, as
    /// their kinds read them from the configuration file's tables (key `http` for the HTTP API).
    /// A kind whose table is absent, or holds only defaults, has no entry: its settings are
    /// ``IngestPathSettings/init()`` (so equal configurations compare equal however they were
    /// written).
    public struct IngestPaths: Sendable, Hashable {
        private var byKey: [String: any IngestPathSettings] = [:]

        /// No settings: every kind's defaults.
        public init() {}

        /// The settings of type `Settings` (its defaults when there are none).
        public subscript<Settings: IngestPathSettings>(_ type: Settings.Type) -> Settings {
            get { byKey[Settings.key] as? Settings ?? Settings() }
            set { byKey[Settings.key] = newValue.isDefault ? nil : newValue }
        }

        /// The keys of the settings that are not their kind's defaults, sorted.
        public var keys: [String] { byKey.keys.sorted() }

        /// The settings of the table `key`; nil when they are their kind's defaults.
        public subscript(key: String) -> (any IngestPathSettings)? { byKey[key] }

        public static func == (lhs: IngestPaths, rhs: IngestPaths) -> Bool {
            lhs.byKey.mapValues(\.anyHashable) == rhs.byKey.mapValues(\.anyHashable)
        }

        public func hash(into hasher: inout Hasher) {
            hasher.combine(byKey.mapValues(\.anyHashable))
        }
    }
}

/// A kind of ingest path, registered like a sink kind: its configuration table read by its own
/// module (if it has one), the metrics of its paths, and a factory that builds the paths a
/// configuration asks for (none when it is off). The module of the path defines it (the ZeroMQ
/// socket's is `IngestPathKind.zeromq`, the HTTP API's `IngestPathKind.http`); an agent's
/// `main.swift` registers them in one line, and the agent serves no other path:
///
/// ```swift
/// await FerryDaemon.main(sinkKinds: SinkRegistry([.file, .http, .jetstream], defaultSink: .file()),
///                        ingestPathKinds: IngestPathRegistry([.zeromq, .http]))
/// ```
public struct IngestPathKind: Sendable {
    /// The kind's name and the key of its table in the configuration file (the HTTP API's: `http`).
    public let name: String
    /// The metrics its paths export (docs/METRICS.md lists them with the core's catalog; the
    /// exposition takes their help texts from here); nil for a kind counted by the core's (ZeroMQ).
    public let metricSet: IngestPathMetricSet?
    /// Whether the kind has a table in the configuration file (key ``name``).
    let hasSettings: Bool
    let load: @Sendable (_ table: [String: Any], _ configuration: inout AgentConfiguration, _ fields: inout FieldReader, _ keyPath: String) throws -> Void
    let summary: @Sendable (_ configuration: AgentConfiguration) -> String
    let makePaths: @Sendable (_ configuration: AgentConfiguration, _ logger: Logger) throws -> [any IngestPath]

    /// A kind whose settings are `Settings` (its table, key ``IngestPathSettings/key``): `load`
    /// applies the table at key path `keyPath` to `base` (the settings so far: the defaults, or
    /// what a file set before a command-line flag) with `fields`, which names the key path in its
    /// errors (unknown keys must be errors; checks of the values belong in
    /// ``IngestPathSettings/validate()``); `makePaths` builds the paths of a configuration
    /// (throwing ``AgentError`` with code `configuration` for a value it cannot serve).
    package init<Settings: IngestPathSettings>(
        _ settings: Settings.Type, metrics: IngestPathMetricSet,
        load: @escaping @Sendable (_ table: [String: Any], _ base: Settings, _ fields: inout FieldReader, _ keyPath: String) throws -> Settings,
        makePaths: @escaping @Sendable (_ settings: Settings, _ configuration: AgentConfiguration, _ logger: Logger) throws -> [any IngestPath]
    ) {
        name = Settings.key
        metricSet = metrics
        hasSettings = true
        self.load = { table, configuration, fields, keyPath in
            configuration.ingestPaths[Settings.self] = try load(table, configuration.ingestPaths[Settings.self], &fields, keyPath)
        }
        summary = { $0.ingestPaths[Settings.self].summary }
        self.makePaths = { configuration, logger in try makePaths(configuration.ingestPaths[Settings.self], configuration, logger) }
    }

    /// A kind named `name` without a configuration table or metrics of its own (the ZeroMQ
    /// socket's, always on): `makePaths` builds its paths from the whole configuration.
    package init(
        name: String, makePaths: @escaping @Sendable (_ configuration: AgentConfiguration, _ logger: Logger) throws -> [any IngestPath]
    ) {
        self.name = name
        metricSet = nil
        hasSettings = false
        // Never called: the file loader and ``IngestPathRegistry/apply(_:toKind:of:source:)``
        // skip a kind without settings.
        load = { _, _, _, _ in }
        summary = { _ in "" }
        self.makePaths = makePaths
    }

    /// The metrics its paths export.
    public var metrics: [MetricDescriptor] { metricSet?.all ?? [] }
}

/// The ingest path kinds an agent serves (`ferryd`: the ZeroMQ socket and the HTTP API).
public struct IngestPathRegistry: Sendable {
    /// The registered kinds, in registration order.
    public private(set) var kinds: [IngestPathKind] = []

    /// No ingest path (an agent that serves the bus and control sockets only).
    public static let none = IngestPathRegistry()

    /// A registry of `kinds`.
    public init(_ kinds: [IngestPathKind] = []) {
        for kind in kinds { register(kind) }
    }

    /// Adds `kind`, replacing a kind of the same name.
    public mutating func register(_ kind: IngestPathKind) {
        kinds.removeAll { $0.name == kind.name }
        kinds.append(kind)
    }

    /// This registry with `kinds` added.
    public func registering(_ kinds: IngestPathKind...) -> IngestPathRegistry {
        var copy = self
        for kind in kinds { copy.register(kind) }
        return copy
    }

    /// The metrics of every registered kind's paths (for the exposition's help texts).
    public var metrics: [MetricDescriptor] { kinds.flatMap(\.metrics) }

    /// The paths every registered kind builds from `configuration`, in registration order.
    package func paths(for configuration: AgentConfiguration, logger: Logger) throws -> [any IngestPath] {
        try kinds.flatMap { try $0.makePaths(configuration, logger) }
    }

    /// One line per kind with settings for `ferryd validate`: `http: socket=true listen=off …`.
    package func summaryLines(_ configuration: AgentConfiguration) -> [String] {
        kinds.filter(\.hasSettings).map { "\($0.name): \($0.summary(configuration))" }
    }

    /// Applies `table` (keys of the kind named `name`'s table, from a command-line flag named
    /// `source`, e.g. `["listen": "127.0.0.1:8088"]` for `--http-listen`) over `configuration`'s
    /// settings of that kind. Throws ``AgentError`` (code `configuration`) when no such kind is
    /// registered or a value has the wrong type.
    package func apply(_ table: [String: Any], toKind name: String, of configuration: inout AgentConfiguration, source: String) throws {
        guard let kind = kinds.first(where: { $0.name == name && $0.hasSettings }) else {
            throw AgentError(code: .configuration, message: "\(source): this agent serves no \(name) ingest path")
        }
        var fields = FieldReader(path: source)
        try kind.load(table, &configuration, &fields, name)
    }
}
