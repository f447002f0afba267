import FerryProtocol
import FerryStorage
import FerryThreads
import Logging

/// The settings of one type of sink: what a sink object of the configuration holds besides the
/// keys every sink shares (`name`, `type`, `batch`, `retry`, `circuit`).
///
/// A sink type is an extension point: the core names none; the `FerryFileSink`, `FerryHTTPSink`
/// and `FerryJetStreamSink` modules add `"file"`, `"http"` and `"jetstream"`, and any other
/// module can add its own the same way: a settings type that builds its ``Sink``, and a
/// ``SinkKind`` that reads it from a configuration file, registered in a ``SinkRegistry``.
public protocol SinkSettings: Sendable, Hashable {
    /// The `type` name in the configuration file (`"file"`, `"http"`, …).
    static var type: String { get }
    /// Checks the values of the sink named `name`; throws ``AgentError`` with code
    /// `configuration` listing **every** problem, one a line, each naming the sink
    /// (`sink "x": …` or `sink (http): …`), so that `ferryd validate` reports them all at once.
    func validate(name: String) throws
    /// Builds the sink this configuration describes.
    func makeSink(_ context: SinkContext) -> any Sink
    /// What the sink's bodies carry when its `disclose` setting says nothing: ``Disclosure/all``
    /// for Ferry's own infrastructure (the default), ``Disclosure/minimal`` for a body that goes
    /// to a third party.
    var defaultDisclosure: Disclosure { get }
    /// Opens and reads every file the settings name (a token, a CA file, credentials) as the
    /// sink does at start, and returns one problem a file, each naming its key
    /// (`sink (http): cannot read tokenFile /etc/ferry/collector.token`); empty when every file
    /// is fine or none is named. The sink's start refuses what it returns, and `ferryd validate`
    /// lists it, so the two agree. Blocking (file reads). The default names no file.
    func checkFiles() -> [String]
    /// What the sink will do, on one line for `ferryd validate` (`url=https://… format=segment`).
    /// The default: nothing more than the type.
    var summary: String { get }
    /// The local directory the sink writes into, once defaults are applied (the file sink's); two
    /// sinks may not write into the same one. `nil` (the default): none.
    func outputDirectory(dataDirectory: String) -> String?
}

extension SinkSettings {
    /// Everything: a sink type that says nothing else delivers to the operator's own infrastructure.
    public var defaultDisclosure: Disclosure { .all }

    /// No file to check.
    public func checkFiles() -> [String] { [] }

    /// Nothing but the type.
    public var summary: String { "" }

    /// No local directory.
    public func outputDirectory(dataDirectory: String) -> String? { nil }

    /// The settings as a type-erased hashable value (for comparing settings of any type).
    var anyHashable: AnyHashable { AnyHashable(self) }
}

/// What a sink is given when it is built: its name, the agent's data directory, a logger and a
/// thread of its own for blocking work.
public struct SinkContext: Sendable {
    /// The sink's configured name.
    public var name: String
    /// The agent's data directory.
    public var dataDirectory: String
    /// The agent's logger, with the sink's name as metadata.
    public var logger: Logger
    /// The sink's own thread for blocking calls (file I/O, fsync, a blocking client library).
    /// The sink's delivery loop uses it too; no other sink does, so a sink stalled in I/O holds
    /// back only itself.
    package let io: BlockingExecutor

    /// Creates a context with a new thread for the sink's blocking work; the thread ends with the
    /// last sink or loop that holds it (or at ``shutdown()``).
    public init(name: String, dataDirectory: String, logger: Logger) {
        self.init(name: name, dataDirectory: dataDirectory, logger: logger,
                  io: BlockingExecutor(name: "ferry-sink-" + name))
    }

    package init(name: String, dataDirectory: String, logger: Logger, io: BlockingExecutor) {
        self.name = name
        self.dataDirectory = dataDirectory
        var logger = logger
        logger[metadataKey: "sink"] = "\(name)"
        self.logger = logger
        self.io = io
    }

    /// Runs `body` on the sink's own thread, off the Swift concurrency pool, and returns its result.
    public func runBlocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await io.run(body)
    }

    /// Runs non-throwing `body` on the sink's own thread and returns its result.
    public func runBlocking<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await io.run(body)
    }

    /// Ends the sink's thread once the work already queued on it is done.
    public func shutdown() {
        io.shutdown()
    }
}

/// How to read one type of sink from a configuration file.
public struct SinkKind: Sendable {
    /// The `type` name it reads.
    public let type: String
    let load: @Sendable (_ object: [String: Any], _ fields: inout FieldReader, _ keyPath: String) throws -> any SinkSettings

    /// A sink type whose settings `load` reads from `object` (the sink's JSON object without the
    /// shared keys). `fields` applies a table of keys to setters with precise errors; `keyPath`
    /// (`sinks[2]`) names the object in those errors. Unknown keys must be errors.
    public init<Settings: SinkSettings>(
        _ settings: Settings.Type,
        load: @escaping @Sendable (_ object: [String: Any], _ fields: inout FieldReader, _ keyPath: String) throws -> Settings
    ) {
        type = Settings.type
        self.load = { object, fields, keyPath in try load(object, &fields, keyPath) }
    }
}

/// The sink types a configuration file may name, by their `type`, and the sink a configuration
/// that names none delivers to.
///
/// `ferryd` registers the file, HTTP and JetStream sinks, the file sink as the default:
///
/// ```swift
/// let kinds = SinkRegistry([.file, .http, .jetstream], defaultSink: .file())
/// let configuration = try AgentConfiguration.load(fromFile: path, sinkKinds: kinds)
/// ```
public struct SinkRegistry: Sendable {
    /// The registered kinds by type name.
    public private(set) var kinds: [String: SinkKind] = [:]
    /// The settings of the sink a configuration that names none gets, named after its type
    /// (``defaultSinks(delivery:)``); `nil`: none, the configuration must name its sinks.
    public var defaultSink: (any SinkSettings)?

    /// A registry of `kinds`, without a default sink.
    public init(_ kinds: [SinkKind] = []) {
        for kind in kinds { register(kind) }
    }

    /// A registry of `kinds`, with `defaultSink` for a configuration that names no sink.
    public init(_ kinds: [SinkKind], defaultSink: some SinkSettings) {
        self.init(kinds)
        self.defaultSink = defaultSink
    }

    /// The sinks of a configuration that names none: ``defaultSink`` named after its type, with
    /// `delivery`'s batching and retry; empty without a default.
    public func defaultSinks(delivery: AgentConfiguration.Delivery) -> [AgentConfiguration.SinkConfiguration] {
        guard let settings = defaultSink else { return [] }
        return [AgentConfiguration.SinkConfiguration(name: Swift.type(of: settings).type, settings: settings, delivery: delivery)]
    }

    /// Adds `kind`, replacing a kind of the same type.
    public mutating func register(_ kind: SinkKind) {
        kinds[kind.type] = kind
    }

    /// This registry with `kinds` added.
    public func registering(_ kinds: SinkKind...) -> SinkRegistry {
        var copy = self
        for kind in kinds { copy.register(kind) }
        return copy
    }

    /// The registered type names, sorted.
    public var types: [String] { kinds.keys.sorted() }
}
