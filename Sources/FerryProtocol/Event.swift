/// What kind of event it is, in the Segment/Contentful vocabulary.
public enum EventType: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    case track = 1
    case screen = 2
    case identify = 3
    case group = 4
    case alias = 5
    case page = 6

    /// The lower-case name used in JSON and on the command line.
    public var description: String {
        switch self {
        case .track: "track"
        case .screen: "screen"
        case .identify: "identify"
        case .group: "group"
        case .alias: "alias"
        case .page: "page"
        }
    }

    /// Parses the lower-case name.
    public init?(name: String) {
        guard let match = Self.allCases.first(where: { $0.description == name }) else { return nil }
        self = match
    }
}

/// Per-event flags in the fixed header.
public struct EventFlags: OptionSet, Hashable, Sendable {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    /// Record locally (ack, dedup, publish on the bus) but never deliver upstream.
    public static let localOnly = EventFlags(rawValue: 1 << 0)
    /// The frame ends with an extension block (protocol version 2; see ``EventExtension``).
    public static let extended = EventFlags(rawValue: 1 << 15)
    /// The bits this build assigns a meaning to.
    public static let known: EventFlags = [.localOnly, .extended]
}

/// An optional field of an event frame, in the extension block that follows the properties.
///
/// The block (present when the frame's ``EventFlags/extended`` flag is set, protocol version 2)
/// is a sequence of entries `tag:u16le length:u32le value[length]` filling the rest of the frame.
/// A tag with its top bit set is *critical*: a receiver that does not know it must refuse the
/// event (`unsupported_field`) rather than store it without understanding it. An unknown
/// non-critical tag is kept with the frame and ignored. Each tag appears at most once.
public struct EventExtension: Hashable, Sendable {
    /// The field's tag.
    public var tag: Tag
    /// The field's value.
    public var value: [UInt8]

    /// Creates a field.
    public init(tag: Tag, value: [UInt8]) {
        self.tag = tag
        self.value = value
    }

    /// Bytes before each value: tag and length.
    public static let entryHeaderSize = 6

    /// The most bytes of an identifier field (``Tag/anonymousID``, ``Tag/groupID``,
    /// ``Tag/previousID``); a longer one is refused with reason `invalid_field`.
    public static let maxIdentifierBytes = 1024

    /// An extension tag.
    public struct Tag: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
        public let rawValue: UInt16
        /// Creates a tag.
        public init(rawValue: UInt16) { self.rawValue = rawValue }
        /// A receiver that does not know this tag must refuse the event.
        public var isCritical: Bool { rawValue & 0x8000 != 0 }
        public static func < (lhs: Tag, rhs: Tag) -> Bool { lhs.rawValue < rhs.rawValue }

        /// 16 bytes: the client session this event belongs to. With it, (session, sequence)
        /// identifies the event for exactly-once intake across re-sends (see PROTOCOL.md).
        public static let session = Tag(rawValue: 0x0001)

        /// UTF-8 text, at most ``EventExtension/maxIdentifierBytes``: the id of a user not (yet)
        /// known by a user id (Segment's `anonymousId`). See ``WireEvent/anonymousID``.
        public static let anonymousID = Tag(rawValue: 0x0002)

        /// UTF-8 text, at most ``EventExtension/maxIdentifierBytes``: the group (account,
        /// organisation) a `group` event associates the user with (Segment's `groupId`).
        public static let groupID = Tag(rawValue: 0x0003)

        /// UTF-8 text, at most ``EventExtension/maxIdentifierBytes``: the user's former id, which
        /// an `alias` event links to the user id (Segment's `previousId`).
        public static let previousID = Tag(rawValue: 0x0004)

        /// A JSON object as UTF-8 text: facts about the event's circumstances (Segment's
        /// `context`: app, device, locale …). Bounded only by the event size limit.
        public static let context = Tag(rawValue: 0x0005)

