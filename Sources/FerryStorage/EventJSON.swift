import FerryProtocol
import Foundation

// A stored event as JSON: the file sink's line, the HTTP sink's envelope object, the event-model
// fields, the compacting of properties. The writer itself is JSONWriter.swift.

extension JSONWriter {
    /// The JSON object of a stored event, one line (no raw newline), shared by the file sink's
    /// lines and the HTTP sink's `envelope` body: id, type, name, source, pid, seq, timestamp,
    /// accepted_at, category when not 0, user_id/once_key when set, local_only when set,
    /// properties (as sent; a body that is not a JSON object is kept as a string under
    /// `properties_raw`), the event-model fields anonymous_id/group_id/previous_id/context when
    /// set (``eventModelFields(_:)``) and origin (the sender as the kernel told the agent, or
    /// `null`). An undecodable frame gives `{"id":…,"undecodable":true}`. `disclosure` leaves out
    /// `pid`, `seq` and `session` (``Disclosure/process``), `origin` (``Disclosure/origin``) and
    /// the listed `context` keys (``Disclosure/dropContext``).
    package static func storedEventObject(_ stored: StoredEvent, consent: [UInt8]? = nil, disclosure: Disclosure = .all) -> [UInt8] {
        var json = JSONWriter()
        json.storedEventMembers(stored, consent: consent, disclosure: disclosure)
        return json.finish()
    }

    /// The members of ``storedEventObject(_:consent:)``, written into this object straight from
    /// the stored frame: the header is validated as ``StoredEvent/decoded()`` validates it (so
    /// the same frames are undecodable), but no `WireEvent`, `String` or array is made per field.
    package mutating func storedEventMembers(_ stored: StoredEvent, consent: [UInt8]? = nil, disclosure: Disclosure = .all) {
        guard let header = try? EventHeader(stored.frame, checkingFields: false) else {
            field("id", stored.decodedID)
            field("undecodable", true)
            return
        }
        stored.frame.withUnsafeBytes { frame in
            var offset = WireEvent.fixedHeaderSize
            func next(_ length: Int) -> UnsafeRawBufferPointer {
                defer { offset += length }
                return UnsafeRawBufferPointer(rebasing: frame[offset..<(offset + length)])
            }
            // The header checked that these are valid UTF-8.
            let source = next(header.sourceLength), name = next(header.nameLength), user = next(header.userIDLength)
            let once = next(header.onceKeyLength), properties = next(header.propertiesLength)
            field("id", header.id)
            key("type")
            appendRaw(Self.quotedName(header.type))
            textField("name", name)
            textField("source", source)
            if disclosure.process {
                field("pid", UInt64(header.pid))
                field("seq", header.sequence)
            }
            field("timestamp", header.timestamp)
            if disclosure.process, let session = header.session { field("session", session) }
            field("accepted_at", stored.acceptedAt)
            if header.category != 0 { field("category", UInt64(header.category)) }
            if !user.isEmpty { textField("user_id", user) }
            if !once.isEmpty { textField("once_key", once) }
            if header.flags.contains(.localOnly) { field("local_only", true) }
            if properties.isEmpty {
                key("properties")
                appendRaw("{}")
            } else {
                objectField("properties", properties, rawName: "properties_raw")
            }
            // The event-model extensions, as ``eventModelFields(_:)`` writes them.
            var anonymousID = UnsafeRawBufferPointer(start: nil, count: 0), groupID = anonymousID
            var previousID = anonymousID, context = anonymousID, messageID = anonymousID
            offset = header.extensionsOffset
            while frame.count - offset >= EventExtension.entryHeaderSize {
                let tag = EventExtension.Tag(rawValue: frame.loadLE(at: offset, as: UInt16.self))
                let length = Int(frame.loadLE(at: offset + 2, as: UInt32.self))
                offset += EventExtension.entryHeaderSize
                guard length <= frame.count - offset else { break }
                let value = next(length)
                switch tag {
                case .anonymousID: anonymousID = value
                case .groupID: groupID = value
                case .previousID: previousID = value
                case .context: context = value
                case .messageID: messageID = value
                default: break
                }
            }
            if !anonymousID.isEmpty { field("anonymous_id", decoding: anonymousID) }
            if !groupID.isEmpty { field("group_id", decoding: groupID) }
            if !previousID.isEmpty { field("previous_id", decoding: previousID) }
            if !context.isEmpty {
                if disclosure.dropContext.isEmpty {
                    objectField("context", context, rawName: "context_raw")
                } else {
                    let kept = disclosure.filteredContext(Array(context))
                    kept.withUnsafeBytes { objectField("context", $0, rawName: "context_raw") }
                }
            }
            if !messageID.isEmpty { field("message_id", decoding: messageID) }
        }
        // The sender as the kernel told the agent; `null` for events stored before origins were
        // recorded and for those the agent made itself; absent when not disclosed.
        if disclosure.origin { originField(stored.metadata) }
        if let consent { rawField("consent", consent) }
    }

    /// `"track"` and so on: the JSON string of ``EventType/description``, written as it is.
    static func quotedName(_ type: EventType) -> StaticString {
        switch type {
        case .track: #""track""#
        case .screen: #""screen""#
        case .identify: #""identify""#
        case .group: #""group""#
        case .alias: #""alias""#
        case .page: #""page""#
        }
    }

    /// A string field from valid UTF-8.
    private mutating func textField(_ name: StaticString, _ utf8: UnsafeRawBufferPointer) {
        key(name)
        JSONText.appendString(utf8: utf8, to: &bytes)
    }

    /// A string field whose value is `value` read as `String(decoding:as:)` reads it.
    private mutating func field(_ name: StaticString, decoding value: UnsafeRawBufferPointer) {
        key(name)
        JSONText.appendString(decoding: value, to: &bytes)
    }

