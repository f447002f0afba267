import Logging

/// An ingest path besides the ZeroMQ socket (the local HTTP API of `FerryHTTPIngest`): a module
/// with its own I/O (SwiftNIO) that feeds the agent through the stages every path shares, so the
/// agent core never imports it and names no path.
///
/// The agent owns the path's life: ``start(_:)`` once the commit pipeline runs (before the
/// ZeroMQ sockets are bound, so once `status` answers every path is served), ``stopIntake()``
/// when shutdown begins (requests from then on are refused retryably), ``stop()`` after the
/// pipeline has committed and answered everything it was given. Paths are built from the
/// configuration by their ``IngestPathKind``.
package protocol IngestPath: Sendable {
    /// The path's name, for logs, metrics and status (the HTTP API's `unix`, `tcp`).
    var name: String { get }
    /// Binds and starts serving, submitting through `gateway`. Throws if it cannot bind.
    func start(_ gateway: IngestGateway) async throws
    /// Stops taking new work: requests from now on are answered retryably (the agent is stopping).
    func stopIntake()
    /// Closes the path; called after the commit pipeline stopped, so every answer was delivered.
    func stop() async
}

/// A kind of ingest path, registered like a sink kind: a name and a factory that builds the paths
/// a configuration asks for (none when it is off). The module of the path defines it (the HTTP
/// API's is `IngestPathKind.http`); an agent's `main.swift` registers it in one line:
///
/// ```swift
/// await FerryDaemon.main(sinkKinds: .builtIn.registering(.http, .jetstream), ingestPathKinds: .init([.http]))
/// ```
public struct IngestPathKind: Sendable {
    /// The kind's name (the HTTP API's: `http`).
    public let name: String
    let makePaths: @Sendable (_ configuration: AgentConfiguration, _ logger: Logger) throws -> [any IngestPath]

    /// A kind named `name` whose paths `makePaths` builds from a configuration (throwing
    /// ``AgentError`` with code `configuration` for a value it cannot serve).
    package init(
        name: String, makePaths: @escaping @Sendable (_ configuration: AgentConfiguration, _ logger: Logger) throws -> [any IngestPath]
    ) {
        self.name = name
        self.makePaths = makePaths
    }
}

/// The ingest path kinds an agent serves besides the ZeroMQ socket.
public struct IngestPathRegistry: Sendable {
    /// The registered kinds, in registration order.
    public private(set) var kinds: [IngestPathKind] = []

    /// No path but the ZeroMQ socket.
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

    /// The paths every registered kind builds from `configuration`, in registration order.
    package func paths(for configuration: AgentConfiguration, logger: Logger) throws -> [any IngestPath] {
        try kinds.flatMap { try $0.makePaths(configuration, logger) }
    }
}
