import FerryTestKit
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// A real HTTP/1.1 server in the test process, on `127.0.0.1` and an ephemeral port, for testing
/// the HTTP sink against real sockets.
///
/// Every request is recorded (``requests``) as soon as it has been fully read, before it is
/// answered, so a test can see a request that is still waiting for its answer. Answers come from
/// the queue filled by ``enqueue(_:)`` first, then from the handler.
///
/// ```swift
/// let server = try await HTTPTestServer.start { request in
///     request.batchEventIDs.count > 10 ? .status(413) : .ok
/// }
/// defer { Task { await server.shutdown() } }
/// server.enqueue(.status(503, headers: ["Retry-After": "1"]))
/// ```
public final class HTTPTestServer: Sendable {
    /// One request as the server received it.
    public struct Request: Sendable, CustomStringConvertible {
        /// Its position among all requests (0-based).
        public var index: Int
        /// `POST`, `GET`, …
        public var method: String
        /// The request target (`/v1/batch?x=1`).
        public var path: String
        /// The header fields in arrival order.
        public var headers: [(name: String, value: String)]
        /// The body as sent on the wire.
        public var rawBody: [UInt8]
        /// The body, gunzipped when `Content-Encoding: gzip` (``rawBody`` otherwise).
        public var body: [UInt8]
        /// Why a gzip body could not be decompressed, if it could not.
        public var decodingError: String?

        /// The first value of header `name` (case-insensitive).
        public func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }

