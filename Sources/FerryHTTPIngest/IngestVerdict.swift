import FerryProtocol
import FerryStorage

/// A response of the HTTP API, decided apart from any I/O.
package struct IngestResponse: Sendable, Equatable {
    /// The HTTP status.
    package var status: Int
    /// Seconds for `Retry-After`, on a retryable refusal.
    package var retryAfter: Int?
    /// The JSON body.
    package var body: [UInt8]
    /// The error code of a refusal (nil for a 2xx), for logs and the bus.
    package var code: String?

    /// The refusal `{"code":…,"message":…}` with `status`.
    package static func refusal(_ status: Int, _ code: String, _ message: String, retryAfter: Int? = nil) -> IngestResponse {
        var json = JSONWriter()
        json.field("code", code)
        json.field("message", message)
        return IngestResponse(status: status, retryAfter: retryAfter, body: json.finish(), code: code)
    }
}

/// What became of one message of a request.
package enum EventOutcome: Sendable, Equatable {
    /// Stored (`held`: in the held area, consent undetermined).
    case accepted(held: Bool)
    /// Broke the tracking plan and was kept in the quarantine (action `quarantine`): durable,
    /// not delivered unless released; not to be sent again.
    case quarantined
    /// Stored before (same `messageId` from the same sender and write key).
    case duplicate
    /// Refused by consent (the host's state, or the message's own categoryPreferences), with the reason.
    case blocked(String)
    /// A local-only event (never sent upstream).
    case suppressed
    /// Refused for good: the message itself is wrong (code, message).
    case refused(code: String, message: String)
    /// Refused for now (`full`, `storage`, `shutting_down`): the whole request is to be retried.
    case retry(RejectReason)

    /// The outcome an ack entry of the commit stage means.
    package init(_ entry: AckEntry) {
        switch entry.status {
        case .accepted where entry.reason == .quarantined: self = .quarantined
        case .accepted: self = .accepted(held: entry.reason == .held)
        case .duplicate: self = .duplicate
        case .blocked: self = .blocked(entry.reason.description)
        case .suppressed: self = .suppressed
        default:
            switch entry.reason {
            case .full, .storage, .shuttingDown: self = .retry(entry.reason)
            case .planViolation:
                self = .refused(code: entry.reason.description,
                                message: "refused: the event breaks the host's tracking plan (docs/QUALITY.md; `ferry plan check` shows how)")
            default: self = .refused(code: entry.reason.description, message: "refused: \(entry.reason.description)")
            }
        }
    }

    /// The `status` of the result, and the label of `ferry_http_events_total{outcome}`.
    package var label: String {
        switch self {
        case .accepted: "accepted"
        case .quarantined: "quarantined"
        case .duplicate: "duplicate"
        case .blocked: "blocked"
        case .suppressed: "suppressed"
        case .refused: "refused"
        case .retry: "retry"
        }
    }
}