    /// ``objectField(_:_:rawName:)`` for bytes in place. A plain object (the common case) is
    /// checked in one pass that also tells whether it holds a raw newline (only ever whitespace
    /// there), so it is copied whole and compacted only then; anything else is left to
    /// Foundation's parser as before.
    private mutating func objectField(_ name: StaticString, _ json: UnsafeRawBufferPointer, rawName: StaticString) {
        var newlines = false
        if JSONValidation.isPlainObject(json, newlines: &newlines) {
            key(name)
            let start = bytes.count
            bytes.append(contentsOf: json)
            if newlines { Self.compactInPlace(&bytes, from: start) }
        } else if Self.foundationIsObject(Data(json)) {
            key(name)
            let start = bytes.count
            bytes.append(contentsOf: json)
            Self.compactInPlace(&bytes, from: start)
        } else {
            field(rawName, decoding: json)
        }
    }

    /// `name` and an array of ``storedEventObject(_:consent:)`` of each of `events`, written in
    /// place (no array per event).
    package mutating func storedEventsField(_ name: StaticString, _ events: [StoredEvent], disclosure: Disclosure = .all) {
        key(name)
        bytes.append(UInt8(ascii: "["))
        for (index, stored) in events.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            var object = JSONWriter(appendingTo: &bytes)
            object.storedEventMembers(stored, disclosure: disclosure)
            object.finish(into: &bytes)
        }
        bytes.append(UInt8(ascii: "]"))
    }

    /// `"origin":` and the object of ``originObject(_:)`` for the origin recorded in `metadata`
    /// (`null` when it has none), read from the metadata's bytes in place, in one pass.
    package mutating func originField(_ metadata: RecordMetadata) {
        key("origin")
        metadata.encoded.withUnsafeBytes { raw in
            // The first field of each origin tag, as ``RecordMetadata/subscript(_:)`` finds it.
            let none = UnsafeRawBufferPointer(start: nil, count: 0)
            var values = (none, none, none, none, none, none)
            var found: (Bool, Bool, Bool, Bool, Bool, Bool) = (false, false, false, false, false, false)
            var any = false
            var offset = 0
            while raw.count - offset >= 3 {
                let length = Int(raw.loadUnaligned(fromByteOffset: offset + 1, as: UInt16.self).littleEndian)
                let value = UnsafeRawBufferPointer(rebasing: raw[(offset + 3)..<(offset + 3 + length)])
                switch raw[offset] {
                case EventOrigin.Tag.uid: if !found.0 { (values.0, found.0) = (value, true) }
                case EventOrigin.Tag.gid: if !found.1 { (values.1, found.1) = (value, true) }
                case EventOrigin.Tag.pid: if !found.2 { (values.2, found.2) = (value, true) }
                case EventOrigin.Tag.comm: if !found.3 { (values.3, found.3) = (value, true) }
                case EventOrigin.Tag.exe: if !found.4 { (values.4, found.4) = (value, true) }
                case EventOrigin.Tag.unit: if !found.5 { (values.5, found.5) = (value, true) }
                default: break
                }
                any = any || (EventOrigin.Tag.uid...EventOrigin.Tag.unit).contains(raw[offset])
                offset += 3 + length
            }
            guard any else {
                appendRaw("null")
                return
            }
            func number(_ name: StaticString, _ found: Bool, _ value: UnsafeRawBufferPointer, _ json: inout JSONWriter) {
                if found, value.count == 4 {
                    json.field(name, UInt64(value.loadUnaligned(as: UInt32.self).littleEndian))
                } else {
                    json.key(name)
                    json.appendRaw("null")
                }
            }
            func text(_ name: StaticString, _ found: Bool, _ value: UnsafeRawBufferPointer, _ json: inout JSONWriter) {
                if found {
                    json.field(name, decoding: value)
                } else {
                    json.key(name)
                    json.appendRaw("null")
                }
            }
            var inner = JSONWriter(appendingTo: &bytes)
            number("uid", found.0, values.0, &inner)
            number("gid", found.1, values.1, &inner)
            number("pid", found.2, values.2, &inner)
            text("comm", found.3, values.3, &inner)
            text("exe", found.4, values.4, &inner)
            text("unit", found.5, values.5, &inner)
            inner.finish(into: &bytes)
        }
    }

    /// Whether `bytes` parse as a JSON object: plain objects (``JSONValidation/isPlainObject(_:)``, no
    /// allocation) are told at once, anything else by Foundation's parser.
    package static func isJSONObject(_ bytes: [UInt8]) -> Bool {
        if bytes.withUnsafeBytes({ JSONValidation.isPlainObject($0) }) { return true }
        return foundationIsObject(Data(bytes))
    }

    private static func foundationIsObject(_ data: Data) -> Bool {
        (try? JSONSerialization.jsonObject(with: data)) is [String: Any]
    }

    /// Appends ``compactJSON(_:)`` of `bytes` to `out`.
    package static func appendCompactJSON(_ bytes: [UInt8], to out: inout [UInt8]) {
        let start = out.count
        out += bytes
        compactInPlace(&out, from: start)
    }

    /// Turns the raw newlines of `out[start...]` into spaces (``compactJSON(_:)``).
    private static func compactInPlace(_ out: inout [UInt8], from start: Int) {
        for index in start..<out.count where out[index] == UInt8(ascii: "\n") || out[index] == UInt8(ascii: "\r") {
            out[index] = UInt8(ascii: " ")
        }
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
        var json = JSONWriter(appendingTo: &out)
        json.storedEventMembers(stored, consent: consent)
        json.finish(into: &out)
        out.append(UInt8(ascii: "\n"))
    }
}
