import AsyncHTTPClient
import FerryAgent
import FerryProtocol
import FerryStorage
import FerryThreads
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import Synchronization

/// Delivers batches by POSTing them to an HTTP collector. See `docs/HTTP-SINK.md`.
///
/// One `HTTPClient` (connection pool) serves every request; ``shutdown()`` closes it. Each
/// batch is one request with an `Idempotency-Key` (``DeliveryBatch/idempotencyKey``), so a batch
/// sent again after a crash or a lost answer carries the same key and the same event ids.
///
/// What the answer means to the delivery loop:
///
/// | Answer | Outcome |
/// |---|---|
/// | 2xx | acknowledged |
/// | 429, 503 | ``SinkError`` `.retry(after:)` from `Retry-After` (``RetryAfter``), else normal backoff |
/// | 408, other 5xx, connection errors, timeouts | `.retry(after: nil)` |
/// | 413 | the batch is split in halves, each sent on its own (recursively); one event still too large is `.permanent` |
/// | 3xx | `.permanent` (redirects are not followed for POST) |
/// | other 4xx | `.permanent`, with the status and the start of the body |
///
/// In `segment` format a batch is first checked against Segment's limits: events that can never
/// be accepted are rejected (``rejections(in:)``: the delivery loop dead-letters them one by one)
/// and the rest is cut into requests that fit (``HTTPBatchBody/segmentPlan(_:maxMessageBytes:maxBatchBytes:)``).
///
/// When a batch goes out in several requests (segment parts, 413 halves) and a later one fails
/// with a retryable error, the events already acknowledged are remembered and left out of the
/// retry of that batch, so they are not posted twice by the same process.
///
/// The credential (a bearer token or a Segment write key) is read once (``recover(checkpoint:)`` or
/// the first delivery, and again after a configuration reload) from the configured file or
/// environment variable. It is never logged and is cut out of upstream body excerpts.
public final class HTTPSink: Sink, CustomStringConvertible {
    public let name: String
    /// The configuration the sink runs with.
    public let configuration: HTTPSinkConfiguration
    let logger: Logger
    let client: HTTPClient
    /// The environment ``HTTPSinkConfiguration/tokenEnvironment`` is looked up in: the process's
    /// own, captured at creation, unless a test passes one.
    let environment: [String: String]
    private let state = Mutex<State>(State())

    /// The sink's thread for blocking file reads (token, CA file).
    let io: BlockingExecutor

    private struct State {
        /// `nil` until loaded; then `.some(nil)` when no credential is configured.
        var credential: Credential??
        /// Events of the batch in hand that a collector already acknowledged (a batch sent in
        /// several requests whose later request failed): the retry leaves them out. Emptied when
        /// a batch is done, delivered or refused for good.
        var acknowledged: Set<EventID> = []
        var isShutDown = false
        /// The segment plan ``rejections(in:)`` made last, for the ``deliver(_:)`` of the same
        /// batch that follows it (the delivery loop asks for both): each message is encoded once.
        var lastPlan: (batch: DeliveryBatch, version: Int, plan: HTTPBatchBody.SegmentPlan)?
    }

    /// The `Authorization` value and the secrets in it, which never leave the process.
    struct Credential: Sendable {
        /// The header value: `Bearer <token>` or `Basic <base64(key:)>`.
        var authorization: String
        /// Text cut out of upstream body excerpts: the token, or the key and its base64 form.
        var secrets: [String]
    }

    /// How much of an error response's body is kept for the dead letter (``SinkError/upstreamBody``).
    public static let upstreamBodyExcerptBytes = 1024
    /// The `User-Agent` header.
    public static let userAgent = "ferryd/\(FerryVersion.current) (ferry-protocol/\(ferryProtocolVersion))"

    /// Creates the sink and its connection pool; nothing is connected until the first batch.
    /// The configuration is expected to be valid (``HTTPSinkConfiguration/validate()``).
    public convenience init(name: String = "http", configuration: HTTPSinkConfiguration, logger: Logger) {
        self.init(name: name, configuration: configuration, logger: logger,
                  io: BlockingExecutor(name: "ferry-sink-" + name))
    }

