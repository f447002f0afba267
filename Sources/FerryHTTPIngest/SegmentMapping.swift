import Crypto
import FerryProtocol

/// The endpoints of the tracking API: `/v1/batch` and one per message type.
package enum SegmentEndpoint: String, Sendable, CaseIterable {
    case batch, track, identify, page, screen, group, alias

    /// The endpoint of a request path (`/v1/track`; a query string is ignored), nil for another path.
    package init?(path: String) {
        let bare = path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        guard bare.hasPrefix("/v1/") else { return nil }
        var name = bare.dropFirst(4)
        if name.hasSuffix("/") { name = name.dropLast() }
        guard let endpoint = SegmentEndpoint(rawValue: String(name)) else { return nil }
        self = endpoint
    }

    /// The message type the endpoint takes (nil for `batch`: each message names its own).
    package var type: EventType? { self == .batch ? nil : EventType(name: rawValue) }
}

/// Who sent a request and how its events are named: what the mapping needs besides the body.
package struct SegmentSender: Sendable, Hashable {
    /// The sender's uid as the kernel reports it (nil for a remote TCP peer).
    package var uid: UInt32?
    /// The sender's pid (0 when unknown: TCP).
    package var pid: UInt32
    /// The write key the request carried (body `writeKey` or Basic auth user), "" for none.
    package var writeKey: String
    /// The source name its events get.
    package var source: String

    /// A sender.
    package init(uid: UInt32?, pid: UInt32, writeKey: String, source: String) {
        self.uid = uid
        self.pid = pid
        self.writeKey = writeKey
        self.source = source
    }
}

/// A message the mapping refused: final, answered in the request's results (the others of the
/// request are still stored).
package struct SegmentRefusal: Error, Sendable, Hashable {
    /// The event id the message would have had (zero when it has no `messageId`).
    package var id: EventID
    /// The message's `messageId`, if it had a readable one.
    package var messageID: String?
    /// Ferry's reason (counted and published on the bus under it).
    package var reason: RejectReason
    /// The error code of the result (`invalid_message`, `too_large`, `invalid_field`).
    package var code: String
    /// What is wrong, for people.
    package var message: String
}

/// A message as a Ferry event: the encoded frame and the ids it is known by.
package struct SegmentEvent: Sendable, Hashable {
    /// The event id: derived from the sender's scope and the `messageId` (``SegmentMapping/eventID(uid:writeKey:messageID:)``).
    package var id: EventID
    /// The application's `messageId`.
    package var messageID: String?
    /// The encoded event frame.
    package var frame: [UInt8]
    /// The consent category the message's `context.consent.categoryPreferences` denies, if it
    /// does: the event is answered blocked and not stored.
    package var deniedCategory: String?
}

