#if canImport(Glibc)
import Glibc
#endif
import FerryAgent
import FerryPeer
import FerryProtocol
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// The local Segment-compatible HTTP API on one listener: a Unix socket in the runtime directory
/// or a TCP address. An ``IngestPath`` of kind ``IngestPathKind/http``: the agent starts it once its commit pipeline runs
/// and stops it with itself; every request's events go through the ``IngestGateway`` into the
/// same group commit as ZeroMQ ingest, and a 2xx is written only once all of them are settled.
///
/// It owns one event loop thread (the sockets) and one thread-pool thread (body parsing, procfs
/// reads), so neither the agent's threads nor Swift's cooperative pool ever wait on it.
///
/// ```swift
/// let server = HTTPIngestServer(address: .unix(path: runtime + "/http", mode: 0o600), writeKeys: [:],
///                               maxConnections: 256, logger: logger)
/// let agent = FerryAgent(configuration: configuration, sinks: [:], paths: [server], logger: logger)
/// ```
package final class HTTPIngestServer: IngestPath, CustomStringConvertible {
    /// Where a server listens.
    package enum Address: Sendable, Equatable {
        /// A Unix socket at `path`, given file mode `mode` (the sender's credentials: `SO_PEERCRED`).
        case unix(path: String, mode: UInt32)
        /// A TCP address (the sender's uid: `/proc/net/tcp`).
        case tcp(host: String, port: Int)
    }

    /// Seconds a request may take to arrive, head to end (a slow-loris client is answered 408).
    package static let requestSeconds: Int64 = 10
    /// Seconds a connection may stay idle between requests before it is closed.
    package static let idleSeconds: Int64 = 60

    package let address: Address
    package let name: String
    package var description: String { "HTTPIngestServer(\(name))" }
    /// The HTTP API's metrics, `ferry_http_*{listener}`.
    package var metricSet: IngestPathMetricSet? { .http }
    /// Segment's libraries expect retries to be dropped by `messageId` for about a day.
    package var minimumDedupSeconds: Int { HTTPIngestConfiguration.minimumDedupSeconds }
    private let writeKeys: [String: String]
    private let maxConnections: Int
    private let hostPolicy: HostPolicy
    private let logger: Logger
    private let state = Mutex<State>(State())

    private struct State {
        var group: MultiThreadedEventLoopGroup?
        var pool: NIOThreadPool?
        var channel: (any Channel)?
        var gateway: IngestGateway?
        var boundPort: Int?
        var connections: Connections?
    }

    /// A server on `address`; `writeKeys` name the source of events by write key; more than
    /// `maxConnections` open connections are answered 503 and closed. `allowedHosts` and
    /// `allowedOrigins` are added to the `Host` and `Origin` headers served (``HostPolicy``).
    package init(address: Address, writeKeys: [String: String], maxConnections: Int, allowedHosts: [String] = [],
                 allowedOrigins: [String] = [], logger: Logger) {
        self.address = address
        switch address {
        case .unix:
            name = "unix"
            hostPolicy = .unix(allowedOrigins: allowedOrigins)
        case .tcp(let host, _):
            name = "tcp"
            hostPolicy = .tcp(listenHost: host, allowedHosts: allowedHosts, allowedOrigins: allowedOrigins)
        }
        self.writeKeys = writeKeys
        self.maxConnections = maxConnections
        self.logger = logger
    }

    /// The servers `http` asks for (the table `http` of `configuration`): the Unix socket
    /// `<runtimeDirectory>/http` (0600 per user; 0666 for a system agent, whose access policy is
    /// checked per request) and the TCP listener.
    package static func servers(for http: HTTPIngestConfiguration, configuration: AgentConfiguration, logger: Logger) throws
        -> [HTTPIngestServer] {
        var servers: [HTTPIngestServer] = []
        if http.socket {
            let mode: UInt32 = configuration.mode == .system ? 0o666 : 0o600
            servers.append(HTTPIngestServer(address: .unix(path: socketPath(configuration.runtimeDirectory), mode: mode),
                                            writeKeys: http.writeKeys, maxConnections: http.maxConnections,
                                            allowedOrigins: http.allowedOrigins, logger: logger))
        }
        if let tcp = try http.listenAddress() {
            servers.append(HTTPIngestServer(address: .tcp(host: tcp.host, port: tcp.port), writeKeys: http.writeKeys,
                                            maxConnections: http.maxConnections, allowedHosts: http.allowedHosts,
                                            allowedOrigins: http.allowedOrigins, logger: logger))
        }
        coverDescriptors(servers.count * http.maxConnections + reservedDescriptors, logger: logger)
        return servers
    }

    /// Descriptors the agent needs besides the HTTP API's connections (log, sinks, ZeroMQ).
    static let reservedDescriptors = 512

    /// Raises the soft limit of open files to `needed` (at most the hard limit), so the allowed
    /// connections cannot run the agent out of descriptors; warns when the hard limit is lower.
    static func coverDescriptors(_ needed: Int, logger: Logger) {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < rlim_t(needed) else { return }
        let target = min(rlim_t(needed), limit.rlim_max)
        limit.rlim_cur = target
        if setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) != 0 || target < rlim_t(needed) {
            logger.warning("the open-file limit is below what the HTTP API's connections need; lower http.maxConnections or raise LimitNOFILE", metadata: [
                "needed": "\(needed)", "limit": "\(target)",
            ])
        }
    }

    /// The Unix socket of the HTTP API in `runtimeDirectory`.
    package static func socketPath(_ runtimeDirectory: String) -> String { runtimeDirectory + "/http" }

    /// The TCP port bound (after ``start(_:)``; nil for a Unix socket).
    package var boundPort: Int? { state.withLock { $0.boundPort } }

    /// The socket's path, or the TCP address with the port bound (`127.0.0.1:8088`).
    package var endpoint: String {
        switch address {
        case .unix(let path, _): path
        case .tcp(let host, let port): (host.contains(":") ? "[\(host)]" : host) + ":\(boundPort ?? port)"
        }
    }

    package func start(_ gateway: IngestGateway) async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        state.withLock {
            $0.group = group
            $0.pool = pool
            $0.gateway = gateway
        }
        let connections = Connections(limit: maxConnections)
        let budget = BodyBudget(limit: IngestVerdict.maxBufferedBodyBytes)
        let context = HandlerContext(gateway: gateway, pool: pool, writeKeys: writeKeys, tcp: { if case .tcp = address { true } else { false } }(),
                                     logger: logger)
        let configuration = HTTPConnectionStateMachine.Configuration(hostPolicy: hostPolicy)
        state.withLock { $0.connections = connections }
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    guard connections.open(channel) else {
                        // Over the limit: a whole response at once, nothing read, then close.
                        gateway.metrics?.request(status: 503)
                        let refusal = IngestResponse.refusal(503, "too_many_connections",
                                                             "the HTTP API has \(connections.limit) connections open; retry later",
                                                             retryAfter: IngestVerdict.retryAfterBusy)
                        var head = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: \(IngestVerdict.retryAfterBusy)\r\n"
                        head += "Content-Length: \(refusal.body.count)\r\nConnection: close\r\n\r\n"
                        let buffer = channel.allocator.buffer(bytes: Array(head.utf8) + refusal.body)
                        channel.writeAndFlush(buffer).whenComplete { _ in channel.close(promise: nil) }
                        return
                    }
                    gateway.metrics?.connection(1)
                    channel.closeFuture.whenComplete { _ in
                        connections.close(channel)
                        gateway.metrics?.connection(-1)
                    }
                    let handler = HTTPConnectionHandler(configuration: configuration,
                                                        responder: GatewayResponder(channel: channel, context: context),
                                                        reserve: { budget.reserve($0) }, release: { budget.release($0) })
                    try HTTPConnectionHandler.configure(channel.pipeline.syncOperations, handler: handler)
                }
            }
            .childChannelOption(.autoRead, value: true)
        let channel: any Channel
        do {
            switch address {
            case .unix(let path, let mode):
                // The agent holds the runtime directory's lock: a socket file left there is a
                // dead agent's.
                unlink(path)
                channel = try await bootstrap.bind(unixDomainSocketPath: path).get()
                guard chmod(path, mode_t(mode)) == 0 else {
                    throw AgentError(code: .socket, message: "cannot set the mode of \(path): \(String(cString: strerror(errno)))")
                }
            case .tcp(let host, let port):
                channel = try await bootstrap.bind(host: host, port: port).get()
            }
        } catch {
            try? await pool.shutdownGracefully()
            try? await group.shutdownGracefully()
            if let error = error as? AgentError { throw error }
            throw AgentError(code: .socket, message: "the HTTP API cannot listen on \(address): \(error)")
        }
        state.withLock {
            $0.channel = channel
            $0.boundPort = channel.localAddress?.port
        }
        logger.info("serving the HTTP API", metadata: ["listener": "\(name)", "address": "\(channel.localAddress.map { "\($0)" } ?? "?")"])
    }

    package func stopIntake() {
        state.withLock { $0.gateway }?.stopIntake()
    }

    package func stop() async {
        let (channel, group, pool, connections) = state.withLock { ($0.channel, $0.group, $0.pool, $0.connections) }
        try? await channel?.close()
        if case .unix(let path, _) = address { unlink(path) }
        // The commit pipeline stopped before this, so every request taken is answered: each
        // connection writes the answers it holds, then closes (its state machine bounds the
        // wait); only then does the loop close.
        let open = connections?.all() ?? []
        for connection in open {
            connection.eventLoop.execute { connection.pipeline.fireUserInboundEventTriggered(HTTPQuiesce()) }
        }
        for connection in open { try? await connection.closeFuture.get() }
        try? await group?.shutdownGracefully()
        try? await pool?.shutdownGracefully()
    }
}

