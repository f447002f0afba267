#if canImport(Glibc)
import Glibc
#endif
import FerryAgent
import FerryProtocol
import Logging
import NIOCore
import NIOPosix
import ZeroMQ

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

    func wrote(status: Int) { context.gateway.metrics.request(status: status) }

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
        if gateway.isStopping {
            return loop.makeSucceededFuture(.refusal(503, "shutting_down", "the agent is stopping; retry later",
                                                     retryAfter: IngestVerdict.retryAfterBusy))
        }
        if gateway.isBusy {
            return loop.makeSucceededFuture(.refusal(503, "busy", "the agent has more waiting to be stored than it takes in at once; retry shortly",
                                                     retryAfter: IngestVerdict.retryAfterBusy))
        }
        let loop = self.loop
        let pool = context.pool, writeKeys = context.writeKeys, logger = context.logger
        let body = Array(request.body.readableBytesView)
        let admitted = request.admitted
        let authorization = request.head.authorization
        // When the head came, on the agent's monotonic clock (the ack latency runs from it).
        let age = loop.now.uptimeNanoseconds &- min(request.receivedAt.uptimeNanoseconds, loop.now.uptimeNanoseconds)
        let receivedAt = MonotonicClock.nanoseconds() &- age
        return identity.flatMap { identity -> EventLoopFuture<Outcome> in
            // Who may send is the kernel's word, checked before the body is looked at.
            guard gateway.allows(identity.credentials) else {
                return loop.makeSucceededFuture(Outcome(
                    response: .refusal(403, "access_denied", gateway.refusal(identity.credentials)), outcomes: [],
                    uid: identity.credentials?.uid))
            }
            let peer = SegmentRequest.Peer(uid: identity.credentials?.uid,
                                           pid: UInt32(bitPattern: identity.credentials?.pid ?? 0))
            let generator = EventIDGenerator()
            return pool.runIfActive(eventLoop: loop) {
                SegmentRequest.messages(body: body, admitted: admitted, authorization: authorization, peer: peer,
                                        writeKeys: writeKeys, categories: gateway.categories,
                                        typeCategories: gateway.typeCategories, now: WallClock.unixMilliseconds(),
                                        newID: { generator.next() })
            }.flatMap { prepared -> EventLoopFuture<Outcome> in
                switch prepared {
                case .failure(let refusal):
                    return loop.makeSucceededFuture(Outcome(response: refusal.response, outcomes: [], uid: peer.uid))
                case .success(let messages):
                    return Self.submit(messages, identity: identity, gateway: gateway, receivedAt: receivedAt, loop: loop)
                }
            }
        }.map { outcome in
            for label in IngestPathMetrics.outcomes {
                gateway.metrics.events(label, outcome.outcomes.count { $0.outcome.label == label })
            }
            if outcome.response.status >= 400 {
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
    }

    /// Submits the request's events and answers once the commit stage has answered every one.
    private static func submit(
        _ messages: [SegmentRequest.Message], identity: Identity, gateway: IngestGateway, receivedAt: UInt64,
        loop: any EventLoop
    ) -> EventLoopFuture<Outcome> {
        let frames: [IngestGateway.Frame] = messages.map { message in
            switch message {
            case .event(let event):
                if event.deniedCategory != nil { return .blocked(event.id, .consentDenied) }
                return .event(event.frame)
            case .refused(let refusal): return .refused(refusal.id, refusal.reason)
            }
        }
        let promise = loop.makePromise(of: IngestAnswer.self)
        guard gateway.submit(frames, uid: identity.credentials?.uid, origin: identity.origin, receivedAt: receivedAt,
                             completion: { promise.succeed($0) }) else {
            promise.fail(AgentError(code: .socket, message: "the agent is stopping"))
            return loop.makeSucceededFuture(Outcome(
                response: .refusal(503, "shutting_down", "the agent is stopping; retry later", retryAfter: IngestVerdict.retryAfterBusy),
                outcomes: [], uid: identity.credentials?.uid))
        }
        return promise.futureResult.map { answer in
            gateway.publish(answer)
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
            return Outcome(response: IngestVerdict.response(outcomes), outcomes: outcomes, uid: identity.credentials?.uid)
        }
    }
}

/// `struct ucred` of `SO_PEERCRED` (pid, uid, gid; Glibc's module hides it behind
/// `_GNU_SOURCE`), laid out as the kernel writes it.
private struct PeerCred: Sendable {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
}