        /// UTF-8 text of at most 100 characters: the id the sending application gave the event
        /// (Segment's `messageId`), kept for the sinks that send it upstream. Events of the local
        /// HTTP API carry it; their ``WireEvent/id`` is derived from it (docs/HTTP-INGEST.md).
        /// Not critical: an agent that does not know it stores and ignores it.
        public static let messageID = Tag(rawValue: 0x0006)

        /// The tags this build knows.
        public static let known: Set<Tag> = [.session, .anonymousID, .groupID, .previousID, .context, .messageID]

        /// The tags of the event-model fields ``WireEvent`` holds as properties of their own.
        static let eventModel: Set<Tag> = [.anonymousID, .groupID, .previousID, .context]

        public var description: String {
            switch self {
            case .session: "session"
            case .anonymousID: "anonymousId"
            case .groupID: "groupId"
            case .previousID: "previousId"
            case .context: "context"
            case .messageID: "messageId"
            default: "0x" + String(rawValue, radix: 16)
            }
        }
    }
}

/// One event as it travels on the wire and sits in the agent's log.
///
/// The fixed header carries everything the agent decides on (id, type, category, flags, sizes),
/// so the agent never parses the JSON ``properties`` on its hot path. See `docs/PROTOCOL.md`.
public struct WireEvent: Hashable, Sendable {
    /// Client-made UUIDv7; the dedup and idempotency key.
    public var id: EventID
    /// Client wall-clock time of the event, milliseconds since the Unix epoch.
    public var timestamp: UInt64
    /// Per-client sequence number, starting at 1; a gap proves loss.
    public var sequence: UInt64
    /// Process id of the emitting process.
    public var pid: UInt32
    /// The event type.
    public var type: EventType
    /// Consent category code; 0 means "derive from the type".
    public var category: UInt8
    /// Flags such as ``EventFlags/localOnly``. ``EventFlags/extended`` is managed by the encoder:
    /// it is set exactly when the frame carries a session or other extensions.
    public var flags: EventFlags
    /// The emitting client's source name (e.g. the app's name).
    public var source: String
    /// The event name (`"Order Completed"`); may be empty for `identify`.
    public var name: String
    /// The user the event is about, if known (used for erasure).
    public var userID: String
    /// A once-key for conversion-style dedup; empty when unused.
    public var onceKey: String
    /// The event's properties: a UTF-8 JSON object, or empty for none.
    public var properties: [UInt8]
    /// The client session the event belongs to (protocol version 2), if any.
    public var session: EventID?
    /// An id for a user not known by ``userID`` (extension ``EventExtension/Tag/anonymousID``);
    /// empty when unset. At most ``EventExtension/maxIdentifierBytes`` bytes.
    public var anonymousID: String
    /// The group a `group` event associates the user with (extension
    /// ``EventExtension/Tag/groupID``); empty when unset. At most
    /// ``EventExtension/maxIdentifierBytes`` bytes.
    public var groupID: String
    /// The user's former id, for an `alias` event (extension ``EventExtension/Tag/previousID``);
    /// empty when unset. At most ``EventExtension/maxIdentifierBytes`` bytes.
    public var previousID: String
    /// The event's context: a UTF-8 JSON object (extension ``EventExtension/Tag/context``), or
    /// empty for none. The agent refuses an event whose context is not a JSON object.
    public var context: [UInt8]
    /// Other extension fields, in the order they are encoded (the session and the event-model
    /// fields above are not among them, and must not be added here).
    public var extensions: [EventExtension]

    /// Creates an event.
    public init(
        id: EventID, timestamp: UInt64, sequence: UInt64, pid: UInt32, type: EventType,
        category: UInt8 = 0, flags: EventFlags = [], source: String, name: String,
        userID: String = "", onceKey: String = "", properties: [UInt8] = [], session: EventID? = nil,
        anonymousID: String = "", groupID: String = "", previousID: String = "", context: [UInt8] = [],
        extensions: [EventExtension] = []
    ) {
        self.id = id
        self.timestamp = timestamp
        self.sequence = sequence
        self.pid = pid
        self.type = type
        self.category = category
        self.flags = flags
        self.source = source
        self.name = name
        self.userID = userID
        self.onceKey = onceKey
        self.properties = properties
        self.session = session
        self.anonymousID = anonymousID
        self.groupID = groupID
        self.previousID = previousID
        self.context = context
        self.extensions = extensions
    }