/// The open connections of one listener, against its limit (touched from its event loop and
/// from close callbacks).
private final class Connections: Sendable {
    let limit: Int
    private let channels = Mutex<[ObjectIdentifier: any Channel]>([:])
    init(limit: Int) { self.limit = limit }
    /// Takes `channel` in; false when the limit is reached.
    func open(_ channel: any Channel) -> Bool {
        channels.withLock { open in
            guard open.count < limit else { return false }
            open[ObjectIdentifier(channel)] = channel
            return true
        }
    }
    func close(_ channel: any Channel) { _ = channels.withLock { $0.removeValue(forKey: ObjectIdentifier(channel)) } }
    /// The connections open now.
    func all() -> [any Channel] { channels.withLock { Array($0.values) } }
}

/// The request bodies one listener holds (received, being parsed or stored), against a limit.
final class BodyBudget: Sendable {
    let limit: Int
    private let used = Atomic<Int>(0)
    init(limit: Int) { self.limit = limit }
    /// Takes `bytes`; false (and nothing taken) when they would pass the limit.
    func reserve(_ bytes: Int) -> Bool {
        if used.wrappingAdd(bytes, ordering: .relaxed).newValue > limit {
            used.wrappingSubtract(bytes, ordering: .relaxed)
            return false
        }
        return true
    }
    func release(_ bytes: Int) {
        if bytes > 0 { used.wrappingSubtract(bytes, ordering: .relaxed) }
    }
    /// Bytes held now.
    var held: Int { used.load(ordering: .relaxed) }
}
