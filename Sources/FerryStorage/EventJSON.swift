import FerryProtocol
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

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
        var memo: OriginMemo?
        Self.append(stored, consent: consent, disclosure: disclosure, framing: .members, memo: &memo, to: &bytes, first: &first)
    }

    /// The origin object last written and the metadata it was written from. The events of a
    /// batch mostly come from one sender, whose origin is then copied, not written anew.
    struct OriginMemo {
        var metadata: [UInt8] = []
        var json: [UInt8] = []
    }

    /// What ``append(_:consent:disclosure:framing:memo:to:first:)`` writes around the members.
    enum Framing {
        /// The members only, into an object already open.
        case members
        /// The object: `{`, the members, `}`.
        case object
        /// A whole line: `{`, `"line_format":N` first when `lineFormat` is set, the members,
        /// `}` and a newline.
        case line(lineFormat: UInt64?)
    }

    /// The members of ``storedEventObject(_:consent:)`` (or its whole line, `framing`) appended
    /// to `out` in one reserved run of bytes; `first` is the open object's state. `memo`, when
    /// set, keeps the last origin written for the next event of the same batch. Returns the
    /// event's header, `nil` for an undecodable frame.
    @discardableResult
    static func append(_ stored: StoredEvent, consent: [UInt8]?, disclosure: Disclosure, framing: Framing,
                       memo: inout OriginMemo?, to out: inout [UInt8], first: inout Bool) -> EventHeader? {
        func open(_ json: inout JSONOutput) {
            switch framing {
            case .members: return
            case .object: json.byte(UInt8(ascii: "{"))
            case .line: json.byte(UInt8(ascii: "{"))
            }
            json.first = true
            if case .line(let lineFormat?) = framing {
                json.key("line_format")
                json.integer(lineFormat)
            }
        }
        func close(_ json: inout JSONOutput) {
            switch framing {
            case .members: return
            case .object: json.byte(UInt8(ascii: "}"))
            case .line:
                json.byte(UInt8(ascii: "}"))
                json.byte(UInt8(ascii: "\n"))
            }
            json.first = false
        }
        guard let header = try? EventHeader(stored.frame, checkingFields: false) else {
            JSONOutput.write(into: &out, maxCount: fixedMembersBound, first: &first) { json in
                open(&json)
                json.key("id")
                json.quoted(stored.decodedID)
                json.key("undecodable")
                json.raw("true")
                close(&json)
            }
            return nil
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
            let keptContext = context.isEmpty || disclosure.dropContext.isEmpty ? nil : disclosure.filteredContext(Array(context))
            // Every string is at most six bytes per byte read (`\u00XX`), every other value at
            // most its bytes; keys, numbers and ids fit in the fixed part.
            let bound = 6 * (frame.count + stored.metadata.encoded.count + (keptContext?.count ?? 0))
                + (consent?.count ?? 0) + Self.fixedMembersBound
            JSONOutput.write(into: &out, maxCount: bound, first: &first) { json in
                open(&json)
                json.key("id")
                json.quoted(header.id)
                json.key("type")
                json.raw(Self.quotedName(header.type))
                json.key("name")
                json.string(utf8: name)
                json.key("source")
                json.string(utf8: source)
                // Left out when not known: pid 0 (a TCP sender of the HTTP API), seq 0 (no
                // client sequence: events of the HTTP API; clients number theirs from 1).
                if disclosure.process && header.pid != 0 {
                    json.key("pid")
                    json.integer(UInt64(header.pid))
                }
                if disclosure.process && header.sequence != 0 {
                    json.key("seq")
                    json.integer(header.sequence)
                }
                json.key("timestamp")
                json.integer(header.timestamp)
                if disclosure.process, let session = header.session {
                    json.key("session")
                    json.quoted(session)
                }
                json.key("accepted_at")
                json.integer(stored.acceptedAt)
                if header.category != 0 {
                    json.key("category")
                    json.integer(UInt64(header.category))
                }
                if !user.isEmpty {
                    json.key("user_id")
                    json.string(utf8: user)
                }
                if !once.isEmpty {
                    json.key("once_key")
                    json.string(utf8: once)
                }
                if header.flags.contains(.localOnly) {
                    json.key("local_only")
                    json.raw("true")
                }
                if properties.isEmpty {
                    json.key("properties")
                    json.raw("{}")
                } else {
                    Self.objectField("properties", properties, rawName: "properties_raw", &json)
                }
                Self.decodingField("anonymous_id", anonymousID, &json)
                Self.decodingField("group_id", groupID, &json)
                Self.decodingField("previous_id", previousID, &json)
                if let keptContext {
                    keptContext.withUnsafeBytes { Self.objectField("context", $0, rawName: "context_raw", &json) }
                } else if !context.isEmpty {
                    Self.objectField("context", context, rawName: "context_raw", &json)
                }
                Self.decodingField("message_id", messageID, &json)
                // The sender as the kernel told the agent; `null` for events stored before
                // origins were recorded and for those the agent made itself; absent when not
                // disclosed.
                if disclosure.origin { Self.originField(stored.metadata, memo: &memo, &json) }
                if let consent {
                    json.key("consent")
                    consent.withUnsafeBytes { json.raw($0) }
                }
                close(&json)
            }
        }
        return header
    }

    /// More than the keys, numbers, ids and literals of one stored event's members take (about
    /// 700 bytes at most), for the bound of ``storedEventMembers(_:consent:disclosure:)``.
    private static let fixedMembersBound = 1024

    /// A string field, when `value` is not empty, read as `String(decoding:as:)` reads it.
    private static func decodingField(_ name: StaticString, _ value: UnsafeRawBufferPointer, _ json: inout JSONOutput) {
        guard !value.isEmpty else { return }
        json.key(name)
        json.string(decoding: value)
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

    /// ``objectField(_:_:rawName:)`` for bytes in place. An object (``JSONTape/isObject(_:newlines:)``,
    /// which also tells whether it holds a raw newline, only ever whitespace there) is copied
    /// whole and compacted only then; anything else is written as a string under `rawName`.
    private static func objectField(_ name: StaticString, _ object: UnsafeRawBufferPointer, rawName: StaticString, _ json: inout JSONOutput) {
        var newlines = false
        if JSONTape.isObject(object, newlines: &newlines) {
            json.key(name)
            let start = json.count
            json.raw(object)
            if newlines { json.compact(from: start) }
        } else {
            json.key(rawName)
            json.string(decoding: object)
        }
    }

    /// `name` and an array of ``storedEventObject(_:consent:)`` of each of `events`, written in
    /// place (no array per event).
    package mutating func storedEventsField(_ name: StaticString, _ events: [StoredEvent], disclosure: Disclosure = .all) {
        key(name)
        bytes.append(UInt8(ascii: "["))
        var memo: OriginMemo? = OriginMemo()
        for (index, stored) in events.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            var object = true
            Self.append(stored, consent: nil, disclosure: disclosure, framing: .object, memo: &memo, to: &bytes, first: &object)
        }
        bytes.append(UInt8(ascii: "]"))
    }

    /// `"origin":` and the object of ``originObject(_:)`` for the origin recorded in `metadata`
    /// (`null` when it has none), read from the metadata's bytes in place, in one pass.
    package mutating func originField(_ metadata: RecordMetadata) {
        var memo: OriginMemo?
        JSONOutput.write(into: &bytes, maxCount: 6 * metadata.encoded.count + Self.fixedMembersBound, first: &first) {
            Self.originField(metadata, memo: &memo, &$0)
        }
    }

    /// ``originField(_:)`` into `json`, which has room for six bytes per byte of `metadata` and
    /// a few hundred more; copied from `memo` when it was written from the same metadata, and
    /// kept there otherwise.
    private static func originField(_ metadata: RecordMetadata, memo: inout OriginMemo?, _ json: inout JSONOutput) {
        json.key("origin")
        if let known = memo, !known.json.isEmpty, Self.sameBytes(known.metadata, metadata.encoded) {
            known.json.withUnsafeBytes { json.raw($0) }
            return
        }
        let start = json.count
        originObject(metadata, &json)
        if memo != nil {
            memo = OriginMemo(metadata: metadata.encoded, json: Array(json.written(from: start)))
        }
    }

    private static func sameBytes(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        a.count == b.count && a.withUnsafeBytes { a in
            b.withUnsafeBytes { b in a.isEmpty || memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0 }
        }
    }

    /// The origin object (or `null`) of ``originField(_:)``.
    private static func originObject(_ metadata: RecordMetadata, _ json: inout JSONOutput) {
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
                json.raw("null")
                return
            }
            func number(_ name: StaticString, _ found: Bool, _ value: UnsafeRawBufferPointer) {
                json.key(name)
                if found, value.count == 4 {
                    json.integer(UInt64(value.loadUnaligned(as: UInt32.self).littleEndian))
                } else {
                    json.raw("null")
                }
            }
            func text(_ name: StaticString, _ found: Bool, _ value: UnsafeRawBufferPointer) {
                json.key(name)
                if found {
                    json.string(decoding: value)
                } else {
                    json.raw("null")
                }
            }
            json.byte(UInt8(ascii: "{"))
            json.first = true
            number("uid", found.0, values.0)
            number("gid", found.1, values.1)
            number("pid", found.2, values.2)
            text("comm", found.3, values.3)
            text("exe", found.4, values.4)
            text("unit", found.5, values.5)
            json.byte(UInt8(ascii: "}"))
            json.first = false
        }
    }

    /// Whether `bytes` parse as a JSON object (``JSONTape/isObject(_:)``).
    package static func isJSONObject(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { JSONTape.isObject($0) }
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
        appendLine(for: stored, consent: consent, lineFormat: nil, disclosure: .all, to: &out)
    }

    /// ``appendLine(for:consent:to:)`` starting with `"line_format":N` when `lineFormat` is set
    /// (the file sink's lines), leaving out what `disclosure` withholds.
    package static func appendLine(for stored: StoredEvent, consent: [UInt8]?, lineFormat: UInt64?, disclosure: Disclosure,
                                   to out: inout [UInt8]) {
        var first = true
        var memo: OriginMemo?
        append(stored, consent: consent, disclosure: disclosure, framing: .line(lineFormat: lineFormat), memo: &memo,
               to: &out, first: &first)
    }

    /// ``appendLine(for:consent:lineFormat:disclosure:to:)`` of each of `events`, in order,
    /// calling `written` after each line with the event's header (`nil` for an undecodable
    /// frame, as written) and the count of `out` (the line's newline included): the lines of one
    /// buffer that a sink sends in pieces (the JetStream sink's messages), without an array per
    /// event or a second read of the header. The origin written for one event is copied for the
    /// next of the same sender.
    package static func appendLines(for events: ArraySlice<StoredEvent>, consent: [UInt8]?, lineFormat: UInt64?,
                                    disclosure: Disclosure, to out: inout [UInt8],
                                    written: (_ header: EventHeader?, _ end: Int) -> Void) {
        var first = true
        var memo: OriginMemo? = OriginMemo()
        for stored in events {
            let header = append(stored, consent: consent, disclosure: disclosure, framing: .line(lineFormat: lineFormat),
                                memo: &memo, to: &out, first: &first)
            written(header, out.count)
        }
    }

    /// ``appendLine(for:consent:lineFormat:disclosure:to:)`` of each of `events`, in order.
    package static func appendLines(for events: [StoredEvent], consent: [UInt8]?, lineFormat: UInt64?, disclosure: Disclosure,
                                    to out: inout [UInt8]) {
        var first = true
        var memo: OriginMemo? = OriginMemo()
        for stored in events {
            append(stored, consent: consent, disclosure: disclosure, framing: .line(lineFormat: lineFormat), memo: &memo,
                   to: &out, first: &first)
        }
    }
}
