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
    /// Flags such as ``EventFlags/localOnly``.
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

    /// Creates an event.
    public init(
        id: EventID, timestamp: UInt64, sequence: UInt64, pid: UInt32, type: EventType,
        category: UInt8 = 0, flags: EventFlags = [], source: String, name: String,
        userID: String = "", onceKey: String = "", properties: [UInt8] = []
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
    }

    /// Size of the fixed header that precedes the variable-length fields.
    public static let fixedHeaderSize = 52

    /// The encoded frame. Text fields longer than 65 535 bytes are a programming error.
    public func encoded() -> [UInt8] {
        // The UTF-8 views are copied straight into `out` (no intermediate arrays: this runs on the
        // app's thread for every tracked event).
        let source = source.utf8, name = name.utf8, user = userID.utf8, once = onceKey.utf8
        precondition(source.count <= 0xFFFF && name.count <= 0xFFFF && user.count <= 0xFFFF && once.count <= 0xFFFF,
                     "event text fields are limited to 65535 bytes")
        var out: [UInt8] = []
        out.reserveCapacity(Self.fixedHeaderSize + source.count + name.count + user.count + once.count + properties.count)
        id.append(to: &out)
        out.appendLE(timestamp)
        out.appendLE(sequence)
        out.appendLE(pid)
        out.append(type.rawValue)
        out.append(category)
        out.appendLE(flags.rawValue)
        out.appendLE(UInt16(source.count))
        out.appendLE(UInt16(name.count))
        out.appendLE(UInt16(user.count))
        out.appendLE(UInt16(once.count))
        out.appendLE(UInt32(properties.count))
        out.append(contentsOf: source)
        out.append(contentsOf: name)
        out.append(contentsOf: user)
        out.append(contentsOf: once)
        out.append(contentsOf: properties)
        return out
    }

    /// Decodes a whole frame, validating lengths and UTF-8.
    public init(decoding frame: [UInt8]) throws(ProtocolError) {
        let header = try EventHeader(frame)
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
        self.init(
            id: header.id, timestamp: header.timestamp, sequence: header.sequence, pid: header.pid,
            type: header.type, category: header.category, flags: header.flags, source: source, name: name,
            userID: user, onceKey: once, properties: Array(frame[offset..<offset + header.propertiesLength])
        )
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

    /// Reads and validates the fixed header of `frame`: the frame must be exactly as long as the
    /// header says and the type must be known.
    public init(_ frame: [UInt8]) throws(ProtocolError) {
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
        guard let header = parsed.0 else { throw .malformed("unknown event type \(parsed.1)") }
        let declared = WireEvent.fixedHeaderSize + header.sourceLength + header.nameLength
            + header.userIDLength + header.onceKeyLength + header.propertiesLength
        guard declared <= frame.count else {
            throw .truncated("event frame is \(frame.count) bytes but its header declares \(declared)")
        }
        guard declared == frame.count else {
            throw .malformed("event frame is \(frame.count) bytes but its header declares \(declared)")
        }
        // The text fields are short; validating them here keeps undecodable events off the disk.
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
            return nil
        }
        if let invalidField { throw .invalidUTF8("\(invalidField) is not valid UTF-8") }
        self = header
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
    }
}
