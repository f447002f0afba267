#if canImport(Glibc)
import Glibc
#endif
import FerryAgent
import FerryPeer
import FerryProtocol
import Logging
import NIOCore
import NIOPosix

/// What every connection of a listener shares.
struct HandlerContext: Sendable {
    let gateway: IngestGateway
    let pool: NIOThreadPool
    let writeKeys: [String: String]
    let tcp: Bool
    let logger: Logger
}

/// The agent's answer to a connection's requests: who sent them (the kernel's word, resolved
/// once per connection on the thread pool), the body parsed on the thread pool, the events
/// submitted through the ``IngestGateway``, and the answer once the commit stage has settled
/// every one. One per connection, used on its event loop.
final class GatewayResponder: HTTPRequestResponder {
    private let context: HandlerContext
    private let loop: any EventLoop
    /// The sender as the kernel told it.
    private let identity: EventLoopFuture<Identity>

    /// Who is at the other end, and its origin metadata.
    struct Identity: Sendable {
        var credentials: PeerCredentials?
        var origin: [UInt8]
    }

    /// The responder of `channel`; starts resolving who is at the other end.
    init(channel: any Channel, context: HandlerContext) {
        self.context = context
        loop = channel.eventLoop
        identity = Self.identify(channel, tcp: context.tcp, pool: context.pool)
    }

    func wrote(status: Int) { context.gateway.metrics?.request(status: status) }

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

    func respond(to request: HTTPConnectionStateMachine.Request) -> EventLoopFuture<IngestResponse> {
        let gateway = context.gateway
        let loop = self.loop
        let pool = context.pool, writeKeys = context.writeKeys, logger = context.logger
        let body = Array(request.body.readableBytesView)
        let admitted = request.admitted
        let authorization = request.head.authorization
        // When the head came, on the agent's monotonic clock (the ack latency runs from it).
        let age = loop.now.uptimeNanoseconds &- min(request.receivedAt.uptimeNanoseconds, loop.now.uptimeNanoseconds)
        let receivedAt = MonotonicClock.nanoseconds() &- age
        return identity.flatMap { identity -> EventLoopFuture<Outcome> in
            // One crossing into the agent: admitted (stopping, back-pressure, then the access
            // policy: the kernel's word, checked before the body is looked at), then parsed here,
            // in the pool, and submitted; the answer comes back once.
            pool.runIfActive(eventLoop: loop) {
                Self.submit(body: body, admitted: admitted, authorization: authorization, writeKeys: writeKeys,
                            identity: identity, gateway: gateway, receivedAt: receivedAt, loop: loop)
            }.flatMap { $0 }
        }.map { outcome in
            for label in IngestPathMetrics.outcomes {
                gateway.metrics?.events(label, outcome.outcomes.count { $0.outcome.label == label })
            }
            if outcome.published && outcome.response.status >= 400 {
                gateway.publishRefusal(status: outcome.response.status, code: outcome.response.code ?? "",
                                       message: String(decoding: outcome.response.body, as: UTF8.self), uid: outcome.uid)
            }
            return outcome.response
        }.flatMapErrorThrowing { error -> IngestResponse in
            logger.error("HTTP API request failed", metadata: ["error": "\(error)"])
            throw error
        }
    }

    private struct Outcome: Sendable {
        var response: IngestResponse
        var outcomes: [(messageID: String?, outcome: EventOutcome)]
        var uid: UInt32?
        /// Whether a refusal is published on the bus (not for "stopping" and "busy").
        var published = true
    }

    /// Submits a request's events (in the pool: the body is parsed here) and answers once the
    /// commit stage has answered every one.
    private static func submit(
        body: [UInt8], admitted: IngestVerdict.Admitted, authorization: String?, writeKeys: [String: String],
        identity: Identity, gateway: IngestGateway,
        receivedAt: UInt64, loop: any EventLoop
    ) -> EventLoopFuture<Outcome> {
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
        let immediate: Outcome
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
                return Outcome(response: IngestVerdict.response(outcomes), outcomes: outcomes, uid: uid)
            }
        case .withdrawn:
            immediate = Outcome(response: (refusal ?? IngestRefusal(400, "invalid_request", "the request was refused")).response,
                                outcomes: [], uid: uid)
        case .stopping:
            immediate = Outcome(response: .refusal(503, "shutting_down", "the agent is stopping; retry later",
                                                   retryAfter: IngestVerdict.retryAfterBusy),
                                outcomes: [], uid: uid, published: false)
        case .busy:
            immediate = Outcome(response: .refusal(503, "busy", "the agent has more waiting to be stored than it takes in at once; retry shortly",
                                                   retryAfter: IngestVerdict.retryAfterBusy),
                                outcomes: [], uid: uid, published: false)
        case .denied(let reason):
            immediate = Outcome(response: .refusal(403, "access_denied", reason), outcomes: [], uid: uid)
        }
        // Never completed by the agent: completed here, so no promise is left pending.
        promise.fail(AgentError(code: .socket, message: "the request was not submitted"))
        return loop.makeSucceededFuture(immediate)
    }
}

/// `struct ucred` of `SO_PEERCRED` (pid, uid, gid; Glibc's module hides it behind
/// `_GNU_SOURCE`), laid out as the kernel writes it.
private struct PeerCred: Sendable {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
}