    /// Size of the fixed header that precedes the variable-length fields.
    public static let fixedHeaderSize = 52

    /// Whether the encoded frame has an extension block (and so needs protocol version 2).
    public var isExtended: Bool {
        session != nil || !anonymousID.isEmpty || !groupID.isEmpty || !previousID.isEmpty || !context.isEmpty
            || !extensions.isEmpty
    }

    /// The application's own id of the event (extension ``EventExtension/Tag/messageID``, kept
    /// among ``extensions``), or nil without one.
    public var messageID: String? {
        extensions.first { $0.tag == .messageID }.map { String(decoding: $0.value, as: UTF8.self) }
    }

    /// The encoded frame. Text fields longer than 65 535 bytes are a programming error.
    public func encoded() -> [UInt8] {
        Self.encode(
            id: id, timestamp: timestamp, sequence: sequence, pid: pid, type: type, category: category, flags: flags,
            source: source, name: name, userID: userID, onceKey: onceKey, session: session, anonymousID: anonymousID,
            groupID: groupID, previousID: previousID, extensions: extensions,
            jsonCapacity: properties.count + context.count,
            properties: { $0.append(contentsOf: properties) }, context: { $0.append(contentsOf: context) })
    }

    /// Encodes a frame whose properties and context are appended by `properties` and `context`
    /// straight into it: the client encodes an event's JSON this way on the app's thread, with no
    /// buffer but the frame. Each closure appends a UTF-8 JSON object, or nothing for none.
    /// `jsonCapacity` is how many bytes the two are expected to append (the frame is reserved for
    /// it; it grows if they append more). The other arguments are ``WireEvent``'s fields; text
    /// fields longer than 65 535 bytes are a programming error.
    ///
    /// ```swift
    /// let frame = WireEvent.encode(id: id, timestamp: now, sequence: 1, pid: pid, type: .track,
    ///                              source: "app", name: "Signed Up", jsonCapacity: 16,
    ///                              properties: { $0.append(contentsOf: #"{"plan":"pro"}"#.utf8) },
    ///                              context: { _ in })
    /// ```
    public static func encode(
        id: EventID, timestamp: UInt64, sequence: UInt64, pid: UInt32, type: EventType, category: UInt8 = 0,
        flags: EventFlags = [], source: String, name: String, userID: String = "", onceKey: String = "",
        session: EventID? = nil, anonymousID: String = "", groupID: String = "", previousID: String = "",
        extensions: [EventExtension] = [], jsonCapacity: Int,
        properties: (inout [UInt8]) -> Void, context: (inout [UInt8]) -> Void
    ) -> [UInt8] {
        // The UTF-8 views are copied straight into `out` (no intermediate arrays).
        let source = source.utf8, name = name.utf8, user = userID.utf8, once = onceKey.utf8
        let anonymous = anonymousID.utf8, group = groupID.utf8, previous = previousID.utf8
        precondition(source.count <= 0xFFFF && name.count <= 0xFFFF && user.count <= 0xFFFF && once.count <= 0xFFFF,
                     "event text fields are limited to 65535 bytes")
        let entryHeader = EventExtension.entryHeaderSize
        func entrySize(_ count: Int) -> Int { count == 0 ? 0 : entryHeader + count }
        var extensionBytes = (session == nil ? 0 : entryHeader + 16) + entrySize(anonymous.count)
            + entrySize(group.count) + entrySize(previous.count) + entryHeader  // the context's, dropped if empty
        for field in extensions { extensionBytes += entryHeader + field.value.count }
        var out: [UInt8] = []
        out.reserveCapacity(fixedHeaderSize + source.count + name.count + user.count + once.count + jsonCapacity
            + extensionBytes)
        // The fixed header in one append (field by field, it cost more than all the rest).
        out.appendBytes(fixedHeaderSize) { header in
            header.storeBytes(of: id.high.bigEndian, toByteOffset: 0, as: UInt64.self)
            header.storeBytes(of: id.low.bigEndian, toByteOffset: 8, as: UInt64.self)
            header.storeLE(timestamp, at: 16)
            header.storeLE(sequence, at: 24)
            header.storeLE(pid, at: 32)
            header[36] = type.rawValue
            header[37] = category
            header.storeLE(flags.subtracting(.extended).rawValue, at: 38)  // `extended` set below if there are extensions
            header.storeLE(UInt16(source.count), at: 40)
            header.storeLE(UInt16(name.count), at: 42)
            header.storeLE(UInt16(user.count), at: 44)
            header.storeLE(UInt16(once.count), at: 46)
            header.storeLE(UInt32(0), at: 48)  // the properties' length, set below
        }
        out.append(contentsOf: source)
        out.append(contentsOf: name)
        out.append(contentsOf: user)
        out.append(contentsOf: once)
        let propertiesStart = out.count
        properties(&out)
        let propertiesLength = out.count - propertiesStart
        precondition(propertiesLength <= Int(UInt32.max), "event properties are limited to 4 GiB")
        var extended = false
        if let session {
            out.appendBytes(entryHeader + 16) { entry in
                entry.storeLE(EventExtension.Tag.session.rawValue, at: 0)
                entry.storeLE(UInt32(16), at: 2)
                entry.storeBytes(of: session.high.bigEndian, toByteOffset: entryHeader, as: UInt64.self)
                entry.storeBytes(of: session.low.bigEndian, toByteOffset: entryHeader + 8, as: UInt64.self)
            }
            extended = true
        }
        func appendEntryHeader(_ tag: EventExtension.Tag, _ length: Int) {
            out.appendBytes(entryHeader) { entry in
                entry.storeLE(tag.rawValue, at: 0)
                entry.storeLE(UInt32(length), at: 2)
            }
        }
        // The event-model fields, in tag order, each only when set.
        func appendEntry(_ tag: EventExtension.Tag, _ value: String.UTF8View) {
            guard !value.isEmpty else { return }
            appendEntryHeader(tag, value.count)
            out.append(contentsOf: value)
            extended = true
        }
        appendEntry(.anonymousID, anonymous)
        appendEntry(.groupID, group)
        appendEntry(.previousID, previous)
        let contextStart = out.count
        appendEntryHeader(.context, 0)  // the context's length, set below
        context(&out)
        let contextLength = out.count - contextStart - entryHeader
        precondition(contextLength <= Int(UInt32.max), "an event context is limited to 4 GiB")
        if contextLength == 0 {
            out.removeLast(entryHeader)
        } else {
            extended = true
        }
        for field in extensions {
            out.appendLE(field.tag.rawValue)
            out.appendLE(UInt32(field.value.count))
            out.append(contentsOf: field.value)
            extended = true
        }
        out.withUnsafeMutableBytes { raw in
            raw.storeLE(UInt32(propertiesLength), at: 48)
            if contextLength > 0 { raw.storeLE(UInt32(contextLength), at: contextStart + 2) }
            if extended { raw.storeLE(flags.union(.extended).rawValue, at: 38) }
        }
        return out
    }

