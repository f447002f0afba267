import NIOCore
import NIOHTTP1

/// Who decides the answer to a request a connection has received whole: the agent (through
/// the ``IngestGateway``: ``GatewayResponder``) or a test. One per connection, called on its
/// event loop.
package protocol HTTPRequestResponder: AnyObject {
    /// The answer to `request`, a future of the connection's event loop.
    func respond(to request: HTTPConnectionStateMachine.Request) -> EventLoopFuture<IngestResponse>
    /// A response with `status` was written (for metrics).
    func wrote(status: Int)
}

/// Asks a connection's handler to quiesce: answer what it has, then close (the server stops).
package struct HTTPQuiesce: Sendable {
    /// The event.
    package init() {}
}

/// Told by ``HTTPBytesObserver`` that request bytes arrived (before they are decoded).
struct HTTPBytesArrived: Sendable {}

/// First in a connection's pipeline, before the HTTP decoder: tells the connection's handler
/// that bytes arrived, so a request's deadline runs from its first byte, head included.
final class HTTPBytesObserver: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.fireUserInboundEventTriggered(HTTPBytesArrived())
        context.fireChannelRead(data)
    }
}

/// Performs the actions of a connection's ``HTTPConnectionStateMachine``: feeds it the decoded
/// request parts, the clock of the event loop, the responder's answers and the timer, and
/// writes, closes, arms the timer, holds reads and gives back budget as it says. It decides
/// nothing itself.
package final class HTTPConnectionHandler: ChannelDuplexHandler {
    package typealias InboundIn = HTTPServerRequestPart
    package typealias OutboundIn = HTTPServerResponsePart
    package typealias OutboundOut = HTTPServerResponsePart

    private var machine: HTTPConnectionStateMachine
    private let responder: any HTTPRequestResponder
    private let reserve: (Int) -> Bool
    private let release: (Int) -> Void
    private var timer: Scheduled<Void>?
    /// A read held while the machine paused reading.
    private var heldRead = false
    /// The last write, to close after it.
    private var lastWrite: EventLoopFuture<Void>?

    /// A handler deciding with `configuration`, answering through `responder`; `reserve` and
    /// `release` take and give back bytes of the listener's body budget.
    package init(configuration: HTTPConnectionStateMachine.Configuration, responder: any HTTPRequestResponder,
                 reserve: @escaping (Int) -> Bool, release: @escaping (Int) -> Void) {
        // The clock is the event loop's, read when the channel becomes active.
        machine = HTTPConnectionStateMachine(configuration: configuration, now: .uptimeNanoseconds(0))
        self.responder = responder
        self.reserve = reserve
        self.release = release
    }

    /// Adds the handlers of one HTTP API connection to `pipeline`: the bytes observer, NIO's
    /// HTTP/1 codec (no pipelining assistance and no error handler: the state machine orders the
    /// answers and answers what cannot be parsed) and this handler.
    package static func configure(_ pipeline: ChannelPipeline.SynchronousOperations, handler: HTTPConnectionHandler) throws {
        try pipeline.addHandler(HTTPBytesObserver())
        try pipeline.configureHTTPServerPipeline(withPipeliningAssistance: false, withErrorHandling: false)
        try pipeline.addHandler(handler)
    }

    package func handlerAdded(context: ChannelHandlerContext) {
        machine = HTTPConnectionStateMachine(configuration: machine.configuration, now: context.eventLoop.now)
        if context.channel.isActive { perform(machine.activated(now: context.eventLoop.now), context) }
    }

    package func channelActive(context: ChannelHandlerContext) {
        perform(machine.activated(now: context.eventLoop.now), context)
        context.fireChannelActive()
    }

    package func channelInactive(context: ChannelHandlerContext) {
        perform(machine.closed(), context)
        context.fireChannelInactive()
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let now = context.eventLoop.now
        switch unwrapInboundIn(data) {
        case .head(let head):
            let headers = head.headers
            let parsed = HTTPConnectionStateMachine.Head(
                method: head.method.rawValue, uri: head.uri, keepAlive: head.isKeepAlive,
                contentType: headers.first(name: "Content-Type"), contentEncoding: headers.first(name: "Content-Encoding"),
                contentLength: headers.first(name: "Content-Length").flatMap { Int($0) }, host: headers.first(name: "Host"),
                origin: headers.first(name: "Origin"), authorization: headers.first(name: "Authorization"))
            perform(machine.head(parsed, localPort: context.channel.localAddress?.port, now: now), context)
        case .body(let part):
            perform(machine.body(part, now: now, reserve: reserve), context)
        case .end:
            perform(machine.end(now: now), context)
        }
    }

    package func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is HTTPParserError || error is ByteToMessageDecoderError {
            perform(machine.protocolError(now: context.eventLoop.now), context)
        } else {
            // A socket error: the connection is gone.
            context.close(promise: nil)
        }
    }

    package func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case is HTTPBytesArrived:
            perform(machine.bytesArrived(now: context.eventLoop.now), context)
        case is HTTPQuiesce:
            perform(machine.quiesce(now: context.eventLoop.now), context)
        default:
            context.fireUserInboundEventTriggered(event)
        }
    }

    package func read(context: ChannelHandlerContext) {
        if machine.shouldRead {
            context.read()
        } else {
            heldRead = true
        }
    }

    private func perform(_ actions: [HTTPConnectionStateMachine.Action], _ context: ChannelHandlerContext) {
        // A request is handed over last: its answer may come at once (a completed future) and
        // its actions must follow these, not interleave with them.
        for action in actions where !action.isProcess { perform(action, context) }
        for action in actions where action.isProcess { perform(action, context) }
    }

    private func perform(_ action: HTTPConnectionStateMachine.Action, _ context: ChannelHandlerContext) {
        switch action {
        case .process(let request):
            let number = request.number
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            responder.respond(to: request).whenComplete { result in
                let (handler, context) = loopBound.value
                let response: IngestResponse
                switch result {
                case .success(let answer): response = answer
                case .failure:
                    response = .refusal(503, "unavailable", "the agent could not take the request; retry later",
                                        retryAfter: IngestVerdict.retryAfterBusy)
                }
                handler.perform(handler.machine.responseReady(response, number: number, now: context.eventLoop.now), context)
            }
        case .write(let response, let keepAlive):
            write(response, keepAlive: keepAlive, context)
        case .close:
            if let lastWrite {
                let channel = context.channel
                lastWrite.whenComplete { _ in channel.close(promise: nil) }
            } else {
                context.close(promise: nil)
            }
        case .scheduleTimer(let deadline):
            timer?.cancel()
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            timer = context.eventLoop.scheduleTask(deadline: deadline) {
                let (handler, context) = loopBound.value
                handler.timer = nil
                handler.perform(handler.machine.timerFired(now: context.eventLoop.now), context)
            }
        case .cancelTimer:
            timer?.cancel()
            timer = nil
        case .release(let bytes):
            release(bytes)
        case .resumeReading:
            if heldRead {
                heldRead = false
                context.read()
            }
        }
    }

    private func write(_ response: IngestResponse, keepAlive: Bool, _ context: ChannelHandlerContext) {
        responder.wrote(status: response.status)
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json")
        headers.add(name: "Content-Length", value: "\(response.body.count)")
        if let retryAfter = response.retryAfter { headers.add(name: "Retry-After", value: "\(retryAfter)") }
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        let head = HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: response.status), headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: response.body)))), promise: nil)
        let done = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: done)
        lastWrite = done.futureResult
        if !keepAlive {
            let channel = context.channel
            done.futureResult.whenComplete { _ in channel.close(promise: nil) }
        }
    }
}

extension HTTPConnectionStateMachine.Action {
    /// Whether the action hands a request to the responder.
    var isProcess: Bool { if case .process = self { true } else { false } }
}