/// The mapping of Segment's message shapes onto Ferry's event model: pure functions, no I/O.
///
/// | Segment | Ferry |
/// |---|---|
/// | `type` (or the endpoint) | type |
/// | `event` (track), `name` (page, screen) | name |
/// | `userId` | user id |
/// | `anonymousId`, `groupId`, `previousId` | the protocol-2 extension fields |
/// | `properties` (track, page, screen), `traits` (identify, group) | properties |
/// | `context` | context |
/// | `timestamp` (else `originalTimestamp`, else now) | timestamp |
/// | `messageId` | the id is derived from it; kept as extension `messageId` |
/// | `context.ferry.category` | the consent category (else the type's) |
package enum SegmentMapping {
    /// The largest message, in bytes of its JSON text (Segment's limit).
    package static let maxMessageBytes = 32 << 10
    /// The longest `messageId`, in characters.
    package static let maxMessageIDCharacters = 100
    /// The most messages in one request (the ZeroMQ ingest's bound per message).
    package static let maxMessages = 4096

    /// The messages of `body` sent to `endpoint`: `batch`'s array, or the body itself.
    package static func messages(of body: BodyValue, endpoint: SegmentEndpoint) -> Result<[BodyValue], SegmentRefusal> {
        func refuse(_ message: String) -> Result<[BodyValue], SegmentRefusal> {
            .failure(SegmentRefusal(id: .zero, reason: .malformed, code: "invalid_request", message: message))
        }
        guard body.kind == .object else { return refuse("the body must be a JSON object, not \(body.kindName)") }
        guard endpoint == .batch else { return .success([body]) }
        guard let batch = body["batch"] else { return refuse("/v1/batch needs a \"batch\" array") }
        guard batch.kind == .array else { return refuse("\"batch\" must be an array, not \(batch.kindName)") }
        let elements = batch.elements
        guard !elements.isEmpty else { return refuse("\"batch\" is empty") }
        guard elements.count <= maxMessages else {
            return .failure(SegmentRefusal(id: .zero, reason: .tooLarge, code: "too_large",
                                           message: "\(elements.count) messages in one batch; the limit is \(maxMessages)"))
        }
        return .success(elements)
    }

    /// The write key of a request: the body's `writeKey` (for a single message or a batch), else
    /// the Basic auth user name of `authorization` (the header's value), else "".
    package static func writeKey(body: BodyValue, authorization: String?) -> String {
        if let key = body["writeKey"]?.string, !key.isEmpty { return key }
        guard let authorization, authorization.lowercased().hasPrefix("basic "),
              let decoded = Base64.decode(String(authorization.dropFirst(6)).trimmingSpaces) else { return "" }
        let text = String(decoding: decoded, as: UTF8.self)
        return String(text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
    }

    /// The event id of message `messageID` from `uid` with `writeKey`: the first 128 bits of the
    /// SHA-256 of the three, with the UUID version 8 (custom) and variant bits set. The same
    /// message sent again by the same user with the same key — whatever batch it travels in —
    /// gets the same id, which the agent's id window answers `duplicate`; another user cannot
    /// make an id that shadows this user's.
    package static func eventID(uid: UInt32?, writeKey: String, messageID: String) -> EventID {
        var input = Array("ferry-http-ingest/1\u{0}".utf8)
        input += Array((uid.map(String.init) ?? "-").utf8)
        input.append(0)
        input += Array(writeKey.utf8)
        input.append(0)
        input += Array(messageID.utf8)
        let digest = Array(SHA256.hash(data: input))
        var high = digest[0..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        var low = digest[8..<16].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        high = high & ~0xF000 | 0x8000
        low = low & 0x3FFF_FFFF_FFFF_FFFF | 0x8000_0000_0000_0000
        return EventID(high: high, low: low)
    }

    /// The refusal of `message`, which nests deeper than ``JSONTape/maxDepth`` at byte
    /// `offset` of the body: `invalid_json` in its result, under its `messageId` when it has a
    /// readable one (the rest of the request is still stored).
    package static func tooDeep(_ message: BodyValue, at offset: Int, sender: SegmentSender) -> SegmentRefusal {
        var messageID: String?
        switch message["messageId"]?.kind {
        case .string?: messageID = message["messageId"]?.string
        case .number?: messageID = message["messageId"]?.text
        default: break
        }
        if let given = messageID, given.isEmpty || given.count > maxMessageIDCharacters { messageID = nil }
        let id = messageID.map { eventID(uid: sender.uid, writeKey: sender.writeKey, messageID: $0) } ?? .zero
        return SegmentRefusal(id: id, messageID: messageID, reason: .malformed, code: "invalid_json",
                              message: "the message nests deeper than \(JSONTape.maxDepth) levels (at byte \(offset))")
    }

    /// Maps one message of a request's body (`message`) sent to `endpoint` by `sender`.
    /// `categories` are the consent categories by name, `typeCategories` the category of each
    /// type; `now` (Unix ms) stamps a message without a timestamp; `newID` makes an id for a
    /// message without a `messageId`.
    package static func event(
        _ message: BodyValue, endpoint: SegmentEndpoint, sender: SegmentSender,
        categories: [String: UInt8], typeCategories: [String: String], now: UInt64, newID: () -> EventID
    ) -> Result<SegmentEvent, SegmentRefusal> {
        var messageID: String?
        var id = EventID.zero
        func refuse(_ reason: RejectReason, _ code: String, _ text: String) -> Result<SegmentEvent, SegmentRefusal> {
            .failure(SegmentRefusal(id: id, messageID: messageID, reason: reason, code: code, message: text))
        }
        guard message.kind == .object else { return refuse(.malformed, "invalid_message", "a message must be a JSON object, not \(message.kindName)") }
        if let value = message["messageId"] {
            switch value.kind {
            case .string: messageID = value.string
            case .number: messageID = value.text
            case .null: break
            default: return refuse(.invalidField, "invalid_field", "messageId must be a string, not \(value.kindName)")
            }
        }
        if let given = messageID {
            guard !given.isEmpty else { return refuse(.invalidField, "invalid_field", "messageId is empty") }
            guard given.count <= maxMessageIDCharacters else {
                messageID = nil
                return refuse(.invalidField, "invalid_field", "messageId has \(given.count) characters; the limit is \(maxMessageIDCharacters)")
            }
            id = eventID(uid: sender.uid, writeKey: sender.writeKey, messageID: given)
        } else {
            id = newID()
        }
        let size = message.range.count
        guard size <= maxMessageBytes else {
            return refuse(.tooLarge, "too_large", "the message is \(size) bytes; the limit is \(maxMessageBytes)")
        }
        // The type: the endpoint's, else the message's own.
        let type: EventType
        if let fixed = endpoint.type {
            type = fixed
        } else {
            guard let name = message["type"]?.string else { return refuse(.malformed, "invalid_message", "a batch message needs a \"type\"") }
            guard let parsed = EventType(name: name) else {
                return refuse(.malformed, "invalid_message", "unknown type \"\(name)\"; valid: \(EventType.allCases.map(\.description).joined(separator: ", "))")
            }
            type = parsed
        }
        func text(_ key: String) -> Result<String, SegmentRefusal> {
            guard let value = message[key] else { return .success("") }
            switch value.kind {
            case .string: return .success(value.string!)
            case .number: return .success(value.text)
            case .null: return .success("")
            default:
                return .failure(SegmentRefusal(id: id, messageID: messageID, reason: .invalidField, code: "invalid_field",
                                               message: "\(key) must be a string, not \(value.kindName)"))
            }
        }
        let fields: (name: String, user: String, anonymous: String, group: String, previous: String)
        do {
            let nameKey = type == .track ? "event" : "name"
            fields = (try text(nameKey).get(), try text("userId").get(), try text("anonymousId").get(),
                      try text("groupId").get(), try text("previousId").get())
        } catch {
            return .failure(error)
        }
        if type == .track && fields.name.isEmpty { return refuse(.malformed, "invalid_message", "a track message needs an \"event\" name") }
        if fields.user.isEmpty && fields.anonymous.isEmpty && type != .alias {
            return refuse(.malformed, "invalid_message", "a message needs a userId or an anonymousId")
        }
        for (key, value) in [("userId", fields.user), ("event", fields.name)] where value.utf8.count > 0xFFFF {
            return refuse(.invalidField, "invalid_field", "\(key) is longer than 65535 bytes")
        }
        for (key, value) in [("anonymousId", fields.anonymous), ("groupId", fields.group), ("previousId", fields.previous)]
            where value.utf8.count > EventExtension.maxIdentifierBytes {
            return refuse(.invalidField, "invalid_field", "\(key) is longer than \(EventExtension.maxIdentifierBytes) bytes")
        }
        // Properties: `properties`, or `traits` for identify and group (either is taken when the
        // other is absent: libraries differ). An identify or group without `traits` takes
        // `context.traits`, as RudderStack's data plane does (its field mapping reads "traits"
        // from `traits`, else `context.traits`): rudder-sdk-python sends identify's traits there only.
        let propertiesKeys = type == .identify || type == .group ? ["traits", "context.traits", "properties"] : ["properties", "traits"]
        var properties: Range<Int>?
        for key in propertiesKeys {
            let found = key == "context.traits" ? message["context"]?["traits"] : message[key]
            guard let value = found else { continue }
            if value.kind == .null { continue }
            guard value.kind == .object else { return refuse(.invalidField, "invalid_field", "\(key) must be an object, not \(value.kindName)") }
            properties = value.range
            break
        }
        var contextRange: Range<Int>?
        var category: UInt8 = 0
        var deniedCategory: String?
        if let context = message["context"] {
            switch context.kind {
            case .null: break
            case .object:
                contextRange = context.range
                if let named = context["ferry"]?["category"] {
                    guard let name = named.string, let code = categories[name] else {
                        return refuse(.unknownCategory, "unknown_category",
                                      "context.ferry.category must name a consent category: \(categories.keys.sorted().joined(separator: ", "))")
                    }
                    category = code
                }
                let effective = category != 0 ? categories.first { $0.value == category }?.key : typeCategories[type.description]
                if let preferences = context["consent"]?["categoryPreferences"], let effective,
                   preferences[effective]?.kind == .false {
                    deniedCategory = effective
                }
            default:
                return refuse(.invalidField, "invalid_field", "context must be an object, not \(context.kindName)")
            }
        }
        var timestamp = now
        for key in ["timestamp", "originalTimestamp"] {
            guard let value = message[key] else { continue }
            if value.kind == .null { continue }
            guard let given = value.string, let parsed = ISO8601.milliseconds(given) else {
                return refuse(.invalidField, "invalid_field", "\(key) must be an ISO 8601 date-time (2026-01-31T12:00:00.000Z)")
            }
            timestamp = parsed
            break
        }
        let extensions = messageID.map { [EventExtension(tag: .messageID, value: Array($0.utf8))] } ?? []
        let frame = WireEvent.encode(
            id: id, timestamp: timestamp, sequence: 0, pid: sender.pid, type: type, category: category,
            source: sender.source, name: fields.name, userID: fields.user, anonymousID: fields.anonymous,
            groupID: fields.group, previousID: fields.previous, extensions: extensions,
            jsonCapacity: (properties?.count ?? 0) + (contextRange?.count ?? 0),
            properties: { out in if let properties { out.append(contentsOf: message.body[properties]) } },
            context: { out in if let contextRange { out.append(contentsOf: message.body[contextRange]) } })
        return .success(SegmentEvent(id: id, messageID: messageID, frame: frame, deniedCategory: deniedCategory))
    }
}

extension String {
    /// Without leading and trailing spaces and tabs.
    var trimmingSpaces: String {
        var text = Substring(self)
        while let first = text.first, first == " " || first == "\t" { text.removeFirst() }
        while let last = text.last, last == " " || last == "\t" { text.removeLast() }
        return String(text)
    }
}

/// Standard base64 (RFC 4648), for Basic auth.
enum Base64 {
    /// The bytes of `text`, nil if it is not base64.
    static func decode(_ text: String) -> [UInt8]? {
        var out: [UInt8] = []
        var buffer: UInt32 = 0, bits = 0
        for byte in text.utf8 {
            let value: UInt8
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = byte - UInt8(ascii: "A")
            case UInt8(ascii: "a")...UInt8(ascii: "z"): value = byte - UInt8(ascii: "a") + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = byte - UInt8(ascii: "0") + 52
            case UInt8(ascii: "+"): value = 62
            case UInt8(ascii: "/"): value = 63
            case UInt8(ascii: "="): continue
            default: return nil
            }
            buffer = buffer << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits)))
            }
        }
        return out
    }
}

