/// The newest protocol version this build speaks (and what its clients send).
///
/// Version 2 adds the event frame's extension block (``EventExtension``), e.g. the client
/// session. An agent answers each message in the version it came in and accepts every version in
/// ``supportedProtocolVersions``.
public let ferryProtocolVersion: UInt8 = 2

/// The protocol versions this build accepts.
public let supportedProtocolVersions: ClosedRange<UInt8> = 1...2

/// What a message is.
public enum MessageKind: UInt8, Sendable {
    /// Client → agent: one event per following frame.
    case events = 1
    /// Agent → client: a status per event of an ``events`` message, same order.
    case ack = 2
    /// Agent → client: the whole message was refused (bad version, bad header, no events).
    case error = 3
}

/// The 8-byte header frame that starts every message on the ingest socket.
///
/// `version:u8 kind:u8 flags:u16le requestID:u32le`. The request id is chosen by the client and
/// echoed in the reply, so a client can match acks to the batch it sent.
public struct MessageHeader: Hashable, Sendable {
    public var version: UInt8
    public var kind: MessageKind
    public var flags: UInt16
    public var requestID: UInt32

    /// Size of the header frame.
    public static let size = 8

    /// Creates a header.
    public init(version: UInt8 = ferryProtocolVersion, kind: MessageKind, flags: UInt16 = 0, requestID: UInt32) {
        self.version = version
        self.kind = kind
        self.flags = flags
        self.requestID = requestID
    }

    /// The encoded frame.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        encode(into: &out)
        return out
    }

    /// Appends the encoded frame to `out` (a buffer its owner reuses).
    public func encode(into out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: Self.size))
        out.withUnsafeMutableBytes { raw in
            raw[start] = version
            raw[start + 1] = kind.rawValue
            raw.storeBytes(of: flags.littleEndian, toByteOffset: start + 2, as: UInt16.self)
            raw.storeBytes(of: requestID.littleEndian, toByteOffset: start + 4, as: UInt32.self)
        }
    }

    /// Decodes a header frame. An unknown version is reported before anything else, so a client
    /// from the future gets `unsupportedVersion`, not `malformed`.
    public init(decoding frame: [UInt8]) throws(ProtocolError) {
        guard let version = frame.first else { throw .truncated("empty header frame") }
        guard supportedProtocolVersions.contains(version) else {
            throw .unsupportedVersion(
                "protocol version \(version) is not supported; this side speaks \(supportedProtocolVersions.lowerBound)–\(supportedProtocolVersions.upperBound)")
        }
        guard frame.count == Self.size else {
            throw .malformed("header frame is \(frame.count) bytes, expected \(Self.size)")
        }
        guard let kind = MessageKind(rawValue: frame[1]) else { throw .unknownKind("unknown message kind \(frame[1])") }
        self.init(version: version, kind: kind, flags: readLE(frame, at: 2), requestID: readLE(frame, at: 4))
    }

    /// The request id of a header frame, if it is long enough to have one, even when the header is
    /// otherwise invalid (so error replies can still be matched).
    public static func requestID(ofRaw frame: [UInt8]) -> UInt32 {
        frame.count >= size ? readLE(frame, at: 4) : 0
    }
}

/// The outcome of one event.
public enum EventStatus: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    /// Written and fsync'd: durable from now on.
    case accepted = 0
    /// The id (or once-key) was seen within the dedup window; the first copy is durable.
    case duplicate = 1
    /// Refused; see the ``RejectReason``. Nothing was stored.
    case rejected = 2
    /// Refused by consent (tracking off, category disabled). Nothing was stored.
    case blocked = 3
    /// Accepted locally (ack, dedup, bus) but never delivered upstream.
    case suppressed = 4

    public var description: String {
        switch self {
        case .accepted: "accepted"
        case .duplicate: "duplicate"
        case .rejected: "rejected"
        case .blocked: "blocked"
        case .suppressed: "suppressed"
        }
    }
}