    /// Decodes a whole frame, validating lengths, UTF-8 and the extension block.
    ///
    /// With `checkingFields` false the event-model extensions are taken as they are (an
    /// identifier's invalid UTF-8 replaced, a context that is not an object kept): for frames an
    /// agent stored before it knew those fields, which must stay readable.
    public init(decoding frame: [UInt8], checkingFields: Bool = true) throws(ProtocolError) {
        let header = try EventHeader(frame, checkingFields: checkingFields)
        var offset = Self.fixedHeaderSize
        func text(_ count: Int, _ field: String) throws(ProtocolError) -> String {
            defer { offset += count }
            guard let value = String(validating: frame[offset..<offset + count], as: UTF8.self) else {
                throw .invalidUTF8("\(field) is not valid UTF-8")
            }
            return value
        }
        let source = try text(header.sourceLength, "source")
        let name = try text(header.nameLength, "name")
        let user = try text(header.userIDLength, "user id")
        let once = try text(header.onceKeyLength, "once key")
        let properties = Array(frame[offset..<offset + header.propertiesLength])
        var anonymousID = "", groupID = "", previousID = "", context: [UInt8] = []
        var extensions: [EventExtension] = []
        for field in header.extensions(in: frame) {
            // Validated by `EventHeader`: the text fields are UTF-8, the context a JSON object.
            switch field.tag {
            case .session: continue
            case .anonymousID: anonymousID = String(decoding: field.value, as: UTF8.self)
            case .groupID: groupID = String(decoding: field.value, as: UTF8.self)
            case .previousID: previousID = String(decoding: field.value, as: UTF8.self)
            case .context: context = field.value
            default: extensions.append(field)
            }
        }
        self.init(
            id: header.id, timestamp: header.timestamp, sequence: header.sequence, pid: header.pid,
            type: header.type, category: header.category, flags: header.flags.subtracting(.extended),
            source: source, name: name, userID: user, onceKey: once, properties: properties,
            session: header.session, anonymousID: anonymousID, groupID: groupID, previousID: previousID,
            context: context, extensions: extensions
        )
    }

