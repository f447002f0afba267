import FerryProtocol
import FerryStorage
import Foundation

/// Topics of the event bus (`ipc://<runtime dir>/events`).
public enum BusTopic: String, Sendable, CaseIterable {
    /// An event was stored durably.
    case accepted
    /// An event was handed to the sink and acknowledged by it.
    case delivered
    /// An undelivered event was deleted (drop-oldest policy).
    case dropped
    /// An event was refused.
    case rejected
    /// An event was refused by the consent state (at ingest or at send time), with the reason.
    case blocked
    /// A local-only event: acked and counted, never delivered.
    case suppressed
    /// An event was stored in the held area (consent undetermined, `hold` policy).
    case held
    /// Events were erased by a purge, an erasure request or hold expiry (counts).
    case purged
    /// The consent state changed.
    case consent
    /// A sink's circuit breaker changed state (`closed`, `open`, `half_open`).
    case circuit
    /// A client session's sequence has a gap that stayed open: events the client lost before
    /// the agent stored them (protocol 2 clients).
    case lost
    /// An event that breaks the tracking plan was put in the quarantine (reason
    /// `plan_violation`); it is delivered only if released (`ferry quarantine replay`).
    case quarantined
}

/// Builds the JSON objects published on the bus (for ``EventBus``, their one publisher).
/// Hand-written so that publishing an event costs one small buffer and no Foundation round trip.
enum BusMessage {
    static func event(
        topic: BusTopic, frame: [UInt8], at: UInt64, reason: String? = nil, sink: String? = nil, origin: EventOrigin? = nil
    ) -> [UInt8]? {
        guard let event = try? WireEvent(decoding: frame, checkingFields: false) else {
            // A refused malformed frame: say what little is known.
            var json = JSONWriter()
            json.field("topic", topic.rawValue)
            if frame.count >= 16 { json.field("id", EventID(bytes: frame).description) }
            json.field("at", at)
            if let reason { json.field("reason", reason) }
            return json.finish()
        }
        var json = JSONWriter()
        json.field("topic", topic.rawValue)
        json.eventFields(event)
        json.field("at", at)
        if let reason { json.field("reason", reason) }
        if let sink { json.field("sink", sink) }
        if let origin { json.rawField("origin", JSONWriter.originObject(origin)) }
        return json.finish()
    }
}

extension BusMessage {
    /// `{"topic":"lost","source":…,"session":…,"events":…,"gaps":[[from,to],…],"at":…}`.
    static func lost(_ loss: SessionTable.Loss, at: UInt64) -> [UInt8] {
        var json = JSONWriter()
        json.field("topic", BusTopic.lost.rawValue)
        json.field("source", loss.source)
        json.field("session", loss.session.description)
        json.field("events", loss.events)
        let gaps = loss.gaps.prefix(100).map { "[\($0.lowerBound),\($0.upperBound)]" }.joined(separator: ",")
        json.rawField("gaps", Array("[\(gaps)]".utf8))
        json.field("at", at)
        return json.finish()
    }

    /// `{"topic":"circuit","sink":…,"state":…,"previous":…,"at":…,"consecutive_failures":…,
    /// "error":…,"retry_at":…}` (`error` and `retry_at` only when known).
    static func circuit(_ change: CircuitChange) -> [UInt8] {
        var json = JSONWriter()
        json.field("topic", BusTopic.circuit.rawValue)
        json.field("sink", change.sink)
        json.field("state", change.to.rawValue)
        json.field("previous", change.from.rawValue)
        json.field("at", change.at)
        json.field("consecutive_failures", UInt64(change.consecutiveFailures))
        if let error = change.error { json.field("error", error) }
        if let retryAt = change.retryAt { json.field("retry_at", retryAt) }
        return json.finish()
    }

    /// `{"topic":"rejected","path":…,"status":…,"code":…,"reason":…,"uid":…,"at":…}`: a request
    /// an ingest path refused as a whole (`uid` only when known).
    static func refusal(path: String, status: Int, code: String, reason: String, uid: UInt32?, at: UInt64) -> [UInt8] {
        var json = JSONWriter()
        json.field("topic", BusTopic.rejected.rawValue)
        json.field("path", path)
        json.field("status", UInt64(status))
        json.field("code", code)
        json.field("reason", reason)
        if let uid { json.field("uid", UInt64(uid)) }
        json.field("at", at)
        return json.finish()
    }

    /// `{"at":…,"change":…,"new":…,"old":…,"seq":…,"topic":"consent"}` (keys sorted, as earlier
    /// versions wrote them).
    static func consent(change: String, old: String, new: String, at: Int, seq: Int) -> [UInt8] {
        ConsentWorker.jsonBytes(["topic": "consent", "change": change, "old": old, "new": new, "at": at, "seq": seq])
    }

    /// `{"at":…,"held":…,"queued":…,"reason":…,"topic":"purged","total":…}` (keys sorted), with
    /// `"quarantined":…` when the change deleted quarantined events.
    static func purged(queued: Int, held: Int, quarantined: Int, total: Int, reason: String, at: Int) -> [UInt8] {
        var object: [String: Any] = ["topic": "purged", "queued": queued, "held": held, "total": total, "reason": reason, "at": at]
        if quarantined != 0 { object["quarantined"] = quarantined }
        return ConsentWorker.jsonBytes(object)
    }
}