/// Why an event got its status: why it was rejected (codes 1–8, and 20: the tracking plan),
/// blocked or suppressed by the consent state (9–17), answered `duplicate` for its once-key (18),
/// accepted but held until consent is decided (19), or accepted into the quarantine (21). A plainly `accepted` event and a `duplicate` by id or session carry
/// ``none``.
///
/// Older agents send ``none`` for `blocked` and `suppressed`; a client decodes a code it does
/// not know as ``malformed``.
public enum RejectReason: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    /// No reason (accepted and queued, duplicate by id or session, or an agent older than the
    /// reasons).
    case none = 0
    /// The frame's structure is wrong.
    case malformed = 1
    /// The event is larger than the agent's limit.
    case tooLarge = 2
    /// The queue reached its retention cap (policy `reject`).
    case full = 3
    /// The disk write or fsync failed (ENOSPC, EIO); nothing of the batch was kept.
    case storage = 4
    /// The agent is shutting down and takes no new events.
    case shuttingDown = 5
    /// A text field or the properties are not valid UTF-8.
    case invalidUTF8 = 6
    /// The event carries a critical extension field the agent does not know (protocol 2).
    case unsupportedField = 7
    /// A known extension field breaks its rule: an identifier (`anonymousId`, `groupId`,
    /// `previousId`) longer than ``EventExtension/maxIdentifierBytes``, or a context that is not
    /// a JSON object (protocol 2).
    case invalidField = 8
    /// `suppressed`: a local-only event (flag `localOnly`), recorded and never delivered.
    case localOnly = 9
    /// `blocked`: no feature is enabled; the agent stores and sends nothing.
    case noOp = 10
    /// `blocked`: network tracking is switched off in the agent's configuration.
    case killSwitch = 11
    /// `blocked`: tracking is disabled (`ferry tracking off`).
    case trackingDisabled = 12
    /// `blocked`: the host is subject to GDPR and data usage is denied.
    case gdprDataUsageDenied = 13
    /// `blocked`: the event's category code is not one the agent declares (or is the agent's
    /// own `consent` category).
    case unknownCategory = 14
    /// `blocked`: the event's category is not among the enabled features.
    case featureDisabled = 15
    /// `blocked`: consent for the event's category is denied.
    case consentDenied = 16
    /// `blocked`: consent for the event's category is not decided yet and the agent's policy
    /// for that is to block (with the `hold` policy the event is accepted and held instead).
    case consentUndetermined = 17
    /// `duplicate`: the event's once-key was used before (by an event stored, blocked or
    /// suppressed); nothing new was stored.
    case onceKey = 18
    /// `accepted`: stored durably but held (consent for the event's category is undetermined
    /// under the `hold` policy): delivered once consent is granted, erased if it is denied or
    /// the hold expires.
    case held = 19
    /// `rejected`: the event breaks the host's tracking plan and the plan's action is `block`
    /// (docs/QUALITY.md); nothing was stored. Sending it again gives the same answer.
    case planViolation = 20
    /// `accepted`: the event breaks the host's tracking plan and the plan's action is
    /// `quarantine`: stored durably in the quarantine area, never delivered unless released
    /// (`ferry quarantine replay`). Like every `accepted`, do not send it again.
    case quarantined = 21

    public var description: String {
        switch self {
        case .none: "none"
        case .malformed: "malformed"
        case .tooLarge: "too_large"
        case .full: "full"
        case .storage: "storage"
        case .shuttingDown: "shutting_down"
        case .invalidUTF8: "invalid_utf8"
        case .unsupportedField: "unsupported_field"
        case .invalidField: "invalid_field"
        case .localOnly: "local_only"
        case .noOp: "no_op"
        case .killSwitch: "kill_switch"
        case .trackingDisabled: "tracking_disabled"
        case .gdprDataUsageDenied: "gdpr_data_usage_denied"
        case .unknownCategory: "unknown_category"
        case .featureDisabled: "feature_disabled"
        case .consentDenied: "consent_denied"
        case .consentUndetermined: "consent_undetermined"
        case .onceKey: "once_key"
        case .held: "held"
        case .planViolation: "plan_violation"
        case .quarantined: "quarantined"
        }
    }
}

extension RejectReason {
    /// The reasons a `rejected` ack carries.
    public static let rejections: [RejectReason] = [
        .malformed, .tooLarge, .full, .storage, .shuttingDown, .invalidUTF8, .unsupportedField, .invalidField, .planViolation,
    ]
    /// The reasons a `blocked` ack carries (the consent state's verdicts).
    public static let consentBlocks: [RejectReason] = [
        .noOp, .killSwitch, .trackingDisabled, .gdprDataUsageDenied, .unknownCategory, .featureDisabled,
        .consentDenied, .consentUndetermined,
    ]

