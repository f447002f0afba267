import Foundation
import NIOCore
import NIOEmbedded
import NIOHTTP1
import Testing

@testable import FerryHTTPIngest

/// The real connection handler and NIO's HTTP/1 codec on an `EmbeddedChannel`: bytes in, bytes
/// out, the loop's virtual clock moved by the test (no sleeps, no sockets, no agent). The
/// responder is the test's: it holds each request's answer until the test gives it.
@Suite struct HTTPConnectionHandlerTests {
    /// Answers when the test says; records what was written.
    final class ScriptedResponder: HTTPRequestResponder {
        let loop: EmbeddedEventLoop
        var pending: [(request: HTTPConnectionStateMachine.Request, promise: EventLoopPromise<IngestResponse>)] = []
        var statuses: [Int] = []
        init(loop: EmbeddedEventLoop) { self.loop = loop }
        func respond(to request: HTTPConnectionStateMachine.Request) -> EventLoopFuture<IngestResponse> {
            let promise = loop.makePromise(of: IngestResponse.self)
            pending.append((request, promise))
            return promise.futureResult
        }
        func wrote(status: Int) { statuses.append(status) }
        /// Answers the oldest request held with `status` and a body naming it.
        func answer(_ status: Int = 200) {
            let (request, promise) = pending.removeFirst()
            promise.succeed(IngestResponse(status: status, body: Array(#"{"request":\#(request.number)}"#.utf8)))
        }
    }

    /// Records what goes out of the channel, in order: the bytes written and the close.
    final class OutboundRecorder: ChannelOutboundHandler {
        typealias OutboundIn = ByteBuffer
        var events: [String] = []
        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            events.append("write " + String(buffer: unwrapOutboundIn(data)))
            context.write(data, promise: promise)
        }
        func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
            events.append("close")
            context.close(mode: mode, promise: promise)
        }
    }

    /// A connection: channel, responder, budget, recorder.
    struct Connection {
        let channel: EmbeddedChannel
        let responder: ScriptedResponder
        let budget: BodyBudget
        let recorder: OutboundRecorder

        init(budget: Int = 1 << 20, maxBodyBytes: Int = 1000, maxDiscardedBytes: Int = 4000) throws {
            channel = EmbeddedChannel()
            responder = ScriptedResponder(loop: channel.embeddedEventLoop)
            let budget = BodyBudget(limit: budget)
            self.budget = budget
            recorder = OutboundRecorder()
            let configuration = HTTPConnectionStateMachine.Configuration(
                maxBodyBytes: maxBodyBytes, maxDiscardedBytes: maxDiscardedBytes,
                hostPolicy: .tcp(listenHost: "127.0.0.1", allowedHosts: [], allowedOrigins: []))
            let handler = HTTPConnectionHandler(configuration: configuration, responder: responder,
                                                reserve: { budget.reserve($0) }, release: { budget.release($0) })
            try channel.pipeline.syncOperations.addHandler(recorder)
            try HTTPConnectionHandler.configure(channel.pipeline.syncOperations, handler: handler)
            channel.localAddress = try SocketAddress(ipAddress: "127.0.0.1", port: 8088)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 40000)).wait()
        }

        func send(_ text: String) throws { try channel.writeInbound(ByteBuffer(string: text)) }

