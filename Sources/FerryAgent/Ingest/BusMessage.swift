import FerryProtocol
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
}

/// Builds the JSON objects published on the bus. Hand-written so that publishing an event costs
/// one small buffer and no Foundation round trip.
enum BusMessage {
    static func event(
        topic: BusTopic, frame: [UInt8], at: UInt64, reason: String? = nil, sink: String? = nil
    ) -> [UInt8]? {
        guard let event = try? WireEvent(decoding: frame) else {
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
        return json.finish()
    }
}

extension BusMessage {
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
}

/// A minimal JSON object writer with correct string escaping.
struct JSONWriter {
    private(set) var bytes: [UInt8] = [UInt8(ascii: "{")]
    private var first = true

    private mutating func key(_ name: String) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        JSONText.appendString(name, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    mutating func field(_ name: String, _ value: String) {
        key(name)
        JSONText.appendString(value, to: &bytes)
    }

    mutating func field(_ name: String, _ value: UInt64) {
        key(name)
        bytes += Array(String(value).utf8)
    }

    mutating func field(_ name: String, _ value: Bool) {
        key(name)
        bytes += Array((value ? "true" : "false").utf8)
    }

    /// The identifying fields every event object carries, on the bus and in the file sink.
    mutating func eventFields(_ event: WireEvent) {
        field("id", event.id.description)
        field("type", event.type.description)
        field("name", event.name)
        field("source", event.source)
        field("pid", UInt64(event.pid))
        field("seq", event.sequence)
        field("timestamp", event.timestamp)
    }

    /// Inserts `json` verbatim; the caller guarantees it is a valid JSON value.
    mutating func rawField(_ name: String, _ json: [UInt8]) {
        key(name)
        bytes += json
    }

    mutating func finish() -> [UInt8] {
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }

}

extension JSONWriter {
    /// The JSON object of a stored event, one line (no raw newline), shared by the file sink's
    /// lines and the HTTP sink's `envelope` body: id, type, name, source, pid, seq, timestamp,
    /// accepted_at, category when not 0, user_id/once_key when set, local_only when set, and
    /// properties (as sent; a body that is not a JSON object is kept as a string under
    /// `properties_raw`). An undecodable frame gives `{"id":…,"undecodable":true}`.
    static func storedEventObject(_ stored: StoredEvent, consent: [UInt8]? = nil) -> [UInt8] {
        guard let event = try? stored.decoded() else {
            var json = JSONWriter()
            json.field("id", stored.decodedID.description)
            json.field("undecodable", true)
            return json.finish()
        }
        var json = JSONWriter()
        json.eventFields(event)
        json.field("accepted_at", stored.acceptedAt)
        if event.category != 0 { json.field("category", UInt64(event.category)) }
        if !event.userID.isEmpty { json.field("user_id", event.userID) }
        if !event.onceKey.isEmpty { json.field("once_key", event.onceKey) }
        if event.flags.contains(.localOnly) { json.field("local_only", true) }
        if event.properties.isEmpty {
            json.rawField("properties", Array("{}".utf8))
        } else if isJSONObject(event.properties) {
            json.rawField("properties", compactJSON(event.properties))
        } else {
            json.field("properties_raw", String(decoding: event.properties, as: UTF8.self))
        }
        if let consent { json.rawField("consent", consent) }
        return json.finish()
    }

    static func isJSONObject(_ bytes: [UInt8]) -> Bool {
        (try? JSONSerialization.jsonObject(with: Data(bytes))) is [String: Any]
    }

    /// The properties without raw newlines, so one event stays on one line.
    static func compactJSON(_ bytes: [UInt8]) -> [UInt8] {
        guard bytes.contains(UInt8(ascii: "\n")) || bytes.contains(UInt8(ascii: "\r")) else { return bytes }
        // Newlines can only occur as whitespace in valid JSON (inside strings they are escaped).
        return bytes.map { $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") ? UInt8(ascii: " ") : $0 }
    }
}
