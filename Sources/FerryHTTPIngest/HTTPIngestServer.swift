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
    private let writeKeys: [String: String]
    private let maxConnections: Int
    private let logger: Logger
    private let state = Mutex<State>(State())

    private struct State {
        var group: MultiThreadedEventLoopGroup?
        var pool: NIOThreadPool?
        var channel: (any Channel)?
        var gateway: IngestGateway?
        var boundPort: Int?
    }

    /// A server on `address`; `writeKeys` name the source of events by write key; more than
    /// `maxConnections` open connections are answered 503 and closed.
    package init(address: Address, writeKeys: [String: String], maxConnections: Int, logger: Logger) {
        self.address = address
        switch address {
        case .unix: name = "unix"
        case .tcp: name = "tcp"
        }
        self.writeKeys = writeKeys
        self.maxConnections = maxConnections
        self.logger = logger
    }

    /// The servers `configuration` asks for (``AgentConfiguration/httpIngest``): the Unix socket
    /// `<runtimeDirectory>/http` (0600 per user; 0666 for a system agent, whose access policy is
    /// checked per request) and the TCP listener.
    package static func servers(for configuration: AgentConfiguration, logger: Logger) throws -> [HTTPIngestServer] {
        let http = configuration.httpIngest
        var servers: [HTTPIngestServer] = []
        if http.socket {
            let mode: UInt32 = configuration.mode == .system ? 0o666 : 0o600
            servers.append(HTTPIngestServer(address: .unix(path: socketPath(configuration.runtimeDirectory), mode: mode),
                                            writeKeys: http.writeKeys, maxConnections: http.maxConnections, logger: logger))
        }
        if let tcp = try http.listenAddress() {
            servers.append(HTTPIngestServer(address: .tcp(host: tcp.host, port: tcp.port), writeKeys: http.writeKeys,
                                            maxConnections: http.maxConnections, logger: logger))
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

    package func start(_ gateway: IngestGateway) async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        state.withLock {
            $0.group = group
            $0.pool = pool
            $0.gateway = gateway
        }
        let connections = ConnectionCount(limit: maxConnections)
        let context = HandlerContext(budget: BodyBudget(limit: IngestVerdict.maxBufferedBodyBytes), gateway: gateway, pool: pool, writeKeys: writeKeys, tcp: { if case .tcp = address { true } else { false } }(),
                                     logger: logger)
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    guard connections.open() else {
                        // Over the limit: a whole response at once, nothing read, then close.
                        gateway.metrics.request(status: 503)
                        let refusal = IngestResponse.refusal(503, "too_many_connections",
                                                             "the HTTP API has \(connections.limit) connections open; retry later",
                                                             retryAfter: IngestVerdict.retryAfterBusy)
                        var head = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: \(IngestVerdict.retryAfterBusy)\r\n"
                        head += "Content-Length: \(refusal.body.count)\r\nConnection: close\r\n\r\n"
                        let buffer = channel.allocator.buffer(bytes: Array(head.utf8) + refusal.body)
                        channel.writeAndFlush(buffer).whenComplete { _ in channel.close(promise: nil) }
                        return
                    }
                    gateway.metrics.connection(1)
                    channel.closeFuture.whenComplete { _ in
                        connections.close()
                        gateway.metrics.connection(-1)
                    }
                    let deadline = RequestDeadline()
                    try sync.addHandler(IdleStateHandler(readTimeout: .seconds(HTTPIngestServer.idleSeconds)))
                    try sync.addHandler(DeadlineHandler(deadline: deadline))
                    try sync.configureHTTPServerPipeline(withErrorHandling: true)
                    try sync.addHandler(IngestHandler(context: context, deadline: deadline))
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
        let (channel, group, pool) = state.withLock { ($0.channel, $0.group, $0.pool) }
        try? await channel?.close()
        if case .unix(let path, _) = address { unlink(path) }
        // Answers were all written (the commit pipeline stopped before this); closing the loop
        // closes the connections.
        try? await group?.shutdownGracefully()
        try? await pool?.shutdownGracefully()
    }
}