        /// Every byte written so far, as text.
        func output() throws -> String {
            var text = ""
            while let buffer = try channel.readOutbound(as: ByteBuffer.self) { text += String(buffer: buffer) }
            return text
        }
    }

    static func request(_ body: String = #"{"batch":[]}"#, path: String = "/v1/batch", host: String = "127.0.0.1:8088",
                        extra: String = "") -> String {
        "POST \(path) HTTP/1.1\r\nHost: \(host)\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\(extra)\r\n\(body)"
    }

    /// The status codes of the responses in `text`, in order.
    static func statuses(_ text: String) -> [Int] {
        text.components(separatedBy: "HTTP/1.1 ").dropFirst().compactMap { Int($0.prefix(3)) }
    }

    @Test("a slow client is answered 408 after the read deadline and the connection closes")
    func slowClient() throws {
        let connection = try Connection()
        try connection.send("POST /v1/batch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{\"ba")
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        #expect(try connection.output().isEmpty)
        #expect(connection.channel.isActive)
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        let output = try connection.output()
        #expect(Self.statuses(output) == [408])
        #expect(output.contains("request_timeout"))
        #expect(output.lowercased().contains("connection: close"))
        #expect(!connection.channel.isActive)
        #expect(connection.budget.held == 0)
        #expect(connection.responder.pending.isEmpty)
    }

    @Test("a slow head counts too: the deadline runs from the first byte")
    func slowHead() throws {
        let connection = try Connection()
        try connection.send("POST /v1/ba")
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(10))
        #expect(Self.statuses(try connection.output()) == [408])
        #expect(!connection.channel.isActive)
    }

    @Test("bodies past the listener's budget are answered 503 busy and the budget is given back")
    func bodyBudget() throws {
        let connection = try Connection(budget: 10)
        try connection.send(Self.request(#"{"batch":[{"type":"track"}]}"#))
        let output = try connection.output()
        #expect(Self.statuses(output) == [503])
        #expect(output.contains(#""code":"busy""#))
        #expect(output.contains("Retry-After: 1"))
        #expect(connection.responder.pending.isEmpty)
        #expect(connection.budget.held == 0)
    }

    @Test("keep-alive: two requests on one connection, then the idle timeout closes it")
    func keepAlive() throws {
        let connection = try Connection()
        for number in 0..<2 {
            try connection.send(Self.request())
            #expect(connection.responder.pending.count == 1)
            #expect(connection.budget.held == 12)
            connection.responder.answer()
            let output = try connection.output()
            #expect(Self.statuses(output) == [200])
            #expect(output.contains(#"{"request":\#(number)}"#))
            #expect(!output.lowercased().contains("connection: close"))
            #expect(connection.channel.isActive)
            #expect(connection.budget.held == 0)
        }
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(59))
        #expect(connection.channel.isActive)
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(!connection.channel.isActive)
    }

    @Test("pipelined requests are answered in the order they came")
    func pipelined() throws {
        let connection = try Connection()
        // Three requests in one read: stored, refused at its head, stored.
        try connection.send(Self.request() + Self.request("", path: "/v1/nope") + Self.request())
        #expect(connection.responder.pending.map(\.request.number) == [0])
        #expect(try connection.output().isEmpty)
        connection.responder.answer(200)
        #expect(connection.responder.pending.map(\.request.number) == [2])
        connection.responder.answer(201)
        let output = try connection.output()
        #expect(Self.statuses(output) == [200, 404, 201])
        #expect(output.range(of: #"{"request":0}"#)!.lowerBound < output.range(of: #"{"request":2}"#)!.lowerBound)
        #expect(connection.responder.statuses == [200, 404, 201])
        #expect(connection.channel.isActive)
    }

    @Test("oversize: a declared length past the limit is 413; a body thrown away past its bound is answered at once and closed")
    func oversize() throws {
        let declared = try Connection(maxBodyBytes: 10, maxDiscardedBytes: 100)
        try declared.send(Self.request(String(repeating: "x", count: 20)))
        #expect(Self.statuses(try declared.output()) == [413])
        #expect(!declared.channel.isActive)

        let endless = try Connection(maxBodyBytes: 10, maxDiscardedBytes: 100)
        try endless.send("POST /v1/batch HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        try endless.send("40\r\n" + String(repeating: "y", count: 64) + "\r\n")
        #expect(endless.channel.isActive)
        try endless.send("40\r\n" + String(repeating: "y", count: 64) + "\r\n")
        let output = try endless.output()
        #expect(Self.statuses(output) == [413])
        #expect(!endless.channel.isActive)
        #expect(endless.budget.held == 0)
    }

    @Test("DNS rebinding: another Host is 421, an Origin not allowed 403, and neither reaches the responder", arguments: [
        ("evil.example", "", 421, "host_not_allowed"),
        ("evil.example:8088", "Origin: http://evil.example\r\n", 421, "host_not_allowed"),
        ("127.0.0.1:8088", "Origin: http://evil.example\r\n", 403, "origin_not_allowed"),
    ])
    func rebinding(host: String, extra: String, status: Int, code: String) throws {
        let connection = try Connection()
        try connection.send(Self.request(host: host, extra: extra))
        let output = try connection.output()
        #expect(Self.statuses(output) == [status])
        #expect(output.contains(#""code":"\#(code)""#))
        #expect(connection.responder.pending.isEmpty)
    }

    @Test("SIGTERM with responses queued: each is written before the close")
    func quiesceWritesQueuedResponses() throws {
        let connection = try Connection()
        try connection.send(Self.request() + Self.request("", path: "/v1/nope") + Self.request())
        #expect(connection.responder.pending.count == 1)
        connection.channel.pipeline.fireUserInboundEventTriggered(HTTPQuiesce())
        // The request being stored is waited for: nothing written, the connection open.
        #expect(try connection.output().isEmpty)
        #expect(connection.channel.isActive)
        connection.responder.answer(200)
        let output = try connection.output()
        #expect(Self.statuses(output) == [200, 404, 503])
        #expect(output.contains(#""code":"shutting_down""#))
        #expect(!connection.channel.isActive)
        // Every response went out before the close.
        let events = connection.recorder.events
        #expect(events.last == "close")
        #expect(Self.statuses(events.dropLast().joined()) == [200, 404, 503])
        #expect(connection.budget.held == 0)
    }

    @Test("bytes that are not HTTP are answered 400 after the answers queued, and the connection closes")
    func notHTTP() throws {
        let connection = try Connection()
        try connection.send(Self.request() + "NOT HTTP AT ALL\r\n\r\n")
        #expect(connection.channel.isActive)
        connection.responder.answer(200)
        let output = try connection.output()
        #expect(Self.statuses(output) == [200, 400])
        #expect(output.contains(#""code":"invalid_http""#))
        #expect(!connection.channel.isActive)
    }

    @Test("SIGTERM on an idle connection closes it at once")
    func quiesceIdle() throws {
        let connection = try Connection()
        connection.channel.pipeline.fireUserInboundEventTriggered(HTTPQuiesce())
        #expect(!connection.channel.isActive)
    }
}