        /// ``body`` parsed as a JSON object.
        public var json: [String: Any]? {
            try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]
        }

        /// The event objects of an HTTP sink body: `events` (envelope) or `batch` (segment).
        public var batchEvents: [[String: Any]] {
            (json?["events"] as? [[String: Any]]) ?? (json?["batch"] as? [[String: Any]]) ?? []
        }

        /// The event ids of an HTTP sink body (`id` in an envelope, `messageId` in a segment batch).
        public var batchEventIDs: [String] {
            batchEvents.compactMap { ($0["id"] ?? $0["messageId"]) as? String }
        }

        public var description: String {
            "#\(index) \(method) \(path) \(headers.map { "\($0.name): \($0.value)" }) \(body.count) bytes"
        }
    }

    /// What to answer.
    public struct Response: Sendable {
        /// The status code.
        public var status: Int
        /// Header fields (`Content-Length` is added).
        public var headers: [(name: String, value: String)]
        /// The body.
        public var body: [UInt8]
        /// Wait this long before answering.
        public var delay: Duration?
        /// Never answer (the connection stays open until the client or ``shutdown()`` closes it).
        public var neverAnswer: Bool

        /// A response.
        public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = [],
                    delay: Duration? = nil, neverAnswer: Bool = false) {
            self.status = status
            self.headers = headers
            self.body = body
            self.delay = delay
            self.neverAnswer = neverAnswer
        }

        /// `status` with `headers` and a text body.
        public static func status(_ status: Int, headers: [String: String] = [:], body: String = "", delay: Duration? = nil) -> Response {
            Response(status: status, headers: headers.sorted { $0.key < $1.key }.map { (name: $0.key, value: $0.value) },
                     body: Array(body.utf8), delay: delay)
        }

        /// `200 OK` with `{"ok":true}`.
        public static let ok = Response.status(200, headers: ["Content-Type": "application/json"], body: #"{"ok":true}"#)

        /// No answer at all.
        public static let never = Response(status: 0, neverAnswer: true)
    }

    /// Decides the answer to a request that the queue does not cover.
    public typealias Handler = @Sendable (Request) async -> Response

    /// The port the server listens on.
    public let port: Int
    private let handler: Handler
    private let state = Mutex<State>(State())
    private let serverChannel: any Channel
    private let acceptTask = Mutex<Task<Void, Never>?>(nil)

    private struct State {
        var requests: [Request] = []
        var queue: [Response] = []
        var answered = 0
    }

    /// `http://127.0.0.1:<port>` followed by `path`.
    public func url(_ path: String = "/v1/batch") -> String { "http://127.0.0.1:\(port)\(path)" }

    /// Every request received so far, in arrival order.
    public var requests: [Request] { state.withLock { $0.requests } }

    /// How many requests have been answered (the answer fully written).
    public var answeredCount: Int { state.withLock { $0.answered } }

    /// Answers the next requests with `responses`, in order, before the handler is asked again.
    public func enqueue(_ responses: Response...) {
        state.withLock { $0.queue += responses }
    }

    /// Starts a server answering with `handler` (default: ``Response/ok``), on `port` (`0`: an
    /// ephemeral one; a port given again after ``shutdown()`` brings a server back at the same URL,
    /// as after an upstream's outage).
    public static func start(port: Int = 0, handler: @escaping Handler = { _ in .ok }) async throws -> HTTPTestServer {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    return try NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(wrappingChannelSynchronously: channel)
                }
            }
        guard let port = channel.channel.localAddress?.port else {
            try? await channel.channel.close()
            throw FerryTestKitError("the HTTP test server has no port")
        }
        let server = HTTPTestServer(port: port, handler: handler, serverChannel: channel.channel)
        let task = Task<Void, Never> {
            _ = try? await withThrowingDiscardingTaskGroup { group in
                try await channel.executeThenClose { inbound in
                    for try await connection in inbound {
                        group.addTask { await server.serve(connection) }
                    }
                }
            }
        }
        server.acceptTask.withLock { $0 = task }
        return server
    }

    private init(port: Int, handler: @escaping Handler, serverChannel: any Channel) {
        self.port = port
        self.handler = handler
        self.serverChannel = serverChannel
    }

    /// Stops listening, closes every connection (abandoning answers not yet sent) and waits.
    public func shutdown() async {
        try? await serverChannel.close()
        guard let task = acceptTask.withLock({ $0 }) else { return }
        task.cancel()
        await task.value
    }

    private func serve(_ connection: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>) async {
        try? await connection.executeThenClose { inbound, outbound in
            var head: HTTPRequestHead?
            var body: [UInt8] = []
            for try await part in inbound {
                switch part {
                case .head(let requestHead):
                    head = requestHead
                    body = []
                case .body(let buffer):
                    body += buffer.readableBytesView
                case .end:
                    guard let requestHead = head else { continue }
                    let response = await answer(record(requestHead, body))
                    if response.neverAnswer {
                        // Hold the connection until shutdown (or the client hangs up: the
                        // sleep ends with the task's cancellation either way).
                        try await Task.sleep(for: .seconds(3600))
                        return
                    }
                    if let delay = response.delay { try await Task.sleep(for: delay) }
                    var headers = HTTPHeaders(response.headers.map { ($0.name, $0.value) })
                    headers.replaceOrAdd(name: "Content-Length", value: String(response.body.count))
                    try await outbound.write(.head(HTTPResponseHead(
                        version: .http1_1, status: HTTPResponseStatus(statusCode: response.status), headers: headers)))
                    if !response.body.isEmpty { try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: response.body)))) }
                    try await outbound.write(.end(nil))
                    state.withLock { $0.answered += 1 }
                    if !requestHead.isKeepAlive { return }
                }
            }
        }
    }

    private func record(_ head: HTTPRequestHead, _ rawBody: [UInt8]) -> Request {
        let headers = head.headers.map { (name: $0.name, value: $0.value) }
        var request = Request(index: 0, method: head.method.rawValue, path: head.uri, headers: headers,
                              rawBody: rawBody, body: rawBody)
        if request.header("Content-Encoding")?.lowercased() == "gzip" {
            do {
                request.body = try Gunzip.decompress(rawBody)
            } catch {
                request.body = []
                request.decodingError = "\(error)"
            }
        }
        return state.withLock { state in
            request.index = state.requests.count
            state.requests.append(request)
            return request
        }
    }

    private func answer(_ request: Request) async -> Response {
        if let queued = state.withLock({ $0.queue.isEmpty ? nil : $0.queue.removeFirst() }) { return queued }
        return await handler(request)
    }
}
