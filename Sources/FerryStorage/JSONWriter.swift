import FerryProtocol

/// A minimal JSON object writer with correct string escaping: fields appended in order, nested
/// objects and raw JSON values spliced in. Every JSON the agent writes (the file sink's lines, the
/// HTTP bodies, bus messages, dead letters) goes through it; EventJSON.swift has the stored
/// event's object.
package struct JSONWriter {
    /// An empty object.
    package init() {}

    /// The object written so far (``finish()`` closes it). Internal setter, `key` and `appendRaw`:
    /// the stored event's object (EventJSON.swift) writes through them.
    package internal(set) var bytes: [UInt8] = [UInt8(ascii: "{")]
    /// Whether no field is written yet (no comma before the next key); the stored event's
    /// members (EventJSON.swift) hand it to ``JSONOutput``.
    var first = true

    /// An object written at the end of `out` (taken over without a copy; ``finish(into:)`` hands
    /// it back): one growing buffer for a whole batch instead of an array per event.
    package init(appendingTo out: inout [UInt8]) {
        bytes = []
        swap(&bytes, &out)
        bytes.append(UInt8(ascii: "{"))
    }

    /// Closes the object and hands the buffer back to `out` (see ``init(appendingTo:)``).
    package mutating func finish(into out: inout [UInt8]) {
        bytes.append(UInt8(ascii: "}"))
        swap(&bytes, &out)
    }

    /// Writes the separator and `"name":` of the next field. Field names are the agent's own
    /// literals, none needing an escape (checked in debug builds): their bytes are copied as they
    /// are, not escaped anew for every event.
    mutating func key(_ name: StaticString) {
        assert(Self.needsNoEscape(name), "field name \(name) needs escaping")
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
    }

    /// Writes the separator and `"name":` of a field whose name is not a literal (escaped).
    mutating func key(named name: String) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        JSONText.appendString(name, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    private static func needsNoEscape(_ name: StaticString) -> Bool {
        UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount).allSatisfy {
            $0 >= 0x20 && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\")
        }
    }

    /// Adds a string field named by a string that is not a literal (a consent stamp's key).
    package mutating func field(named name: String, _ value: String) {
        key(named: name)
        JSONText.appendString(value, to: &bytes)
    }

    /// Adds an unsigned integer field named by a string that is not a literal.
    package mutating func field(named name: String, _ value: UInt64) {
        key(named: name)
        JSONText.appendInteger(value, to: &bytes)
    }

    /// Adds a string field.
    package mutating func field(_ name: StaticString, _ value: String) {
        key(name)
        JSONText.appendString(value, to: &bytes)
    }

    /// Adds an unsigned integer field.
    package mutating func field(_ name: StaticString, _ value: UInt64) {
        key(name)
        JSONText.appendInteger(value, to: &bytes)
    }

    /// Adds a boolean field.
    package mutating func field(_ name: StaticString, _ value: Bool) {
        key(name)
        appendRaw(value ? "true" : "false")
    }

    /// Adds an event id field (its canonical text).
    package mutating func field(_ name: StaticString, _ value: EventID) {
        key(name)
        bytes.append(UInt8(ascii: "\""))
        value.appendText(to: &bytes)
        bytes.append(UInt8(ascii: "\""))
    }

    /// Adds a string field whose value is the UTF-8 in `value`, read as `String(decoding:as:)`
    /// reads it.
    package mutating func field(_ name: StaticString, decoding value: [UInt8]) {
        key(name)
        value.withUnsafeBytes { JSONText.appendString(decoding: $0, to: &bytes) }
    }

    /// Appends `text` as it is (a JSON literal or punctuation).
    mutating func appendRaw(_ text: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// The identifying fields every event object carries, on the bus and in the file sink.
    package mutating func eventFields(_ event: WireEvent) {
        field("id", event.id)
        field("type", event.type.description)
        field("name", event.name)
        field("source", event.source)
        // Left out when not known: pid 0 (no process has it: a TCP sender of the HTTP API) and
        // seq 0 (no client sequence: events of the HTTP API; clients number theirs from 1).
        if event.pid != 0 { field("pid", UInt64(event.pid)) }
        if event.sequence != 0 { field("seq", event.sequence) }
        field("timestamp", event.timestamp)
        if let session = event.session { field("session", session) }
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
            objectField("context", event.context, rawName: "context_raw")
        }
    }

    /// Inserts `json` verbatim; the caller guarantees it is a valid JSON value.
    package mutating func rawField(_ name: StaticString, _ json: [UInt8]) {
        key(name)
        bytes += json
    }

    /// The properties, or another JSON object sent by a client, under `name` (newlines made
    /// spaces, ``compactJSON(_:)``); a body that is not a JSON object as a string under `rawName`.
    package mutating func objectField(_ name: StaticString, _ json: [UInt8], rawName: StaticString) {
        if Self.isJSONObject(json) {
            key(name)
            Self.appendCompactJSON(json, to: &bytes)
        } else {
            field(rawName, decoding: json)
        }
    }

    /// Adds a field whose JSON value `write` appends to the object's bytes; the caller
    /// guarantees it appends exactly one valid JSON value.
    package mutating func rawField(_ name: StaticString, _ write: (inout [UInt8]) -> Void) {
        key(name)
        write(&bytes)
    }

    /// Adds an object field whose members `members` writes, in place (no array of its own).
    package mutating func objectField(_ name: StaticString, members: (inout JSONWriter) -> Void) {
        key(name)
        var inner = JSONWriter(appendingTo: &bytes)
        members(&inner)
        inner.finish(into: &bytes)
    }

    /// Adds `json`, a JSON object, under `name` with its raw newlines made spaces
    /// (``compactJSON(_:)``), copied in place.
    package mutating func compactObjectField(_ name: StaticString, _ json: [UInt8]) {
        key(name)
        Self.appendCompactJSON(json, to: &bytes)
    }

    /// Closes the object and returns its bytes.
    package mutating func finish() -> [UInt8] {
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }

}
