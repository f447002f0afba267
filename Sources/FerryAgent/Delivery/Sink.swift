import FerryProtocol
import FerryStorage

/// A batch of stored events handed to a sink.
public struct DeliveryBatch: Sendable {
    /// The events, oldest first.
    public var events: [StoredEvent]
    /// The consent record stamped on the batch by the send-time gate (Google Consent Mode v2
    /// fields such as `ad_storage`, each `granted`/`denied`/`unset`), for the upstream to honour.
    public var consent: [String: String] = [:]
    /// What the sink's body may say about the host and the emitting process (the sink's
    /// `disclose` setting, resolved), set by the delivery loop on every attempt; `nil`: the
    /// sink's own default (``SinkSettings/defaultDisclosure``).
    public var disclosure: Disclosure?
    /// A stable key for the batch (the first event's id and the count), the same on every retry,
    /// for upstream idempotency.
    public var idempotencyKey: String {
        "\(events.first?.decodedID.description ?? "empty")-\(events.count)"
    }

    /// Creates a batch.
    public init(events: [StoredEvent], consent: [String: String] = [:], disclosure: Disclosure? = nil) {
        self.events = events
        self.consent = consent
        self.disclosure = disclosure
    }

    /// This batch holding `events` instead (the same consent stamp and disclosure): a part of it.
    public func with(events: [StoredEvent]) -> DeliveryBatch {
        DeliveryBatch(events: events, consent: consent, disclosure: disclosure)
    }
}

/// Why a delivery failed, and whether to try again.
public struct SinkError: Error, Sendable, CustomStringConvertible {
    /// Whether retrying can help.
    public enum Disposition: Sendable, Hashable {
        /// Try again after backoff, or no earlier than `after` when the upstream said so.
        case retry(after: Duration?)
        /// Retrying the same batch cannot succeed (the delivery issue dead-letters these).
        case permanent
    }

    /// What to do about it.
    public var disposition: Disposition
    /// What happened, for logs and status.
    public var message: String
    /// The upstream's response status, when there was a response (for dead letters).
    public var upstreamStatus: Int?
    /// The start of the upstream's response body, when there was one (for dead letters).
    public var upstreamBody: String?

    /// Creates an error.
    public init(_ disposition: Disposition, _ message: String, upstreamStatus: Int? = nil, upstreamBody: String? = nil) {
        self.disposition = disposition
        self.message = message
        self.upstreamStatus = upstreamStatus
        self.upstreamBody = upstreamBody
    }

    public var description: String { message }
}

/// Where delivered events go.
///
/// The delivery loop calls ``deliver(_:)`` with one batch at a time and advances its persisted
/// cursor only when it returns. A sink may return a checkpoint (opaque bytes) that is stored
/// atomically with the cursor and handed back to ``recover(checkpoint:)`` on the next start, so
/// a sink that writes locally can make delivery exactly-once across crashes.
public protocol Sink: Sendable {
    /// A short name for status and bus messages (`"file"`, `"http"`).
    var name: String { get }
    /// Called once before the first delivery with the checkpoint stored with the cursor (`nil`
    /// on a first start). Returns the checkpoint describing the sink's state now; on a first start
    /// the agent stores it with the initial cursor before delivering anything, so a crash during
    /// the very first batch is recovered like any other.
    func recover(checkpoint: [UInt8]?) async throws -> [UInt8]?
    /// Delivers `batch`; returns the checkpoint to store with the new cursor. Throw ``SinkError``.
    func deliver(_ batch: DeliveryBatch) async throws -> [UInt8]?
    /// Releases resources.
    func shutdown() async throws
    /// Called on a configuration reload (SIGHUP): credentials read from files or the
    /// environment (tokens) are read again before the next request. The default does nothing.
    func reloadCredentials() async
    /// The events of `batch` this sink can never deliver, whatever the upstream answers (too
    /// large for the upstream's format, missing a field it requires), each with the reason.
    /// Asked once per batch, after the send-time gate and before ``deliver(_:)``: the delivery
    /// loop dead-letters each rejected event on its own (reason `rejected`) and hands the rest to
    /// ``deliver(_:)``, so one bad event does not hold back the others. The default rejects none.
    func rejections(in batch: DeliveryBatch) -> [SinkRejection]
    /// Asks the upstream to erase what it received of one user (`ferry forget --user`; a
    /// request of the agent's erasure outbox, docs/CONSENT.md, "Erasure upstream"). Returns a
    /// reference the upstream gave the request, if any (Segment's `regulateId`), kept in the
    /// outbox and the audit log. Throw ``SinkError``: `.retry` is retried with the sink's backoff
    /// and circuit breaker, like a batch; `.permanent` ends the request for this sink as failed.
    /// Called on no particular thread, never concurrently with another `erase` of the same sink,
    /// possibly while a batch is being delivered. Must be idempotent: after a crash the same
    /// request (same ``SinkErasure/id``) may come again. The default refuses: the sink type does
    /// not support erasure, and the request fails permanently for it (in the audit log).
    func erase(_ request: SinkErasure) async throws -> String?
}

