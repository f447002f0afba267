import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle
import Synchronization

/// Serves `GET /metrics` (the Prometheus text exposition) over HTTP/1.1, and nothing else: any
/// other path is 404, any other method 405. A swift-service-lifecycle `Service`: ``run()`` binds,
/// serves until graceful shutdown or cancellation, then closes.
///
/// It knows nothing of the agent but the function that renders the exposition, so the agent core
/// stays free of NIO:
///
/// ```swift
/// let server = MetricsHTTPServer(host: "127.0.0.1", port: 9464, logger: logger) { agent.metricsExposition() }
/// let group = ServiceGroup(services: [agent, server], gracefulShutdownSignals: [.sigterm], logger: logger)
/// ```
public final class MetricsHTTPServer: Service, Sendable, CustomStringConvertible {
    /// `MetricsHTTPServer(host:port)`: what logs (and service-lifecycle) print for the server.
    public var description: String { "MetricsHTTPServer(\(host):\(port))" }
    /// The address to bind.
    public let host: String
    /// The port to bind (0: any free port; see ``boundPort()``).
    public let port: Int
    private let logger: Logger
    private let exposition: @Sendable () -> [UInt8]
    private let bound = Mutex<BindState>(BindState())

    private struct BindState {
        var outcome: Result<Int, any Error>?
        var waiters: [CheckedContinuation<Int, any Error>] = []
    }

    /// A server for `host`:`port` answering with `exposition()`, which is called on a NIO event
    /// loop thread for each request: it must be quick and must not block.
    public init(host: String, port: Int, logger: Logger, exposition: @escaping @Sendable () -> [UInt8]) {
        self.host = host
        self.port = port
        self.logger = logger
        self.exposition = exposition
    }

    /// Suspends until the server is bound and returns its port, or throws why binding failed.
    public func boundPort() async throws -> Int {
        try await withCheckedThrowingContinuation { continuation in
            let outcome = bound.withLock { state -> Result<Int, any Error>? in
                if let outcome = state.outcome { return outcome }
                state.waiters.append(continuation)
                return nil
            }
            if let outcome { continuation.resume(with: outcome) }
        }
    }

    private func settle(_ outcome: Result<Int, any Error>) {
        let waiters = bound.withLock { state -> [CheckedContinuation<Int, any Error>] in
            guard state.outcome == nil else { return [] }
            state.outcome = outcome
            defer { state.waiters = [] }
            return state.waiters
        }
        waiters.forEach { $0.resume(with: outcome) }
    }

    /// Binds and serves until graceful shutdown or cancellation.
    public func run() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            try await serve(group)
        } catch {
            settle(.failure(error))
            try? await group.shutdownGracefully()
            throw error
        }
        settle(.failure(CancellationError()))
        try await group.shutdownGracefully()
    }

    private func serve(_ group: MultiThreadedEventLoopGroup) async throws {
        let exposition = self.exposition
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 64)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(MetricsHandler(exposition: exposition))
                }
            }
            .childChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: host, port: port).get()
        let port = channel.localAddress?.port ?? self.port
        logger.info("serving GET /metrics", metadata: ["address": "\(host):\(port)"])
        settle(.success(port))
        try await withTaskCancellationOrGracefulShutdownHandler {
            try await channel.closeFuture.get()
        } onCancelOrGracefulShutdown: {
            channel.close(promise: nil)
        }
    }
}

/// Answers one request per head/end pair: `GET`/`HEAD /metrics` with the exposition.
private final class MetricsHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let exposition: @Sendable () -> [UInt8]
    private var request: HTTPRequestHead?

    init(exposition: @escaping @Sendable () -> [UInt8]) { self.exposition = exposition }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            request = head
        case .body:
            break
        case .end:
            guard let head = request else { return }
            request = nil
            respond(to: head, context: context)
        }
    }

    private func respond(to head: HTTPRequestHead, context: ChannelHandlerContext) {
        let path = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
        let status: HTTPResponseStatus
        var body: [UInt8]
        var headers = HTTPHeaders()
        if path != "/metrics" {
            status = .notFound
            body = Array("not found: try GET /metrics\n".utf8)
            headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        } else if head.method != .GET && head.method != .HEAD {
            status = .methodNotAllowed
            body = Array("only GET and HEAD\n".utf8)
            headers.add(name: "Allow", value: "GET, HEAD")
            headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        } else {
            status = .ok
            body = exposition()
            headers.add(name: "Content-Type", value: "text/plain; version=0.0.4; charset=utf-8")
        }
        headers.add(name: "Content-Length", value: "\(body.count)")
        if head.method == .HEAD { body = [] }
        let keepAlive = head.isKeepAlive
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))), promise: nil)
        if !body.isEmpty {
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        }
        let done = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: done)
        if !keepAlive {
            let channel = context.channel
            done.futureResult.whenComplete { _ in channel.close(promise: nil) }
        }
    }
}