    /// `frame` as a protocol version 1 agent accepts it: without the extension block and its
    /// flag (for a client falling back after an `unsupported_version` reply). Frames without
    /// extensions are returned unchanged.
    public static func strippingExtensions(_ frame: [UInt8]) -> [UInt8] {
        guard let header = try? EventHeader(frame), header.flags.contains(.extended) else { return frame }
        var stripped = Array(frame[..<header.extensionsOffset])
        stripped.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: header.flags.subtracting(.extended).rawValue.littleEndian, toByteOffset: 38, as: UInt16.self)
        }
        return stripped
    }
}

/// The fixed fields of an encoded event, read without copying the variable part.
///
/// This is what the agent's ingest path looks at: it validates the structure and reads the fields
/// it decides on, and stores the frame bytes as they came.
public struct EventHeader: Sendable {
    public var id: EventID
    public var timestamp: UInt64
    public var sequence: UInt64
    public var pid: UInt32
    public var type: EventType
    public var category: UInt8
    public var flags: EventFlags
    public var sourceLength: Int
    public var nameLength: Int
    public var userIDLength: Int
    public var onceKeyLength: Int
    public var propertiesLength: Int
    /// Where the extension block starts (the frame's length when there is none).
    public var extensionsOffset: Int
    /// The client session (extension ``EventExtension/Tag/session``), if the frame has one.
    public var session: EventID?