    /// Parses the snake_case name (the bus's `reason` field).
    public init?(name: String) {
        guard let match = Self.allCases.first(where: { $0.description == name }) else { return nil }
        self = match
    }
}

/// One entry of an ack: the event's id and what became of it.
public struct AckEntry: Hashable, Sendable {
    public var id: EventID
    public var status: EventStatus
    public var reason: RejectReason

    /// Creates an entry.
    public init(id: EventID, status: EventStatus, reason: RejectReason = .none) {
        self.id = id
        self.status = status
        self.reason = reason
    }

    /// Bytes per entry on the wire: 16 id + status + reason.
    public static let size = 18
}

/// The body frame of an ``MessageKind/ack`` message: `count:u32le` then `count` entries.
public enum AckCodec {
    /// Encodes entries into one frame.
    public static func encode(_ entries: [AckEntry]) -> [UInt8] {
        // Written in place: one allocation, no per-field append (the socket thread encodes one
        // ack per message).
        var out: [UInt8] = []
        encode(entries, into: &out)
        return out
    }

    /// Appends the encoded frame to `out` (a buffer its owner reuses: the socket thread's acks
    /// then allocate nothing).
    public static func encode(_ entries: [AckEntry], into out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: 4 + entries.count * AckEntry.size))
        out.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: UInt32(entries.count).littleEndian, toByteOffset: start, as: UInt32.self)
            var offset = start + 4
            for entry in entries {
                raw.storeBytes(of: entry.id.high.bigEndian, toByteOffset: offset, as: UInt64.self)
                raw.storeBytes(of: entry.id.low.bigEndian, toByteOffset: offset + 8, as: UInt64.self)
                raw[offset + 16] = entry.status.rawValue
                raw[offset + 17] = entry.reason.rawValue
                offset += AckEntry.size
            }
        }
    }

    /// Decodes an ack body frame.
    public static func decode(_ frame: [UInt8]) throws(ProtocolError) -> [AckEntry] {
        guard frame.count >= 4 else { throw .truncated("ack frame is \(frame.count) bytes") }
        let count = Int(readLE(frame, at: 0, as: UInt32.self))
        guard frame.count == 4 + count * AckEntry.size else {
            throw .malformed("ack frame declares \(count) entries but is \(frame.count) bytes")
        }
        var entries: [AckEntry] = []
        entries.reserveCapacity(count)
        for index in 0..<count {
            let base = 4 + index * AckEntry.size
            guard let status = EventStatus(rawValue: frame[base + 16]) else {
                throw .malformed("unknown event status \(frame[base + 16])")
            }
            entries.append(AckEntry(
                id: EventID(bytes: frame, at: base), status: status,
                reason: RejectReason(rawValue: frame[base + 17]) ?? .malformed
            ))
        }
        return entries
    }
}

/// Codes of an ``MessageKind/error`` reply.
public enum ErrorCode: UInt16, Sendable, CaseIterable, CustomStringConvertible {
    case malformedMessage = 1
    case unsupportedVersion = 2
    case unknownKind = 3
    case messageTooLarge = 4
    case shuttingDown = 5
    /// The sender's uid may not send events to this agent (its access policy); nothing was stored.
    case accessDenied = 6

    public var description: String {
        switch self {
        case .malformedMessage: "malformed_message"
        case .unsupportedVersion: "unsupported_version"
        case .unknownKind: "unknown_kind"
        case .messageTooLarge: "message_too_large"
        case .shuttingDown: "shutting_down"
        case .accessDenied: "access_denied"
        }
    }
}

/// The body frame of an ``MessageKind/error`` message: `code:u16le` then a UTF-8 message.
public struct ErrorReply: Hashable, Sendable {
    public var code: ErrorCode
    public var message: String

    /// Creates a reply.
    public init(code: ErrorCode, message: String) {
        self.code = code
        self.message = message
    }

    /// The encoded body frame.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.appendLE(code.rawValue)
        out += Array(message.utf8)
        return out
    }

    /// Decodes a body frame.
    public init(decoding frame: [UInt8]) throws(ProtocolError) {
        guard frame.count >= 2 else { throw .truncated("error frame is \(frame.count) bytes") }
        let raw = readLE(frame, at: 0, as: UInt16.self)
        guard let code = ErrorCode(rawValue: raw) else { throw .malformed("unknown error code \(raw)") }
        self.init(code: code, message: String(decoding: frame[2...], as: UTF8.self))
    }
}
