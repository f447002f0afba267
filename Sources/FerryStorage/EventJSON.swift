import FerryProtocol
import Foundation

/// A minimal JSON object writer with correct string escaping.
package struct JSONWriter {
    /// An empty object.
    package init() {}

    package private(set) var bytes: [UInt8] = [UInt8(ascii: "{")]
    private var first = true

    private mutating func key(_ name: String) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        JSONText.appendString(name, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    /// Adds a string field.
    package mutating func field(_ name: String, _ value: String) {
        key(name)
        JSONText.appendString(value, to: &bytes)
    }

    /// Adds an unsigned integer field.
    package mutating func field(_ name: String, _ value: UInt64) {
        key(name)
        bytes += Array(String(value).utf8)
    }

    /// Adds a boolean field.
    package mutating func field(_ name: String, _ value: Bool) {
        key(name)
        bytes += Array((value ? "true" : "false").utf8)
    }

    /// The identifying fields every event object carries, on the bus and in the file sink.
    package mutating func eventFields(_ event: WireEvent) {
        field("id", event.id.description)
        field("type", event.type.description)
        field("name", event.name)
        field("source", event.source)
        field("pid", UInt64(event.pid))
        field("seq", event.sequence)
        field("timestamp", event.timestamp)
        if let session = event.session { field("session", session.description) }
    }

    /// The protocol 2 event-model fields, each only when set: `anonymous_id`, `group_id`,
    /// `previous_id` (strings) and `context` (the object as sent, on one line). The agent checks
    /// the context at ingest; one that is not a JSON object anyway (stored by an agent that did
    /// not know the field) is kept as a string under `context_raw`.
    package mutating func eventModelFields(_ event: WireEvent) {
        if !event.anonymousID.isEmpty { field("anonymous_id", event.anonymousID) }
        if !event.groupID.isEmpty { field("group_id", event.groupID) }
        if !event.previousID.isEmpty { field("previous_id", event.previousID) }
        if !event.context.isEmpty {
            if Self.isJSONObject(event.context) {
                rawField("context", Self.compactJSON(event.context))
            } else {
                field("context_raw", String(decoding: event.context, as: UTF8.self))
            }
        }
    }

    /// Inserts `json` verbatim; the caller guarantees it is a valid JSON value.
    package mutating func rawField(_ name: String, _ json: [UInt8]) {
        key(name)
        bytes += json
    }

    /// Closes the object and returns its bytes.
    package mutating func finish() -> [UInt8] {
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }

}

extension JSONWriter {
    /// The JSON object of a stored event, one line (no raw newline), shared by the file sink's
    /// lines and the HTTP sink's `envelope` body: id, type, name, source, pid, seq, timestamp,
    /// accepted_at, category when not 0, user_id/once_key when set, local_only when set,
    /// properties (as sent; a body that is not a JSON object is kept as a string under
    /// `properties_raw`), the event-model fields anonymous_id/group_id/previous_id/context when
    /// set (``eventModelFields(_:)``) and origin (the sender as the kernel told the agent, or
    /// `null`). An undecodable frame gives `{"id":…,"undecodable":true}`.
    package static func storedEventObject(_ stored: StoredEvent, consent: [UInt8]? = nil) -> [UInt8] {
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
        json.eventModelFields(event)
        // The sender as the kernel told the agent; `null` for events stored before origins were
        // recorded and for those the agent made itself.
        json.rawField("origin", EventOrigin(metadata: stored.metadata).map(originObject) ?? Array("null".utf8))
        if let consent { json.rawField("consent", consent) }
        return json.finish()
    }

    /// Whether `bytes` parse as a JSON object.
    package static func isJSONObject(_ bytes: [UInt8]) -> Bool {
        (try? JSONSerialization.jsonObject(with: Data(bytes))) is [String: Any]
    }

    /// The properties without raw newlines, so one event stays on one line.
    package static func compactJSON(_ bytes: [UInt8]) -> [UInt8] {
        guard bytes.contains(UInt8(ascii: "\n")) || bytes.contains(UInt8(ascii: "\r")) else { return bytes }
        // Newlines can only occur as whitespace in valid JSON (inside strings they are escaped).
        return bytes.map { $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") ? UInt8(ascii: " ") : $0 }
    }
}

extension JSONWriter {
    /// Appends one JSON Lines line for `stored` (``storedEventObject(_:consent:)`` and a newline):
    /// the file sink's line format, also used for the events of a dead letter.
    package static func appendLine(for stored: StoredEvent, consent: [UInt8]? = nil, to out: inout [UInt8]) {
        out += storedEventObject(stored, consent: consent)
        out.append(UInt8(ascii: "\n"))
    }
}