    /// Reads and validates the fixed header of `frame`: the frame must be exactly as long as the
    /// header says (plus a well-formed extension block when the ``EventFlags/extended`` flag is
    /// set), the type must be known, the text fields and the properties must be valid UTF-8, no
    /// extension may be critical and unknown, and the known extensions must keep their rules
    /// (identifiers valid UTF-8 of at most ``EventExtension/maxIdentifierBytes``, the context a
    /// JSON object; not with `checkingFields` false, for frames stored before they were known).
    public init(_ frame: [UInt8], checkingFields: Bool = true) throws(ProtocolError) {
        guard frame.count >= WireEvent.fixedHeaderSize else {
            throw .truncated("event frame is \(frame.count) bytes, the fixed header alone is \(WireEvent.fixedHeaderSize)")
        }
        let parsed: (EventHeader?, UInt8) = frame.withUnsafeBytes { raw in
            let typeCode = raw[36]
            guard let type = EventType(rawValue: typeCode) else { return (nil, typeCode) }
            return (EventHeader(
                id: EventID(bytes: raw, at: 0),
                timestamp: raw.loadLE(at: 16, as: UInt64.self),
                sequence: raw.loadLE(at: 24, as: UInt64.self),
                pid: raw.loadLE(at: 32, as: UInt32.self),
                type: type,
                category: raw[37],
                flags: EventFlags(rawValue: raw.loadLE(at: 38, as: UInt16.self)),
                sourceLength: Int(raw.loadLE(at: 40, as: UInt16.self)),
                nameLength: Int(raw.loadLE(at: 42, as: UInt16.self)),
                userIDLength: Int(raw.loadLE(at: 44, as: UInt16.self)),
                onceKeyLength: Int(raw.loadLE(at: 46, as: UInt16.self)),
                propertiesLength: Int(raw.loadLE(at: 48, as: UInt32.self))
            ), typeCode)
        }
        guard var header = parsed.0 else { throw .malformed("unknown event type \(parsed.1)") }
        let declared = WireEvent.fixedHeaderSize + header.sourceLength + header.nameLength
            + header.userIDLength + header.onceKeyLength + header.propertiesLength
        guard declared <= frame.count else {
            throw .truncated("event frame is \(frame.count) bytes but its header declares \(declared)")
        }
        header.extensionsOffset = declared
        if header.flags.contains(.extended) {
            header.session = try Self.validateExtensions(frame, from: declared, checkingFields: checkingFields)
        } else if declared != frame.count {
            throw .malformed("event frame is \(frame.count) bytes but its header declares \(declared)")
        }
        // The text fields are short; validating them here keeps undecodable events off the disk.
        // The properties are checked for UTF-8 too (not parsed): stored bytes are delivered as sent.
        let invalidField: String? = frame.withUnsafeBytes { raw in
            var offset = WireEvent.fixedHeaderSize
            func valid(_ length: Int) -> Bool {
                defer { offset += length }
                return UTF8Validation.isValid(UnsafeRawBufferPointer(rebasing: raw[offset..<(offset + length)]))
            }
            if !valid(header.sourceLength) { return "source" }
            if !valid(header.nameLength) { return "name" }
            if !valid(header.userIDLength) { return "user id" }
            if !valid(header.onceKeyLength) { return "once key" }
            if !valid(header.propertiesLength) { return "properties" }
            return nil
        }
        if let invalidField { throw .invalidUTF8("\(invalidField) is not valid UTF-8") }
        self = header
    }

    /// Walks the extension block from `offset` to the end of `frame`: every entry must fit, no
    /// tag may repeat, known tags must have their size and content, unknown critical tags are
    /// refused. Returns the session, if any.
    private static func validateExtensions(_ frame: [UInt8], from start: Int, checkingFields: Bool) throws(ProtocolError) -> EventID? {
        var offset = start
        var session: EventID?
        var seen: Set<UInt16> = []
        while offset < frame.count {
            guard frame.count - offset >= EventExtension.entryHeaderSize else {
                throw .malformed("extension entry at byte \(offset) is cut short")
            }
            let tag = EventExtension.Tag(rawValue: readLE(frame, at: offset))
            let length = Int(readLE(frame, at: offset + 2, as: UInt32.self))
            let value = offset + EventExtension.entryHeaderSize
            guard length <= frame.count - value else {
                throw .malformed("extension \(tag) declares \(length) bytes past the end of the frame")
            }
            guard seen.insert(tag.rawValue).inserted else { throw .malformed("extension \(tag) appears twice") }
            switch tag {
            case .session:
                guard length == 16 else { throw .malformed("extension session is \(length) bytes, expected 16") }
                session = EventID(bytes: frame, at: value)
            case .anonymousID, .groupID, .previousID:
                guard checkingFields else { break }
                guard frame.withUnsafeBytes({ UTF8Validation.isValid(UnsafeRawBufferPointer(rebasing: $0[value..<(value + length)])) }) else {
                    throw .invalidUTF8("extension \(tag) is not valid UTF-8")
                }
                guard length <= EventExtension.maxIdentifierBytes else {
                    throw .invalidField("extension \(tag) is \(length) bytes, the limit is \(EventExtension.maxIdentifierBytes)")
                }
            case .context:
                guard checkingFields else { break }
                let problem: String? = frame.withUnsafeBytes { raw in
                    let bytes = UnsafeRawBufferPointer(rebasing: raw[value..<(value + length)])
                    if !UTF8Validation.isValid(bytes) { return "utf8" }
                    // Empty means no context, as for an empty properties field.
                    return length == 0 || JSONTape.isObject(bytes) ? nil : "json"
                }
                if problem == "utf8" { throw .invalidUTF8("extension context is not valid UTF-8") }
                if problem != nil { throw .invalidField("extension context is not a JSON object") }
            default:
                if tag.isCritical { throw .unsupportedField("critical extension \(tag) is not known to this agent") }
            }
            offset = value + length
        }
        return session
    }