/// ISO 8601 date-times as Segment's libraries write them.
package enum ISO8601 {
    /// Unix milliseconds of `text`: `YYYY-MM-DDTHH:MM:SS`, optional fraction (any digits, read to
    /// the millisecond), then `Z` or `±HH:MM` (`±HHMM`, `±HH`); a missing zone is UTC (Python's
    /// `datetime.isoformat()` of a naive time). A space may replace the `T`. Nil otherwise.
    package static func milliseconds(_ text: String) -> UInt64? {
        let b = Array(text.utf8)
        var at = 0
        func number(_ digits: Int) -> Int? {
            guard at + digits <= b.count else { return nil }
            var value = 0
            for byte in b[at..<(at + digits)] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            at += digits
            return value
        }
        func expect(_ characters: String) -> Bool {
            guard at < b.count, characters.utf8.contains(b[at]) else { return false }
            at += 1
            return true
        }
        guard let year = number(4), expect("-"), let month = number(2), expect("-"), let day = number(2),
              expect("Tt "), let hour = number(2), expect(":"), let minute = number(2), expect(":"),
              let second = number(2) else { return nil }
        guard (1970...9999).contains(year), (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60,
              second <= 60 else { return nil }
        var millis = 0
        if at < b.count, b[at] == UInt8(ascii: ".") || b[at] == UInt8(ascii: ",") {
            at += 1
            var digits = 0
            while at < b.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b[at]) {
                if digits < 3 { millis = millis * 10 + Int(b[at] - UInt8(ascii: "0")) }
                digits += 1
                at += 1
            }
            guard digits > 0 else { return nil }
            if digits < 3 { for _ in digits..<3 { millis *= 10 } }
        }
        var offsetMinutes = 0
        if at < b.count {
            if expect("Zz") {
                // UTC
            } else if b[at] == UInt8(ascii: "+") || b[at] == UInt8(ascii: "-") {
                let sign = b[at] == UInt8(ascii: "-") ? -1 : 1
                at += 1
                guard let hours = number(2), hours < 24 else { return nil }
                var minutes = 0
                if at < b.count {
                    _ = expect(":")
                    guard let parsed = number(2), parsed < 60 else { return nil }
                    minutes = parsed
                }
                offsetMinutes = sign * (hours * 60 + minutes)
            } else {
                return nil
            }
        }
        guard at == b.count else { return nil }
        // Days from the civil date (Howard Hinnant's algorithm).
        let y = month <= 2 ? year - 1 : year
        let era = y / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offsetMinutes * 60
        guard seconds >= 0 else { return nil }
        return UInt64(seconds) * 1000 + UInt64(millis)
    }
}