/// Open connections of one listener against its limit (touched from its event loop and from
/// close callbacks).
private final class ConnectionCount: Sendable {
    let limit: Int
    private let count = Atomic<Int>(0)
    init(limit: Int) { self.limit = limit }
    func open() -> Bool {
        if count.wrappingAdd(1, ordering: .relaxed).newValue > limit {
            count.wrappingSubtract(1, ordering: .relaxed)
            return false
        }
        return true
    }
    func close() { count.wrappingSubtract(1, ordering: .relaxed) }
}

/// The request bodies one listener holds (received, being parsed or stored), against a limit.
private final class BodyBudget: Sendable {
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
}

/// What every connection's handler shares.
private struct HandlerContext: Sendable {
    let budget: BodyBudget
    let gateway: IngestGateway
    let pool: NIOThreadPool
    let writeKeys: [String: String]
    let tcp: Bool
    let logger: Logger
}

/// The deadline of the request arriving on a connection, shared by the two handlers of one
/// connection (on its event loop only).
private final class RequestDeadline {
    var timer: Scheduled<Void>?
    /// Set once the response has started: the deadline no longer applies.
    var responding = false
}

/// First in the pipeline: arms the request deadline at the first byte of a request, and answers
/// 408 and closes when it passes before the request is complete (slow-loris).
private final class DeadlineHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    let deadline: RequestDeadline

    init(deadline: RequestDeadline) { self.deadline = deadline }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if deadline.timer == nil && !deadline.responding {
            // Written from this handler's context, the head of the pipeline: raw bytes, past the
            // HTTP encoder.
            let loopBound = NIOLoopBound((deadline, context), eventLoop: context.eventLoop)
            deadline.timer = context.eventLoop.scheduleTask(in: .seconds(HTTPIngestServer.requestSeconds)) {
                let (deadline, context) = loopBound.value
                deadline.timer = nil
                guard !deadline.responding else { return }
                deadline.responding = true
                let refusal = IngestResponse.refusal(408, "request_timeout",
                                                     "the request did not arrive within \(HTTPIngestServer.requestSeconds) seconds")
                let head = "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nContent-Length: \(refusal.body.count)\r\nConnection: close\r\n\r\n"
                let channel = context.channel
                context.writeAndFlush(NIOAny(channel.allocator.buffer(bytes: Array(head.utf8) + refusal.body))).whenComplete { _ in
                    channel.close(promise: nil)
                }
            }
        }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        deadline.timer?.cancel()
        deadline.timer = nil
        context.fireChannelInactive()
    }
}

