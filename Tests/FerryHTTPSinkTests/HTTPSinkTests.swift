@testable import FerryFileSink
import Foundation
@testable import FerryAgent
@testable import FerryStorage
@testable import FerryHTTPSink
import FerryIntegrationKit
import FerryProtocol
import FerryTestKit
import Logging
import Synchronization
import Testing

/// The HTTP sink against a real HTTP/1.1 server in the test process (FerryTestKit's
/// ``HTTPTestServer``).
@Suite("HTTP sink")
struct HTTPSinkTests {
    static let consent = ["ad_storage": "granted", "analytics_storage": "denied"]

    /// `count` stored track events named `e-<i>` (with `user_id` on even ones).
    static func batch(_ count: Int, consent: [String: String] = consent, padding: Int = 0) -> DeliveryBatch {
        let events = (1...count).map { i -> WireEvent in
            var event = Events.make(UInt64(i), name: "e-\(i)", padding: padding)
            if i % 2 == 0 { event.userID = "user-\(i)" }
            return event
        }
        return DeliveryBatch(events: storedEvents(events), consent: consent)
    }

    static func ids(_ batch: DeliveryBatch) -> [String] { batch.events.map(\.decodedID.description) }

    /// Starts a sink posting to `server`, runs `body`, shuts the sink down.
    static func withSink<T>(
        _ server: HTTPTestServer, configure: (inout HTTPSinkConfiguration) -> Void = { _ in },
        logger: Logger = quietLogger, environment: [String: String] = ProcessInfo.processInfo.environment,
        _ body: (HTTPSink) async throws -> T
    ) async throws -> T {
        var configuration = HTTPSinkConfiguration(url: server.url(), requestTimeoutMilliseconds: 10_000)
        configure(&configuration)
        try configuration.validate()
        let sink = HTTPSink(configuration: configuration, logger: logger, environment: environment)
        do {
            _ = try await sink.recover(checkpoint: nil)
            let result = try await body(sink)
            try await sink.shutdown()
            return result
        } catch {
            try? await sink.shutdown()
            throw error
        }
    }

    /// The ``SinkError`` `body` throws (failing the test if it throws something else or nothing).
    static func sinkError(_ body: () async throws -> Void) async -> SinkError? {
        do {
            try await body()
            Issue.record("expected a SinkError, but the delivery succeeded")
        } catch let error as SinkError {
            return error
        } catch {
            Issue.record("expected a SinkError, got \(error)")
        }
        return nil
    }

    static func withServer<T>(
        _ handler: @escaping HTTPTestServer.Handler = { _ in .ok }, _ body: (HTTPTestServer) async throws -> T
    ) async throws -> T {
        let server = try await HTTPTestServer.start(handler: handler)
        do {
            let result = try await body(server)
            await server.shutdown()
            return result
        } catch {
            await server.shutdown()
            throw error
        }
    }

    // MARK: Acknowledgement and body shapes