    /// Creates the sink reading ``HTTPSinkConfiguration/tokenEnvironment`` from `environment`
    /// instead of the process's environment (tests: setting a variable of the test process would
    /// race with the child processes other tests start).
    package convenience init(name: String = "http", configuration: HTTPSinkConfiguration, logger: Logger,
                             environment: [String: String]) {
        self.init(name: name, configuration: configuration, logger: logger,
                  io: BlockingExecutor(name: "ferry-sink-" + name), environment: environment)
    }

    /// Creates the sink with `io` (its delivery loop's thread) for reading the token and CA files,
    /// and `environment` for ``HTTPSinkConfiguration/tokenEnvironment``.
    package init(name: String, configuration: HTTPSinkConfiguration, logger: Logger, io: BlockingExecutor,
                 environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.io = io
        self.environment = environment
        self.name = name
        self.configuration = configuration
        self.logger = logger
        var tls = TLSConfiguration.makeClientConfiguration()
        if !configuration.tlsVerify { tls.certificateVerification = .none }
        if let caFile = configuration.caFile { tls.trustRoots = .file(caFile) }
        var clientConfiguration = HTTPClient.Configuration(
            tlsConfiguration: tls,
            // A redirected POST would have to be re-sent somewhere else: the operator decides.
            redirectConfiguration: .disallow,
            timeout: .init(connect: .milliseconds(Int64(configuration.connectTimeoutMilliseconds))),
            decompression: .disabled)
        // A refused connection fails the request at once; the delivery loop owns the backoff.
        clientConfiguration.connectionPool.retryConnectionEstablishment = false
        client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: clientConfiguration)
    }

    deinit {
        // Safety net for an agent that failed before calling shutdown(): HTTPClient traps when
        // released while running. The callback form keeps the client alive until it is closed.
        if !state.withLock({ $0.isShutDown }) { client.shutdown { _ in } }
    }

    public var description: String { "HTTPSink(\(configuration))" }

    /// Loads the token and checks the CA file, so a misconfiguration stops `ferryd` at start
    /// instead of failing every batch. The sink keeps no checkpoint.
    public func recover(checkpoint: [UInt8]?) async throws -> [UInt8]? {
        let configuration = self.configuration, environment = self.environment
        let problems = await io.run { Self.fileProblems(configuration, environment: environment) }
        if !problems.isEmpty { throw AgentError(code: .configuration, message: problems.joined(separator: "\n")) }
        _ = try await authorization()
        logger.info("http sink ready", metadata: ["sink": "\(configuration)"])
        return nil
    }

    /// What is wrong with the files `configuration` names (the credential, `erasure.tokenFile`,
    /// `caFile`), one message each; what start refuses and `ferryd validate` lists
    /// (``HTTPSinkConfiguration/checkFiles()``), `tokenEnvironment` looked up in `environment`. Blocking.
    static func fileProblems(_ configuration: HTTPSinkConfiguration,
                             environment: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        // Warnings (a token others can read) are the running sink's to log, not the check's.
        let quiet = Logger(label: "ferry-http-sink-check", factory: { _ in SwiftLogNoOpLogHandler() })
        var problems: [String] = []
        do {
            _ = try loadCredential(configuration, environment: environment, logger: quiet)
        } catch {
            problems.append((error as? AgentError)?.message ?? "sink (http): \(error)")
        }
        if configuration.format == .segment, let tokenFile = configuration.erasure.tokenFile {
            do {
                let token = try readSecret(tokenFile, key: "erasure.tokenFile", logger: quiet)
                if token.isEmpty || !token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) {
                    problems.append("sink (http): erasure.tokenFile \(tokenFile) is empty or holds characters a token cannot have")
                }
            } catch {
                problems.append((error as? AgentError)?.message ?? "sink (http): \(error)")
            }
        }
        if let caFile = configuration.caFile {
            do {
                guard !(try NIOSSLCertificate.fromPEMFile(caFile)).isEmpty else {
                    throw AgentError(code: .configuration, message: "no certificate")
                }
            } catch {
                problems.append("sink (http): caFile \(caFile) holds no readable PEM certificate: \(error)")
            }
        }
        return problems
    }

    public func deliver(_ batch: DeliveryBatch) async throws -> [UInt8]? {
        let done = state.withLock { $0.acknowledged }
        var remaining = batch
        if !done.isEmpty { remaining.events.removeAll { done.contains($0.decodedID) } }
        do {
            switch configuration.format {
            case .envelope:
                if !remaining.events.isEmpty { try await send(remaining) }
            case .segment:
                let plan = segmentPlan(remaining)
                if let first = plan.rejections.first {
                    // Only a replayed dead letter gets here: the delivery loop takes rejected
                    // events out first (rejections(in:)).
                    let more = plan.rejections.count > 1 ? " (and \(plan.rejections.count - 1) more events that Segment cannot accept)" : ""
                    throw SinkError(.permanent, first.reason + more)
                }
                if plan.parts.count > 1 {
                    logger.debug("http sink: segment batch split to fit 500 KB", metadata: [
                        "batch": "\(batch.idempotencyKey)", "parts": "\(plan.parts.count)",
                    ])
                }
                for (part, messages) in zip(plan.parts, plan.messages) { try await send(part, segmentMessages: messages) }
            }
        } catch let error as SinkError where error.disposition != .permanent {
            throw error  // Keep what was acknowledged for the retry of this batch.
        } catch {
            state.withLock { $0.acknowledged = [] }
            throw error
        }
        state.withLock { $0.acknowledged = [] }
        return nil
    }

    /// In `segment` format, the events Segment would refuse whatever happens: no `userId` or
    /// `anonymousId`, a `track` without a name, a message over 32 KB. None in `envelope` format.
    public func rejections(in batch: DeliveryBatch) -> [SinkRejection] {
        guard configuration.format == .segment else { return [] }
        let plan = HTTPBatchBody.segmentPlan(batch, version: configuration.bodyVersion)
        let version = configuration.bodyVersion
        state.withLock { $0.lastPlan = (batch, version, plan) }
        return plan.rejections
    }

    /// The segment plan of `batch`: the one ``rejections(in:)`` made if it was for these very
    /// events (``HTTPBatchBody/sameBatch(_:_:)``), else a new one.
    private func segmentPlan(_ batch: DeliveryBatch) -> HTTPBatchBody.SegmentPlan {
        let version = configuration.bodyVersion
        let last = state.withLock { state in
            defer { state.lastPlan = nil }
            return state.lastPlan
        }
        if let last, last.version == version, HTTPBatchBody.sameBatch(last.batch, batch) { return last.plan }
        return HTTPBatchBody.segmentPlan(batch, version: version)
    }

    public func shutdown() async throws {
        guard state.withLock({ state in
            defer { state.isShutDown = true }
            return !state.isShutDown
        }) else { return }
        try await client.shutdown()
    }

    // MARK: Sending

    /// Posts `batch`; on 413 posts each half instead (recursively).
    ///
    /// A failure after the first half was acknowledged fails the whole batch: the loop retries
    /// it, and ``deliver(_:)`` leaves out the events acknowledged so far (unless `ferryd`
    /// restarted in between: then they go out again, with the same event ids).
    /// `segmentMessages`: the batch's messages as its plan encoded them (segment format; the
    /// halves of a 413 are encoded anew).
    private func send(_ batch: DeliveryBatch, segmentMessages: [[UInt8]]? = nil) async throws {
        let (status, headers, excerpt) = try await post(batch, segmentMessages: segmentMessages)
        switch Self.classify(status: status, retryAfter: headers.first(name: "Retry-After")) {
        case .acknowledged:
            state.withLock { $0.acknowledged.formUnion(batch.events.map(\.decodedID)) }
            logger.debug("http sink: batch acknowledged", metadata: [
                "batch": "\(batch.idempotencyKey)", "events": "\(batch.events.count)", "status": "\(status)",
            ])
        case .tooLarge:
            guard batch.events.count > 1 else {
                throw SinkError(.permanent, "http sink: HTTP 413 for a single event (\(batch.events.first?.frame.count ?? 0) bytes): the collector refuses it",
                                upstreamStatus: status, upstreamBody: excerpt)
            }
            logger.info("http sink: HTTP 413, splitting the batch", metadata: [
                "batch": "\(batch.idempotencyKey)", "events": "\(batch.events.count)",
            ])
            let middle = batch.events.count / 2
            try await send(batch.with(events: Array(batch.events[..<middle])))
            try await send(batch.with(events: Array(batch.events[middle...])))
        case .retry(let after):
            var message = "http sink: HTTP \(status)"
            if let after { message += ", Retry-After \(after)" }
            throw SinkError(.retry(after: after), message, upstreamStatus: status, upstreamBody: excerpt)
        case .redirect:
            let location = headers.first(name: "Location").map { " to \($0)" } ?? ""
            throw SinkError(.permanent, "http sink: HTTP \(status) redirect\(location) not followed for POST; configure the final URL",
                            upstreamStatus: status, upstreamBody: excerpt)
        case .permanent:
            throw SinkError(.permanent, "http sink: HTTP \(status) (\(HTTPResponseStatus(statusCode: status).reasonPhrase))",
                            upstreamStatus: status, upstreamBody: excerpt)
        }
    }

    /// One POST; returns the status, the headers and (for non-2xx answers) the start of the body.
    /// Transport failures are ``SinkError`` `.retry(after: nil)`.
    private func post(_ batch: DeliveryBatch, segmentMessages: [[UInt8]]? = nil) async throws -> (Int, HTTPHeaders, String?) {
        let authorization = try await authorization()
        let sentAt = WallClock.unixMilliseconds()
        var body = segmentMessages.map {
            HTTPBatchBody.segment(messages: $0, consent: batch.consent, version: configuration.bodyVersion, sentAt: sentAt)
        } ?? HTTPBatchBody.encode(batch, format: configuration.format, version: configuration.bodyVersion, sentAt: sentAt)
        var request = HTTPClientRequest(url: configuration.url)
        request.method = .POST
        for (name, value) in configuration.headers.sorted(by: { $0.key < $1.key }) { request.headers.add(name: name, value: value) }
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: Self.userAgent)
        request.headers.add(name: "Idempotency-Key", value: batch.idempotencyKey)
        request.headers.add(name: "Ferry-Batch-Size", value: String(batch.events.count))
        if let authorization { request.headers.add(name: "Authorization", value: authorization) }
        if configuration.gzip {
            body = try Gzip.compress(body)
            request.headers.add(name: "Content-Encoding", value: "gzip")
        }
        request.body = .bytes(ByteBuffer(bytes: body))
        do {
            let response = try await client.execute(request, timeout: .milliseconds(Int64(configuration.requestTimeoutMilliseconds)))
            let status = Int(response.status.code)
            var excerpt: [UInt8]? = (200..<300).contains(status) ? nil : []
            // Read the whole body (bounded) so the connection can be reused; keep the start of
            // an error body.
            var seen = 0
            for try await chunk in response.body {
                seen += chunk.readableBytes
                if let kept = excerpt?.count, kept < Self.upstreamBodyExcerptBytes {
                    excerpt! += chunk.readableBytesView.prefix(Self.upstreamBodyExcerptBytes - kept)
                }
                if seen > 1 << 20 { break }  // Enough: the connection is dropped instead of drained.
            }
            return (status, response.headers, excerpt.map { redact(String(decoding: $0, as: UTF8.self)) })
        } catch let error as SinkError {
            throw error
        } catch {
            throw SinkError(.retry(after: nil), "http sink: \(redact(Self.describe(error)))")
        }
    }

    /// What an answer means; see the table in the type's documentation.
    enum Verdict: Equatable {
        case acknowledged, tooLarge, retry(after: Duration?), redirect, permanent
    }

    /// The verdict for `status` with the `Retry-After` header value, if any.
    static func classify(status: Int, retryAfter: String?, now: UInt64 = WallClock.unixMilliseconds()) -> Verdict {
        switch status {
        case 200..<300: .acknowledged
        case 413: .tooLarge
        case 429, 503: .retry(after: retryAfter.flatMap { RetryAfter.delay($0, now: now) })
        case 408, 500..<600: .retry(after: nil)
        case 300..<400: .redirect
        default: .permanent
        }
    }

    static func describe(_ error: any Error) -> String {
        if let error = error as? HTTPClientError {
            switch error {
            case .deadlineExceeded, .readTimeout, .writeTimeout: return "request timed out (\(error))"
            case .connectTimeout: return "connection timed out"
            default: return "\(error)"
            }
        }
        return "\(error)"
    }

    // MARK: Credentials

    /// Forgets the loaded credential: the next request reads `tokenFile`, `writeKeyFile` (or the
    /// environment) again.
    public func reloadCredentials() async {
        state.withLock { $0.credential = nil }
    }

    /// The `Authorization` value, or `nil` without a configured credential. Loads it on first use.
    func authorization() async throws -> String? {
        if let loaded = state.withLock({ $0.credential }) { return loaded?.authorization }
        let configuration = self.configuration, environment = self.environment, logger = self.logger
        let credential = try await io.run { try Self.loadCredential(configuration, environment: environment, logger: logger) }
        state.withLock { $0.credential = .some(credential) }
        return credential?.authorization
    }

    /// The configured credential as a header value: a bearer token, or a Segment write key as
    /// HTTP Basic (the key as the user name, an empty password); `tokenEnvironment` is looked up in
    /// `environment`. Errors never contain it.
    static func loadCredential(_ configuration: HTTPSinkConfiguration, environment: [String: String],
                               logger: Logger) throws -> Credential? {
        if let path = configuration.writeKeyFile {
            let key = try readSecret(path, key: "writeKeyFile", logger: logger)
            guard !key.isEmpty else { throw AgentError(code: .configuration, message: "sink (http): the write key (file \(path)) is empty") }
            // A colon would end the user name early (RFC 7617).
            guard key.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: ":") }) else {
                throw AgentError(code: .configuration, message: "sink (http): the write key (file \(path)) holds characters a write key cannot have (a colon, controls, spaces or non-ASCII)")
            }
            let encoded = Data((key + ":").utf8).base64EncodedString()
            return Credential(authorization: "Basic " + encoded, secrets: [encoded, key])
        }
        return try loadToken(configuration, environment: environment, logger: logger).map { Credential(authorization: "Bearer " + $0, secrets: [$0]) }
    }

    /// The contents of the secret file `path` (the value of configuration key `key`), trimmed;
    /// warns when other users can read it.
    static func readSecret(_ path: String, key: String, logger: Logger) throws -> String {
        guard let bytes = try? FileIO.readFile(path, followSymlinks: true) else {
            throw AgentError(code: .configuration, message: "sink (http): cannot read \(key) \(path)")
        }
        if let attributes = try? FileManager.default.attributesOfItem(atPath: path),
           let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue, mode & 0o077 != 0 {
            logger.warning("http sink: \(key) is readable by other users; chmod 600 it", metadata: ["path": "\(path)"])
        }
        return String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Reads the token from the configured file or from the variable in `environment`. Errors never
    /// contain it.
    static func loadToken(_ configuration: HTTPSinkConfiguration, environment: [String: String],
                          logger: Logger) throws -> String? {
        func fail(_ message: String) -> AgentError { AgentError(code: .configuration, message: "sink (http): " + message) }
        let raw: String
        if let path = configuration.tokenFile {
            raw = try readSecret(path, key: "tokenFile", logger: logger)
        } else if let variable = configuration.tokenEnvironment {
            guard let value = environment[variable] else {
                throw fail("environment variable \(variable) (tokenEnvironment) is not set")
            }
            raw = value
        } else {
            return nil
        }
        let token = raw.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !token.isEmpty else { throw fail("the token (\(configuration.tokenFile.map { "file " + $0 } ?? "$" + (configuration.tokenEnvironment ?? ""))) is empty") }
        // Visible ASCII only, so the token can never split or inject header lines.
        guard token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw fail("the token holds characters not allowed in a header (controls, spaces or non-ASCII)")
        }
        return token
    }

    /// `text` with the credential (if loaded) replaced by `<redacted>`: some collectors echo the
    /// request back in error bodies.
    func redact(_ text: String) -> String {
        guard let credential = state.withLock({ $0.credential }) ?? nil else { return text }
        var text = text
        for secret in credential.secrets where !secret.isEmpty {
            text = text.replacingOccurrences(of: secret, with: "<redacted>")
        }
        return text
    }
}