    /// The session of a frame validated earlier (a stored one), read in place: walks the
    /// extension block without checking anything else. `nil` without one.
    public static func session(ofValidated frame: UnsafeRawBufferPointer) -> EventID? {
        guard frame.count >= WireEvent.fixedHeaderSize,
              EventFlags(rawValue: frame.loadLE(at: 38, as: UInt16.self)).contains(.extended) else { return nil }
        var offset = WireEvent.fixedHeaderSize + Int(frame.loadLE(at: 40, as: UInt16.self))
            + Int(frame.loadLE(at: 42, as: UInt16.self)) + Int(frame.loadLE(at: 44, as: UInt16.self))
            + Int(frame.loadLE(at: 46, as: UInt16.self)) + Int(frame.loadLE(at: 48, as: UInt32.self))
        while frame.count - offset >= EventExtension.entryHeaderSize {
            let tag = EventExtension.Tag(rawValue: frame.loadLE(at: offset, as: UInt16.self))
            let length = Int(frame.loadLE(at: offset + 2, as: UInt32.self))
            let value = offset + EventExtension.entryHeaderSize
            guard length <= frame.count - value else { return nil }
            if tag == .session && length == 16 { return EventID(bytes: frame, at: value) }
            offset = value + length
        }
        return nil
    }

    /// The extension entries of `frame` (the frame this header was read from), in frame order.
    public func extensions(in frame: [UInt8]) -> [EventExtension] {
        var fields: [EventExtension] = []
        var offset = extensionsOffset
        while frame.count - offset >= EventExtension.entryHeaderSize {
            let length = Int(readLE(frame, at: offset + 2, as: UInt32.self))
            let value = offset + EventExtension.entryHeaderSize
            guard length <= frame.count - value else { break }
            fields.append(EventExtension(tag: .init(rawValue: readLE(frame, at: offset)), value: Array(frame[value..<(value + length)])))
            offset = value + length
        }
        return fields
    }

    /// The source in `frame` (the frame this header was read from).
    public func source(in frame: [UInt8]) -> String {
        text(in: frame, at: WireEvent.fixedHeaderSize, length: sourceLength)
    }

    /// The user id in `frame` (the frame this header was read from); empty if none.
    public func userID(in frame: [UInt8]) -> String {
        text(in: frame, at: WireEvent.fixedHeaderSize + sourceLength + nameLength, length: userIDLength)
    }

    /// The once-key in `frame` (the frame this header was read from); empty if none.
    public func onceKey(in frame: [UInt8]) -> String {
        text(in: frame, at: WireEvent.fixedHeaderSize + sourceLength + nameLength + userIDLength, length: onceKeyLength)
    }

    private func text(in frame: [UInt8], at offset: Int, length: Int) -> String {
        guard length > 0, offset + length <= frame.count else { return "" }
        return String(decoding: frame[offset..<(offset + length)], as: UTF8.self)
    }

    private init(
        id: EventID, timestamp: UInt64, sequence: UInt64, pid: UInt32, type: EventType, category: UInt8,
        flags: EventFlags, sourceLength: Int, nameLength: Int, userIDLength: Int, onceKeyLength: Int,
        propertiesLength: Int
    ) {
        self.id = id
        self.timestamp = timestamp
        self.sequence = sequence
        self.pid = pid
        self.type = type
        self.category = category
        self.flags = flags
        self.sourceLength = sourceLength
        self.nameLength = nameLength
        self.userIDLength = userIDLength
        self.onceKeyLength = onceKeyLength
        self.propertiesLength = propertiesLength
        extensionsOffset = 0
        session = nil
    }
}