    @Test("2xx acknowledges; the envelope body has the batch id, sent_at, the consent stamp and every event")
    func envelope() async throws {
        try await Self.withServer { server in
            let batch = Self.batch(3)
            let before = WallClock.unixMilliseconds()
            let checkpoint = try await Self.withSink(server) { try await $0.deliver(batch) }
            #expect(checkpoint == nil)
            let requests = server.requests
            try #require(requests.count == 1)
            let request = requests[0]
            #expect(request.method == "POST")
            #expect(request.path == "/v1/batch")
            #expect(request.header("Content-Type") == "application/json")
            #expect(request.header("Idempotency-Key") == batch.idempotencyKey)
            #expect(request.header("Idempotency-Key") == "\(Self.ids(batch)[0])-3")
            #expect(request.header("Ferry-Batch-Size") == "3")
            #expect(request.header("User-Agent")?.hasPrefix("ferryd/") == true)
            #expect(request.header("Content-Encoding") == nil)
            #expect(request.header("Authorization") == nil)

            let json = try #require(request.json)
            #expect(Set(json.keys) == ["version", "batch_id", "sent_at", "consent", "events"])
            #expect(json["version"] as? Int == 2)
            #expect(json["batch_id"] as? String == batch.idempotencyKey)
            let sentAt = try #require((json["sent_at"] as? NSNumber)?.uint64Value)
            #expect(sentAt >= before && sentAt <= WallClock.unixMilliseconds())
            #expect(json["consent"] as? [String: String] == Self.consent)
            let events = try #require(json["events"] as? [[String: Any]])
            #expect(events.map { $0["id"] as? String } == Self.ids(batch))
            for (index, event) in events.enumerated() {
                let i = index + 1
                let expectedKeys: Set<String> = ["id", "type", "name", "source", "pid", "seq", "timestamp", "accepted_at", "properties", "origin"]
                #expect(Set(event.keys) == (i % 2 == 0 ? expectedKeys.union(["user_id"]) : expectedKeys))
                #expect(event["type"] as? String == "track")
                #expect(event["name"] as? String == "e-\(i)")
                #expect(event["source"] as? String == "agent-tests")
                #expect((event["seq"] as? NSNumber)?.intValue == i)
                #expect((event["pid"] as? NSNumber)?.intValue == 4242)
                #expect((event["accepted_at"] as? NSNumber)?.intValue == 1_700_000_000_000)
                #expect(((event["properties"] as? [String: Any])?["i"] as? NSNumber)?.intValue == i)
                if i % 2 == 0 { #expect(event["user_id"] as? String == "user-\(i)") }
            }
            // The same event objects as the file sink's lines (without `line_format`, which only
            // file lines carry): one serialiser.
            var lines: [UInt8] = []
            for event in batch.events { FileSink.appendLine(for: event, lineFormat: 1, to: &lines) }
            let expectedBody = #"{"version":2,"batch_id":"\#(batch.idempotencyKey)","sent_at":\#(sentAt),"consent":{"ad_storage":"granted","analytics_storage":"denied"},"events":["#
                + String(decoding: lines, as: UTF8.self).split(separator: "\n").joined(separator: ",") + "]}"
            #expect(String(decoding: request.body, as: UTF8.self) == expectedBody)
        }
    }

    @Test("the segment body: batch of Segment-style events with messageId, ISO-8601 timestamps, sentAt and context.consent")
    func segment() async throws {
        try await Self.withServer { server in
            let ids = EventIDGenerator()
            let events = [
                WireEvent(id: ids.next(), timestamp: 1_714_564_799_123, sequence: 1, pid: 7, type: .track, category: 2,
                          source: "web", name: "Signed Up", userID: "u1", properties: Array(#"{"plan":"pro"}"#.utf8)),
                WireEvent(id: ids.next(), timestamp: 1_714_564_800_000, sequence: 2, pid: 7, type: .identify,
                          source: "web", name: "", userID: "u1", properties: Array(#"{"email":"a@b.c"}"#.utf8)),
                WireEvent(id: ids.next(), timestamp: 951_782_400_000, sequence: 3, pid: 7, type: .page,
                          source: "web", name: "Pricing", userID: "u2"),
            ]
            let batch = DeliveryBatch(events: storedEvents(events), consent: Self.consent)
            _ = try await Self.withSink(server, configure: { $0.format = .segment }) { try await $0.deliver(batch) }
            let request = try #require(server.requests.first)
            #expect(request.header("Idempotency-Key") == batch.idempotencyKey)
            let json = try #require(request.json)
            #expect(Set(json.keys) == ["batch", "sentAt", "context"])
            let sentAt = try #require(json["sentAt"] as? String)
            #expect(sentAt.range(of: #"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"#, options: .regularExpression) != nil, "\(sentAt)")
            #expect((json["context"] as? [String: Any])?["consent"] as? [String: String] == Self.consent)
            let sent = try #require(json["batch"] as? [[String: Any]])
            try #require(sent.count == 3)
            #expect(sent.map { $0["messageId"] as? String } == events.map { $0.id.description })

            #expect(Set(sent[0].keys) == ["messageId", "type", "event", "userId", "timestamp", "properties", "context"])
            #expect(sent[0]["type"] as? String == "track")
            #expect(sent[0]["event"] as? String == "Signed Up")
            #expect(sent[0]["userId"] as? String == "u1")
            #expect(sent[0]["timestamp"] as? String == "2024-05-01T11:59:59.123Z")
            #expect((sent[0]["properties"] as? [String: Any])?["plan"] as? String == "pro")
            let ferry = try #require((sent[0]["context"] as? [String: Any])?["ferry"] as? [String: Any])
            #expect(ferry["source"] as? String == "web")
            // A third party gets no process details unless the sink's `disclose` opts in.
            #expect(ferry["seq"] == nil && ferry["pid"] == nil && ferry["origin"] == nil, "\(ferry)")
            #expect((ferry["category"] as? NSNumber)?.intValue == 2)
            #expect((ferry["accepted_at"] as? NSNumber)?.intValue == 1_700_000_000_000)

            #expect(sent[1]["type"] as? String == "identify")
            #expect((sent[1]["traits"] as? [String: Any])?["email"] as? String == "a@b.c")
            #expect(sent[1]["properties"] == nil)
            #expect(sent[1]["timestamp"] as? String == "2024-05-01T12:00:00.000Z")

            #expect(sent[2]["type"] as? String == "page")
            #expect(sent[2]["name"] as? String == "Pricing")
            #expect(sent[2]["userId"] as? String == "u2")
            #expect(sent[2]["timestamp"] as? String == "2000-02-29T00:00:00.000Z")
            #expect((sent[2]["properties"] as? [String: Any])?.isEmpty == true)
        }
    }

    @Test("gzip on: Content-Encoding gzip and the body decompresses to what gzip off sends", arguments: [false, true])
    func gzip(enabled: Bool) async throws {
        try await Self.withServer { server in
            let batch = Self.batch(50, padding: 200)
            _ = try await Self.withSink(server, configure: { $0.gzip = enabled }) { try await $0.deliver(batch) }
            let request = try #require(server.requests.first)
            #expect(request.decodingError == nil)
            let expected = try #require(request.json)  // the decompressed body
            #expect((expected["events"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == Self.ids(batch))
            if enabled {
                #expect(request.header("Content-Encoding") == "gzip")
                #expect(request.rawBody != request.body)
                #expect(request.rawBody.count * 5 < request.body.count, "padding compresses well: \(request.rawBody.count) vs \(request.body.count)")
                #expect(Array(request.rawBody.prefix(2)) == [0x1F, 0x8B], "a gzip member")
                #expect(try Gunzip.decompress(request.rawBody) == request.body)
                let sentAt = (expected["sent_at"] as? NSNumber)?.uint64Value ?? 0
                #expect(request.body == HTTPBatchBody.envelope(batch, sentAt: sentAt), "same bytes as an uncompressed body")
            } else {
                #expect(request.header("Content-Encoding") == nil)
                #expect(request.rawBody == request.body)
            }
        }
    }

    @Test("gzip round trip, including empty input and several members; damaged data is refused")
    func gzipRoundTrip() throws {
        for input in [[UInt8](), Array("hello".utf8), (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) }] {
            #expect(try Gunzip.decompress(Gzip.compress(input)) == input)
        }
        let two = try Gzip.compress(Array("ab".utf8)) + Gzip.compress(Array("cd".utf8))
        #expect(try Gunzip.decompress(two) == Array("abcd".utf8))
        var damaged = try Gzip.compress(Array(repeating: 65, count: 1000))
        damaged[damaged.count / 2] ^= 0xFF
        #expect(throws: Gunzip.Failure.self) { try Gunzip.decompress(damaged) }
        #expect(throws: Gunzip.Failure.self) { try Gunzip.decompress(Array(try Gzip.compress(Array("hello".utf8)).dropLast(4))) }
    }

    // MARK: Authentication

    @Test("the bearer token from a file or the environment is sent, and never appears in errors, descriptions or logs",
          arguments: ["file", "environment"])
    func bearerToken(source: String) async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let token = "tok-" + UUID().uuidString
        let variable = "FERRY_TEST_TOKEN"
        // The sink's environment is passed in, not set on this process: setenv here would race
        // with the child processes other tests start (Process copies the environment).
        var environment = ProcessInfo.processInfo.environment
        if source == "file" {
            try writeBytes(Array("  \(token)\n".utf8), to: scratch.appending("token"))
            chmod(scratch.appending("token"), 0o600)
        } else {
            environment[variable] = token
        }
        let logs = CapturedLogs()
        try await Self.withServer({ request in
            // A collector that echoes the request headers in its error body.
            request.batchEventIDs.count > 1
                ? .status(401, body: "bad credentials: \(request.header("Authorization") ?? "-")")
                : .ok
        }) { server in
            try await Self.withSink(server, configure: {
                if source == "file" { $0.tokenFile = scratch.appending("token") } else { $0.tokenEnvironment = variable }
                $0.headers = ["X-Tenant": "acme"]
            }, logger: logs.logger, environment: environment) { sink in
                _ = try await sink.deliver(Self.batch(1))
                let error = await Self.sinkError { _ = try await sink.deliver(Self.batch(2)) }
                let request = try #require(server.requests.first)
                #expect(request.header("Authorization") == "Bearer \(token)")
                #expect(request.header("X-Tenant") == "acme")
                #expect(error?.disposition == .permanent)
                #expect(error?.upstreamStatus == 401)
                #expect(error?.upstreamBody == "bad credentials: Bearer <redacted>")
                for text in ["\(error.map { "\($0)" } ?? "")", error?.message ?? "", sink.description,
                             "\(sink.configuration)", logs.text] {
                    #expect(!text.contains(token), "the token leaked: \(text)")
                }
                #expect(sink.description.contains("redacted"))
                #expect(!logs.text.isEmpty, "the sink logged something (checked for the token above)")
            }
        }
    }

    @Test("a missing token file or unset variable stops the sink at recover(), without leaking anything")
    func missingToken() async throws {
        for configure in [{ (c: inout HTTPSinkConfiguration) in c.tokenFile = "/nonexistent/ferry-token" },
                          { (c: inout HTTPSinkConfiguration) in c.tokenEnvironment = "FERRY_TEST_UNSET_\(UInt32.random(in: 0...UInt32.max))" }] {
            var configuration = HTTPSinkConfiguration(url: "http://127.0.0.1:9/")
            configure(&configuration)
            let sink = HTTPSink(configuration: configuration, logger: quietLogger)
            await #expect(throws: AgentError.self) { _ = try await sink.recover(checkpoint: nil) }
            try await sink.shutdown()
        }
    }

    // MARK: Retries

    @Test("429 with Retry-After seconds and 503 with an HTTP-date retry no earlier than asked; garbage means backoff")
    func retryAfter() async throws {
        // A whole second (what an HTTP-date can say), ten minutes ahead.
        let dateMilliseconds = (WallClock.unixMilliseconds() / 1000 + 600) * 1000
        let inTenMinutes = Self.httpDate(Date(timeIntervalSince1970: Double(dateMilliseconds / 1000)))
        try await Self.withServer { server in
            server.enqueue(.status(429, headers: ["Retry-After": "7"], body: "slow down"),
                           .status(503, headers: ["Retry-After": inTenMinutes]),
                           .status(503, headers: ["Retry-After": "soon"]),
                           .status(503, headers: ["Retry-After": "Sun, 06 Nov 1994 08:49:37 GMT"]),
                           .status(429, headers: ["Retry-After": "99999999"]))
            try await Self.withSink(server) { sink in
                let batch = Self.batch(2)
                let tooMany = await Self.sinkError { _ = try await sink.deliver(batch) }
                #expect(tooMany?.disposition == .retry(after: .seconds(7)))
                #expect(tooMany?.upstreamStatus == 429)
                #expect(tooMany?.upstreamBody == "slow down")
                let asked = WallClock.unixMilliseconds()
                let unavailable = await Self.sinkError { _ = try await sink.deliver(batch) }
                let answered = WallClock.unixMilliseconds()
                guard case .retry(let after?) = unavailable?.disposition else {
                    Issue.record("expected a retry with a delay, got \(String(describing: unavailable))")
                    return
                }
                // The delay ends at the date: counted from when the sink read the answer (between
                // the call and its return), no earlier and no later.
                #expect(after >= .milliseconds(Int64(dateMilliseconds) - Int64(answered)), "\(after)")
                #expect(after <= .milliseconds(Int64(dateMilliseconds) - Int64(asked)), "\(after)")
                #expect(await Self.sinkError { _ = try await sink.deliver(batch) }?.disposition == .retry(after: nil))
                #expect(await Self.sinkError { _ = try await sink.deliver(batch) }?.disposition == .retry(after: .zero))
                #expect(await Self.sinkError { _ = try await sink.deliver(batch) }?.disposition == .retry(after: RetryAfter.maximum))
                // Every attempt of the same batch carries the same key.
                #expect(Set(server.requests.map { $0.header("Idempotency-Key") }) == [batch.idempotencyKey])
            }
        }
    }

    @Test("408, 500, 502, 504 are retried with normal backoff", arguments: [408, 500, 502, 504])
    func retriedStatus(status: Int) async throws {
        try await Self.withServer({ _ in .status(status, headers: ["Retry-After": "5"], body: "oops") }) { server in
            try await Self.withSink(server) { sink in
                let error = await Self.sinkError { _ = try await sink.deliver(Self.batch(1)) }
                #expect(error?.disposition == .retry(after: nil))
                #expect(error?.upstreamStatus == status)
            }
        }
    }

    @Test("a refused connection is retried")
    func connectionRefused() async throws {
        // A port that was just listening and is now closed.
        let closed = try await HTTPTestServer.start()
        let url = closed.url()
        await closed.shutdown()
        var configuration = HTTPSinkConfiguration(url: url)
        configuration.connectTimeoutMilliseconds = 2000
        let sink = HTTPSink(configuration: configuration, logger: quietLogger)
        let error = try await withTimeout(.seconds(15), "a refused delivery") {
            await Self.sinkError { _ = try await sink.deliver(Self.batch(1)) }
        }
        #expect(error?.disposition == .retry(after: nil))
        #expect(error?.upstreamStatus == nil)
        try await sink.shutdown()
    }

    @Test("a collector that never answers times out and is retried")
    func timeout() async throws {
        try await Self.withServer({ _ in .never }) { server in
            try await Self.withSink(server, configure: { $0.requestTimeoutMilliseconds = 300 }) { sink in
                let error = try await withTimeout(.seconds(15), "a timed-out delivery") {
                    await Self.sinkError { _ = try await sink.deliver(Self.batch(1)) }
                }
                #expect(error?.disposition == .retry(after: nil))
                #expect(error?.message.contains("timed out") == true, "\(String(describing: error))")
                // On a loaded machine the deadline can pass before the request reaches the server.
                #expect(server.requests.count <= 1)
            }
        }
    }

    // MARK: 413

    @Test("413 splits the batch in halves until every part fits; each part has its own idempotency key")
    func splitOnTooLarge() async throws {
        let limit = 3
        try await Self.withServer({ request in request.batchEventIDs.count > limit ? .status(413, body: "too big") : .ok }) { server in
            let batch = Self.batch(10)
            _ = try await Self.withSink(server) { try await $0.deliver(batch) }
            let requests = server.requests
            #expect(requests.map(\.batchEventIDs.count) == [10, 5, 2, 3, 5, 2, 3])
            let accepted = requests.filter { $0.batchEventIDs.count <= limit }
            #expect(accepted.flatMap(\.batchEventIDs) == Self.ids(batch), "every event once, in order")
            for request in requests {
                let ids = request.batchEventIDs
                #expect(request.header("Idempotency-Key") == "\(ids[0])-\(ids.count)")
                #expect(request.header("Ferry-Batch-Size") == String(ids.count))
                #expect((request.json?["consent"] as? [String: String]) == Self.consent)
            }
        }
    }

    @Test("413 for a single event is permanent")
    func singleEventTooLarge() async throws {
        try await Self.withServer({ _ in .status(413, body: "event too large") }) { server in
            try await Self.withSink(server) { sink in
                let error = await Self.sinkError { _ = try await sink.deliver(Self.batch(2)) }
                #expect(error?.disposition == .permanent)
                #expect(error?.upstreamStatus == 413)
                #expect(error?.upstreamBody == "event too large")
                #expect(server.requests.map(\.batchEventIDs.count) == [2, 1])
            }
        }
    }

    // MARK: Permanent failures

    @Test("4xx answers are permanent, with the status and the start of the body", arguments: [400, 401, 403, 404, 409, 422])
    func permanent(status: Int) async throws {
        let longBody = "error: " + String(repeating: "x", count: 5000)
        try await Self.withServer({ _ in .status(status, body: longBody) }) { server in
            try await Self.withSink(server) { sink in
                let error = await Self.sinkError { _ = try await sink.deliver(Self.batch(2)) }
                #expect(error?.disposition == .permanent)
                #expect(error?.upstreamStatus == status)
                #expect(error?.upstreamBody == String(longBody.prefix(HTTPSink.upstreamBodyExcerptBytes)))
                #expect(error?.message.contains("\(status)") == true)
                #expect(server.requests.count == 1)
            }
        }
    }

    @Test("a redirect is not followed for POST: permanent, naming the target")
    func redirect() async throws {
        try await Self.withServer({ _ in .status(307, headers: ["Location": "http://127.0.0.1:1/elsewhere"]) }) { server in
            try await Self.withSink(server) { sink in
                let error = await Self.sinkError { _ = try await sink.deliver(Self.batch(1)) }
                #expect(error?.disposition == .permanent)
                #expect(error?.upstreamStatus == 307)
                #expect(error?.message.contains("redirect to http://127.0.0.1:1/elsewhere not followed") == true, "\(String(describing: error))")
                #expect(server.requests.count == 1)
            }
        }
    }

    @Test("the status table", arguments: [
        (200, HTTPSink.Verdict.acknowledged), (201, .acknowledged), (204, .acknowledged), (299, .acknowledged),
        (301, .redirect), (302, .redirect), (308, .redirect),
        (400, .permanent), (401, .permanent), (403, .permanent), (404, .permanent), (410, .permanent), (422, .permanent),
        (408, .retry(after: nil)), (413, .tooLarge), (429, .retry(after: nil)),
        (500, .retry(after: nil)), (502, .retry(after: nil)), (503, .retry(after: nil)), (504, .retry(after: nil)),
    ])
    func statusTable(status: Int, verdict: HTTPSink.Verdict) {
        #expect(HTTPSink.classify(status: status, retryAfter: nil) == verdict)
    }

    // MARK: TLS

    @Test("an https URL to a plain-HTTP server fails as a retryable transport error; a bad caFile stops recover()")
    func tls() async throws {
        try await Self.withServer { server in
            try await Self.withSink(server, configure: { $0.url = "https://127.0.0.1:\(server.port)/v1/batch" }) { sink in
                let error = try await withTimeout(.seconds(15), "a TLS failure") {
                    await Self.sinkError { _ = try await sink.deliver(Self.batch(1)) }
                }
                #expect(error?.disposition == .retry(after: nil))
            }
        }
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        try writeBytes(Array("not a certificate".utf8), to: scratch.appending("ca.pem"))
        let sink = HTTPSink(configuration: HTTPSinkConfiguration(url: "https://127.0.0.1:9/", caFile: scratch.appending("ca.pem")),
                            logger: quietLogger)
        await #expect(throws: AgentError.self) { _ = try await sink.recover(checkpoint: nil) }
        try await sink.shutdown()
    }

    @Test("a sink released without shutdown() closes its client instead of trapping (an agent that failed to start)")
    func releasedWithoutShutdown() async throws {
        for _ in 0..<3 {
            _ = HTTPSink(configuration: HTTPSinkConfiguration(url: "http://127.0.0.1:9/"), logger: quietLogger)
        }
        // A used one too: its pool has a connection.
        try await Self.withServer { server in
            let sink = HTTPSink(configuration: HTTPSinkConfiguration(url: server.url()), logger: quietLogger)
            _ = try await sink.deliver(Self.batch(1))
            #expect(server.requests.count == 1)
        }
    }

    static func httpDate(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }
}

/// Collects every log line (message and metadata) as text.
final class CapturedLogs: Sendable {
    private let lines = Mutex<[String]>([])

    var text: String { lines.withLock { $0.joined(separator: "\n") } }

    var logger: Logger {
        Logger(label: "captured") { _ in Handler(logs: self) }
    }

    func append(_ line: String) { lines.withLock { $0.append(line) } }

    struct Handler: LogHandler {
        let logs: CapturedLogs
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            logs.append("\(event.level) \(event.message) \(metadata.merging(event.metadata ?? [:]) { $1 })")
        }
    }
}