extension Sink {
    /// Nothing to re-read.
    public func reloadCredentials() async {}
    /// Every event can be delivered.
    public func rejections(in batch: DeliveryBatch) -> [SinkRejection] { [] }
    /// Not supported: a permanent ``SinkError``.
    public func erase(_ request: SinkErasure) async throws -> String? {
        throw SinkError(.permanent, "sink \(name) does not support erasure")
    }
}

/// One user's erasure, as a sink is asked to carry it upstream (``Sink/erase(_:)``).
public struct SinkErasure: Sendable, Hashable, Codable {
    /// The request's id (a UUIDv7), the same on every attempt and across restarts: an upstream
    /// can deduplicate on it.
    public var id: String
    /// The user whose events are to be erased (the events' `userId`).
    public var userID: String
    /// When `ferry forget` was asked, Unix ms.
    public var requestedAt: UInt64

    /// Creates a request.
    public init(id: String, userID: String, requestedAt: UInt64) {
        self.id = id
        self.userID = userID
        self.requestedAt = requestedAt
    }

    private enum CodingKeys: String, CodingKey { case id, userID = "user_id", requestedAt = "requested_at" }
}

/// An event a sink can never deliver, and why (``Sink/rejections(in:)``).
public struct SinkRejection: Sendable {
    /// The event, as in the batch.
    public var event: StoredEvent
    /// Why, for the dead letter's `error` and the log (`"segment: message is 40960 bytes, over
    /// the 32000-byte limit"`).
    public var reason: String

    /// Creates a rejection.
    public init(event: StoredEvent, reason: String) {
        self.event = event
        self.reason = reason
    }
}

/// An event one sink passes by, and why (its `requiresConsent` or `route`).
package struct SinkSkip: Sendable {
    /// The event.
    package var event: StoredEvent
    /// Why.
    package var reason: SinkSkipReason
    /// A skip.
    package init(event: StoredEvent, reason: SinkSkipReason) {
        self.event = event
        self.reason = reason
    }
}

/// What the send-time gate decided for one batch.
package enum GateDecision: Sendable {
    /// Nothing may be sent now (delivery paused, consent forbids all delivery, or a category the
    /// sink requires is undetermined under `hold`); the loop waits for its wake-up signal and
    /// asks again. Nothing is skipped.
    case paused
    /// Send `batch` (the admitted events, stamped); `blocked` events are skipped for good because
    /// the consent state at send time forbids them, with `reason` for the bus; `skipped` events
    /// are passed by this sink alone (its requirement or route), each with its reason.
    case deliver(DeliveryBatch, blocked: [StoredEvent], reason: String, skipped: [SinkSkip] = [])
}

/// The consent check at send time: asked before every delivery attempt of every batch, so a
/// revocation stops events already queued (except a batch already on the wire).
package protocol DeliveryGate: Sendable {
    /// Decides what of `batch` may go to `sink` now, under the sink's `policy` (`nil`: it names
    /// no requirement and no route).
    func admit(_ batch: DeliveryBatch, sink: String, policy: SinkPolicy?) -> GateDecision
    /// Whether ``admit(_:sink:policy:)`` would answer ``GateDecision/paused`` whatever the batch:
    /// the loop asks before reading the log, so a paused sink does not re-read its next batch at
    /// every commit. Must be cheap (a lock and a flag); `false` when unsure (`admit` still decides).
    func isPaused(sink: String, policy: SinkPolicy?) -> Bool
}

extension DeliveryGate {
    /// Never paused (the gate decides per batch).
    package func isPaused(sink: String, policy: SinkPolicy?) -> Bool { false }
}

/// A gate that admits everything the sink's route takes (no consent engine: every category
/// counts as granted).
package struct OpenDeliveryGate: DeliveryGate {
    /// Creates the gate.
    package init() {}
    package func admit(_ batch: DeliveryBatch, sink: String, policy: SinkPolicy?) -> GateDecision {
        guard let policy else { return .deliver(batch, blocked: [], reason: "") }
        var admitted = batch
        var skipped: [SinkSkip] = []
        admitted.events = batch.events.filter { event in
            guard let header = try? event.header() else { return true }
            let facts = SinkPolicyEvent(header, frame: event.frame, category: nil)
            if policy.routes(facts) { return true }
            skipped.append(SinkSkip(event: event, reason: .route))
            return false
        }
        return .deliver(admitted, blocked: [], reason: "", skipped: skipped)
    }
}