/// Serves the requests of one connection, one at a time (the HTTP pipelining handler holds the
/// next until this one's response is written).
private final class IngestHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let context: HandlerContext
    private let deadline: RequestDeadline
    /// The sender as the kernel told it: resolved once per connection, in the thread pool.
    private var identity: EventLoopFuture<Identity>?
    private var request: Request?
    /// A request is being stored (between its end and its response).
    private var busy = false
    /// Bytes of the ``BodyBudget`` the request being received or stored holds.
    private var reserved = 0

    private struct Request {
        var head: HTTPRequestHead
        var admitted: Result<IngestVerdict.Admitted, IngestRefusal>
        var body: ByteBuffer
        var discarded = 0
        var receivedAt: UInt64
    }

    /// Who is at the other end, and its origin metadata.
    struct Identity: Sendable {
        var credentials: PeerCredentials?
        var origin: [UInt8]
    }

    init(context: HandlerContext, deadline: RequestDeadline) {
        self.context = context
        self.deadline = deadline
    }

    func channelActive(context channelContext: ChannelHandlerContext) {
        identity = Self.identify(channelContext.channel, tcp: context.tcp, pool: context.pool)
        channelContext.fireChannelActive()
    }

    private static func identify(_ channel: any Channel, tcp: Bool, pool: NIOThreadPool) -> EventLoopFuture<Identity> {
        let loop = channel.eventLoop
        if tcp {
            guard let remote = channel.remoteAddress, let local = channel.localAddress, let peerIP = remote.ipAddress,
                  let peerPort = remote.port, let localIP = local.ipAddress, let localPort = local.port else {
                return loop.makeSucceededFuture(Identity(credentials: nil, origin: []))
            }
            return pool.runIfActive(eventLoop: loop) {
                guard let uid = TCPPeer.uid(peerIP: peerIP, peerPort: peerPort, localIP: localIP, localPort: localPort) else {
                    return Identity(credentials: nil, origin: [])
                }
                let credentials = PeerCredentials(pid: 0, uid: uid, gid: TCPPeer.primaryGID(of: uid) ?? UInt32.max)
                return Identity(credentials: credentials, origin: IngestGateway.origin(of: credentials))
            }
        }
        guard let provider = channel as? any SocketOptionProvider else {
            return loop.makeSucceededFuture(Identity(credentials: nil, origin: []))
        }
        let credentials: EventLoopFuture<PeerCred> = provider.unsafeGetSocketOption(level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED))
        return credentials.flatMap { cred in
            let peer = PeerCredentials(pid: cred.pid, uid: cred.uid, gid: cred.gid)
            return pool.runIfActive(eventLoop: loop) { Identity(credentials: peer, origin: IngestGateway.origin(of: peer)) }
        }.flatMapErrorThrowing { _ in Identity(credentials: nil, origin: []) }
    }

    func channelRead(context channelContext: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            let admitted = IngestVerdict.admit(
                method: head.method.rawValue, uri: head.uri, contentType: head.headers.first(name: "Content-Type"),
                contentEncoding: head.headers.first(name: "Content-Encoding"),
                contentLength: head.headers.first(name: "Content-Length").flatMap { Int($0) })
            request = Request(head: head, admitted: admitted, body: channelContext.channel.allocator.buffer(capacity: 0),
                              receivedAt: MonotonicClock.nanoseconds())
        case .body(var part):
            guard var current = request else { return }
            request = nil
            if case .success = current.admitted {
                if !context.budget.reserve(part.readableBytes) {
                    // Every connection's bodies together stay under the budget: memory is bounded
                    // whatever the number of clients sending 5 MiB at once.
                    current.admitted = .failure(IngestRefusal(503, "busy", "the agent is receiving as many request bodies as it holds at once; retry shortly",
                                                              retryAfter: IngestVerdict.retryAfterBusy))
                    current.discarded = current.body.readableBytes + part.readableBytes
                    current.body.clear()
                    releaseBody()
                } else if current.body.readableBytes + part.readableBytes > IngestVerdict.maxBodyBytes {
                    reserved += part.readableBytes
                    releaseBody()
                    current.admitted = .failure(IngestRefusal(413, "too_large", "the body is larger than \(IngestVerdict.maxBodyBytes) bytes"))
                    current.discarded = current.body.readableBytes + part.readableBytes
                    current.body.clear()
                } else {
                    reserved += part.readableBytes
                    current.body.writeBuffer(&part)
                }
            } else {
                current.discarded += part.readableBytes
            }
            request = current
            // A refused body is read and thrown away (so the client reads the answer rather than a
            // reset), but not without end.
            if current.discarded > 8 * IngestVerdict.maxBodyBytes, case .failure(let refusal) = current.admitted {
                request = nil
                respond(refusal.response, keepAlive: false, channelContext)
            }
        case .end:
            // The whole request is in: its deadline no longer applies (storing it may take longer).
            deadline.timer?.cancel()
            deadline.timer = nil
            guard let current = request else { return }
            request = nil
            finish(current, channelContext)
        }
    }

    private func finish(_ current: Request, _ channelContext: ChannelHandlerContext) {
        let keepAlive = current.head.isKeepAlive
        let admitted: IngestVerdict.Admitted
        switch current.admitted {
        case .failure(let refusal):
            respond(refusal.response, keepAlive: keepAlive && current.discarded == 0, channelContext)
            return
        case .success(let value): admitted = value
        }
        let gateway = context.gateway
        let loop = channelContext.eventLoop
        busy = true
        let bound = NIOLoopBound((self, channelContext), eventLoop: loop)
        let pool = context.pool, writeKeys = context.writeKeys
        let body = Array(current.body.readableBytesView)
        let authorization = current.head.headers.first(name: "Authorization")
        let receivedAt = current.receivedAt
        let identity = self.identity ?? loop.makeSucceededFuture(Identity(credentials: nil, origin: []))
        identity.flatMap { identity -> EventLoopFuture<Response> in
            // One crossing into the agent: admitted (stopping, back-pressure, then the access
            // policy: the kernel's word, checked before the body is looked at), then parsed here,
            // in the pool, and submitted; the answer comes back once.
            pool.runIfActive(eventLoop: loop) {
                Self.submit(body: body, admitted: admitted, authorization: authorization, writeKeys: writeKeys, identity: identity,
                            gateway: gateway, receivedAt: receivedAt, loop: loop)
            }.flatMap { $0 }
        }.whenComplete { result in
            let (handler, channelContext) = bound.value
            handler.busy = false
            switch result {
            case .success(let outcome):
                for label in IngestPathMetrics.outcomes {
                    gateway.metrics.events(label, outcome.outcomes.count { $0.outcome.label == label })
                }
                if outcome.published && outcome.response.status >= 400 {
                    gateway.publishRefusal(status: outcome.response.status, code: outcome.response.code ?? "",
                                           message: String(decoding: outcome.response.body, as: UTF8.self), uid: outcome.uid)
                }
                handler.respond(outcome.response, keepAlive: keepAlive && outcome.keepAlive, channelContext)
            case .failure(let error):
                handler.context.logger.error("HTTP API request failed", metadata: ["error": "\(error)"])
                handler.respond(.refusal(503, "unavailable", "the agent could not take the request; retry later",
                                         retryAfter: IngestVerdict.retryAfterBusy), keepAlive: false, channelContext)
            }
        }
    }

    private struct Response: Sendable {
        var response: IngestResponse
        var outcomes: [(messageID: String?, outcome: EventOutcome)]
        var uid: UInt32?
        /// Whether a refusal is published on the bus (not for "stopping" and "busy").
        var published = true
        /// Whether the connection may stay open after it.
        var keepAlive = true
    }

    /// Submits a request's events (in the pool: the body is parsed here) and answers once the
    /// commit stage has answered every one.
    private static func submit(
        body: [UInt8], admitted: IngestVerdict.Admitted, authorization: String?, writeKeys: [String: String],
        identity: Identity, gateway: IngestGateway,
        receivedAt: UInt64, loop: any EventLoop
    ) -> EventLoopFuture<Response> {
        let uid = identity.credentials?.uid
        let peer = SegmentRequest.Peer(uid: uid, pid: UInt32(bitPattern: identity.credentials?.pid ?? 0))
        let generator = EventIDGenerator()
        var messages: [SegmentRequest.Message] = []
        var refusal: IngestRefusal?
        let promise = loop.makePromise(of: IngestAnswer.self)
        let admission = gateway.submit(peer: identity.credentials, origin: identity.origin, receivedAt: receivedAt) {
            switch SegmentRequest.messages(body: body, admitted: admitted, authorization: authorization, peer: peer,
                                           writeKeys: writeKeys, categories: gateway.categories,
                                           typeCategories: gateway.typeCategories, now: WallClock.unixMilliseconds(),
                                           newID: { generator.next() }) {
            case .failure(let failure):
                refusal = failure
                return nil
            case .success(let prepared):
                messages = prepared
                return prepared.map { message -> IngestGateway.Frame in
                    switch message {
                    case .event(let event):
                        if let denied = event.deniedCategory {
                            return .blocked(frame: event.frame, ack: .consentDenied, reason: "category_preferences:\(denied)")
                        }
                        return .event(event.frame)
                    case .refused(let refusal): return .refused(refusal.id, refusal.reason)
                    }
                }
            }
        } completion: { promise.succeed($0) }
        let immediate: Response
        switch admission {
        case .submitted:
            let messages = messages
            return promise.futureResult.map { answer in
                let outcomes = zip(messages, answer.entries).map { message, entry -> (messageID: String?, outcome: EventOutcome) in
                    switch message {
                    case .refused(let refusal):
                        return (refusal.messageID, .refused(code: refusal.code, message: refusal.message))
                    case .event(let event):
                        if let denied = event.deniedCategory {
                            return (event.messageID, .blocked("category_preferences:\(denied)"))
                        }
                        return (event.messageID, EventOutcome(entry))
                    }
                }
                return Response(response: IngestVerdict.response(outcomes), outcomes: outcomes, uid: uid)
            }
        case .withdrawn:
            immediate = Response(response: (refusal ?? IngestRefusal(400, "invalid_request", "the request was refused")).response,
                                 outcomes: [], uid: uid)
        case .stopping:
            immediate = Response(response: .refusal(503, "shutting_down", "the agent is stopping; retry later",
                                                    retryAfter: IngestVerdict.retryAfterBusy),
                                 outcomes: [], uid: uid, published: false, keepAlive: false)
        case .busy:
            immediate = Response(response: .refusal(503, "busy", "the agent has more waiting to be stored than it takes in at once; retry shortly",
                                                    retryAfter: IngestVerdict.retryAfterBusy),
                                 outcomes: [], uid: uid, published: false)
        case .denied(let reason):
            immediate = Response(response: .refusal(403, "access_denied", reason), outcomes: [], uid: uid)
        }
        // Never completed by the agent: completed here, so no promise is left pending.
        promise.fail(AgentError(code: .socket, message: "the request was not submitted"))
        return loop.makeSucceededFuture(immediate)
    }

    /// Gives back the body bytes this connection holds.
    private func releaseBody() {
        context.budget.release(reserved)
        reserved = 0
    }

    func channelInactive(context channelContext: ChannelHandlerContext) {
        releaseBody()
        channelContext.fireChannelInactive()
    }

    private func respond(_ response: IngestResponse, keepAlive: Bool, _ channelContext: ChannelHandlerContext) {
        releaseBody()
        deadline.timer?.cancel()
        deadline.timer = nil
        // Once the deadline answered 408 the connection is closing: nothing more is written.
        guard !deadline.responding else { return }
        context.gateway.metrics.request(status: response.status)
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json")
        headers.add(name: "Content-Length", value: "\(response.body.count)")
        if let retryAfter = response.retryAfter { headers.add(name: "Retry-After", value: "\(retryAfter)") }
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        let head = HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: response.status), headers: headers)
        channelContext.write(wrapOutboundOut(.head(head)), promise: nil)
        channelContext.write(wrapOutboundOut(.body(.byteBuffer(channelContext.channel.allocator.buffer(bytes: response.body)))),
                             promise: nil)
        let done = channelContext.eventLoop.makePromise(of: Void.self)
        channelContext.writeAndFlush(wrapOutboundOut(.end(nil)), promise: done)
        let channel = channelContext.channel
        if !keepAlive { done.futureResult.whenComplete { _ in channel.close(promise: nil) } }
    }

    func userInboundEventTriggered(context channelContext: ChannelHandlerContext, event: Any) {
        // Idle between requests (no request being received): close. A request being stored is
        // not idle time of the client's.
        if event is IdleStateHandler.IdleStateEvent, request == nil, !busy {
            channelContext.close(promise: nil)
            return
        }
        channelContext.fireUserInboundEventTriggered(event)
    }
}

/// `struct ucred` of `SO_PEERCRED` (pid, uid, gid; Glibc's module hides it behind
/// `_GNU_SOURCE`), laid out as the kernel writes it.
private struct PeerCred: Sendable {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
}