/// The request → response decisions of the HTTP API as pure functions (parameter-tested in
/// FerryHTTPIngestTests): what a request's head allows, and what a request's event outcomes
/// answer.
package enum IngestVerdict {
    /// The largest request body on the wire (compressed or not): rudder-sdk-python's batches
    /// are up to 4 MB.
    package static let maxBodyBytes = 5 << 20
    /// The most bytes a gzip body may inflate to.
    package static let maxInflatedBytes = 5 << 20
    /// The request bodies one listener holds at once, every connection together (received, being
    /// parsed or stored): beyond it a request is answered 503 `busy`, so memory stays bounded
    /// whatever the number of clients.
    package static let maxBufferedBodyBytes = 64 << 20
    /// Seconds a retry waits after `full` (the queue must drain).
    package static let retryAfterFull = 5
    /// Seconds a retry waits after a passing condition (`storage`, stopping, busy).
    package static let retryAfterBusy = 1

    /// A request head that may go on: its endpoint, and whether the body is gzip.
    package struct Admitted: Sendable, Equatable {
        /// The endpoint the path names.
        package var endpoint: SegmentEndpoint
        /// Whether the body is gzip (`Content-Encoding: gzip`).
        package var gzip: Bool
    }

    /// Checks a request's head: method, path, content type and encoding, declared length.
    package static func admit(
        method: String, uri: String, contentType: String?, contentEncoding: String?, contentLength: Int?
    ) -> Result<Admitted, IngestRefusal> {
        guard let endpoint = SegmentEndpoint(path: uri) else {
            return .failure(IngestRefusal(404, "not_found", "no such endpoint; POST to /v1/batch, /v1/track, /v1/identify, /v1/page, /v1/screen, /v1/group or /v1/alias"))
        }
        guard method == "POST" else {
            return .failure(IngestRefusal(405, "method_not_allowed", "only POST"))
        }
        let type = (contentType ?? "").split(separator: ";").first.map { String($0).trimmingSpaces.lowercased() } ?? ""
        guard type == "application/json" || (type.hasPrefix("application/") && type.hasSuffix("+json")) else {
            return .failure(IngestRefusal(415, "unsupported_media_type",
                                          "Content-Type must be application/json (got \(type.isEmpty ? "none" : "\"\(type)\""))"))
        }
        var gzip = false
        switch (contentEncoding ?? "").trimmingSpaces.lowercased() {
        case "", "identity": break
        case "gzip", "x-gzip": gzip = true
        case let other:
            return .failure(IngestRefusal(415, "unsupported_encoding", "Content-Encoding \"\(other)\" is not supported; send gzip or none"))
        }
        if let contentLength, contentLength > maxBodyBytes {
            return .failure(IngestRefusal(413, "too_large", "the body is \(contentLength) bytes; the limit is \(maxBodyBytes)"))
        }
        return .success(Admitted(endpoint: endpoint, gzip: gzip))
    }

    /// The answer to a request whose messages had `outcomes` (with their `messageId`s, in order):
    /// any retryable refusal makes the whole request 429 (`full`) or 503 with `Retry-After`
    /// (the libraries resend the batch; its stored events are then answered duplicate); else
    /// 400 when every message was refused for good (nothing of it can ever be stored); else 200
    /// with one result per message (libraries ignore the body; a refused message does not make
    /// them drop the good ones).
    package static func response(_ outcomes: [(messageID: String?, outcome: EventOutcome)]) -> IngestResponse {
        let retries = outcomes.compactMap { if case .retry(let reason) = $0.outcome { reason } else { nil } }
        if !retries.isEmpty {
            if retries.contains(.full) {
                return .refusal(429, "full", "the agent's queue is full; retry later", retryAfter: retryAfterFull)
            }
            if retries.contains(.shuttingDown) {
                return .refusal(503, "shutting_down", "the agent is stopping; retry later", retryAfter: retryAfterBusy)
            }
            return .refusal(503, "storage", "the agent could not store the events; retry later", retryAfter: retryAfterFull)
        }
        let refused = outcomes.compactMap { if case .refused(let code, let message) = $0.outcome { (code, message) } else { nil } }
        if !outcomes.isEmpty && refused.count == outcomes.count {
            let first = refused[0]
            let more = refused.count > 1 ? " (and \(counted(refused.count - 1, "more refused message")))" : ""
            return .refusal(400, first.0, first.1 + more)
        }
        var json = JSONWriter()
        json.field("success", true)
        for label in ["accepted", "quarantined", "duplicate", "blocked", "suppressed", "refused"] {
            json.field(named: label, UInt64(outcomes.count { $0.outcome.label == label }))
        }
        var results: [UInt8] = [UInt8(ascii: "[")]
        for (index, (messageID, outcome)) in outcomes.enumerated() {
            if index > 0 { results.append(UInt8(ascii: ",")) }
            var result = JSONWriter()
            if let messageID { result.field("messageId", messageID) }
            result.field("status", outcome.label)
            switch outcome {
            case .accepted(let held): if held { result.field("held", true) }
            case .blocked(let reason): result.field("code", reason)
            case .refused(let code, let message):
                result.field("code", code)
                result.field("message", message)
            default: break
            }
            results += result.finish()
        }
        results.append(UInt8(ascii: "]"))
        json.rawField("results", results)
        return IngestResponse(status: 200, body: json.finish())
    }
}

/// A request refused as a whole: status, code and message (``IngestResponse/refusal(_:_:_:retryAfter:)``).
package struct IngestRefusal: Error, Sendable, Equatable {
    /// The HTTP status.
    package var status: Int
    /// The error code (`invalid_json`, `too_large` …).
    package var code: String
    /// What is wrong, for people.
    package var message: String
    /// Seconds for `Retry-After` (retryable refusals only).
    package var retryAfter: Int?

    /// A refusal.
    package init(_ status: Int, _ code: String, _ message: String, retryAfter: Int? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.retryAfter = retryAfter
    }

    /// The response that says it.
    package var response: IngestResponse { .refusal(status, code, message, retryAfter: retryAfter) }
}
