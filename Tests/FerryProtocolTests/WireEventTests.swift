import FerryProtocol
import Testing

/// An independent encoder written from the byte table in docs/PROTOCOL.md, to check the real one
/// against something that does not share its code.
func referenceEventFrame(_ event: WireEvent) -> [UInt8] {
    func le(_ value: UInt64, _ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
    let source = Array(event.source.utf8), name = Array(event.name.utf8)
    let user = Array(event.userID.utf8), once = Array(event.onceKey.utf8)
    var out: [UInt8] = []
    out += (0..<8).map { UInt8(truncatingIfNeeded: event.id.high >> (56 - 8 * $0)) }
    out += (0..<8).map { UInt8(truncatingIfNeeded: event.id.low >> (56 - 8 * $0)) }
    out += le(event.timestamp, 8)
    out += le(event.sequence, 8)
    out += le(UInt64(event.pid), 4)
    out += [event.type.rawValue, event.category]
    out += le(UInt64(event.flags.rawValue), 2)
    for field in [source, name, user, once] { out += le(UInt64(field.count), 2) }
    out += le(UInt64(event.properties.count), 4)
    return out + source + name + user + once + event.properties
}

func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef")
    return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0xF)]] })
}

func bytes(hex text: String) -> [UInt8] {
    let digits = Array(text.utf8).filter { $0 != UInt8(ascii: " ") }
    return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)! }
}

/// Checks that `body` throws a ``ProtocolError`` of the same kind as `kind` and returns it.
@discardableResult
func expectProtocolError<T>(
    _ kind: ProtocolError, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> T
) -> ProtocolError? {
    do {
        let value = try body()
        Issue.record("expected \(kind), got \(value)", sourceLocation: sourceLocation)
        return nil
    } catch {
        guard let error = error as? ProtocolError else {
            Issue.record("expected a ProtocolError, got \(error)", sourceLocation: sourceLocation)
            return nil
        }
        #expect(kind ~= error as any Error, "expected \(kind), got \(error)", sourceLocation: sourceLocation)
        return error
    }
}

/// The worked example of docs/PROTOCOL.md; `client/python/ferry_emit.py --selftest` checks the
/// same bytes.
enum WorkedExample {
    static let event = WireEvent(
        id: EventID("0190f5c2-7a3b-7c4d-8e5f-0123456789ab")!, timestamp: 1_700_000_000_000, sequence: 1, pid: 4242,
        type: .track, source: "app", name: "Signed Up", properties: Array(#"{"plan":"pro"}"#.utf8)
    )
    static let frameHex = "0190f5c27a3b7c4d8e5f0123456789ab" + "0068e5cf8b010000" + "0100000000000000" + "92100000"
        + "01" + "00" + "0000" + "0300" + "0900" + "0000" + "0000" + "0e000000"
        + "617070" + "5369676e6564205570" + "7b22706c616e223a2270726f227d"
    static let headerHex = "0101000007000000"

    /// The same event from a protocol 2 client with session `7f3c2a1e-9b8d-4c6f-a5e4-d3c2b1a09f8e`:
    /// flag bit 15 set, then the extension block (tag 1, length 16, the session).
    static let session = EventID("7f3c2a1e-9b8d-4c6f-a5e4-d3c2b1a09f8e")!
    static var sessionEvent: WireEvent {
        var event = Self.event
        event.session = session
        return event
    }
    static let sessionFrameHex = "0190f5c27a3b7c4d8e5f0123456789ab" + "0068e5cf8b010000" + "0100000000000000" + "92100000"
        + "01" + "00" + "0080" + "0300" + "0900" + "0000" + "0000" + "0e000000"
        + "617070" + "5369676e6564205570" + "7b22706c616e223a2270726f227d"
        + "0100" + "10000000" + "7f3c2a1e9b8d4c6fa5e4d3c2b1a09f8e"
    static let sessionHeaderHex = "0201000007000000"
}

@Suite("WireEvent")
struct WireEventTests {
    static let id = EventID("0190f5c2-7a3b-7c4d-8e5f-0123456789ab")!

    static let events: [WireEvent] = [
        WorkedExample.event,
        // Every text field empty, no properties: the frame is the bare fixed header.
        WireEvent(id: .zero, timestamp: 0, sequence: 0, pid: 0, type: .identify, source: "", name: ""),
        // Unicode in every text field (multi-byte, astral, combining, ZWJ sequences, NUL).
        WireEvent(
            id: id, timestamp: 1, sequence: 2, pid: 3, type: .screen, category: 7, flags: .localOnly,
            source: "ferry·app ✈︎", name: "Écran d’accueil 🇫🇷 👩‍👩‍👧‍👦", userID: "ユーザー\u{0}42",
            onceKey: "e\u{301}te\u{301} 🚀", properties: Array(#"{"emoji":"😀","ß":"straße"}"#.utf8)
        ),
        // Extreme fixed-field values.
        WireEvent(
            id: EventID(high: .max, low: .max), timestamp: .max, sequence: .max, pid: .max, type: .page,
            category: .max, flags: EventFlags(rawValue: 0x7FFF) /* every bit but `extended`, which the encoder sets */, source: "s", name: "n", userID: "u", onceKey: "o"
        ),
        // Properties larger than 64 KiB (its length field is 32 bits).
        WireEvent(
            id: id, timestamp: 1_700_000_000_000, sequence: 99, pid: 1, type: .track, source: "big", name: "Large",
            properties: Array(("{\"blob\":\"" + String(repeating: "x", count: 200_000) + "\"}").utf8)
        ),
        // Text fields at their 65 535-byte limit.
        WireEvent(
            id: id, timestamp: 5, sequence: 6, pid: 7, type: .group,
            source: String(repeating: "a", count: 0xFFFF), name: String(repeating: "é", count: 0xFFFF / 2) + "b",
            userID: String(repeating: "u", count: 0xFFFF), onceKey: String(repeating: "k", count: 0xFFFF)
        ),
    ]

    @Test("encode/decode round trip", arguments: events)
    func roundTrip(event: WireEvent) throws {
        let frame = event.encoded()
        #expect(frame.count == WireEvent.fixedHeaderSize + event.source.utf8.count + event.name.utf8.count
            + event.userID.utf8.count + event.onceKey.utf8.count + event.properties.count)
        #expect(frame == referenceEventFrame(event), "encoder disagrees with the documented layout")
        let decoded = try WireEvent(decoding: frame)
        #expect(decoded == event)
        #expect(decoded.encoded() == frame)

        let header = try EventHeader(frame)
        #expect(header.id == event.id)
        #expect(header.timestamp == event.timestamp)
        #expect(header.sequence == event.sequence)
        #expect(header.pid == event.pid)
        #expect(header.type == event.type)
        #expect(header.category == event.category)
        #expect(header.flags == event.flags)
        #expect(header.sourceLength == event.source.utf8.count)
        #expect(header.nameLength == event.name.utf8.count)
        #expect(header.userIDLength == event.userID.utf8.count)
        #expect(header.onceKeyLength == event.onceKey.utf8.count)
        #expect(header.propertiesLength == event.properties.count)
    }

    @Test("every event type round-trips with its code at offset 36", arguments: EventType.allCases)
    func types(type: EventType) throws {
        let event = WireEvent(id: Self.id, timestamp: 1, sequence: 1, pid: 1, type: type, source: "s", name: "n")
        let frame = event.encoded()
        #expect(frame[36] == type.rawValue)
        #expect(try WireEvent(decoding: frame).type == type)
        #expect(EventType(name: type.description) == type)
    }

    @Test("type codes and names are the documented ones")
    func typeTable() {
        #expect(EventType.allCases.map { "\($0.rawValue)=\($0)" }
            == ["1=track", "2=screen", "3=identify", "4=group", "5=alias", "6=page"])
        #expect(EventType(name: "Track") == nil)
        #expect(EventFlags.localOnly.rawValue == 1)
    }

    @Test("worked example in docs/PROTOCOL.md is byte-exact")
    func workedExample() throws {
        let frame = WorkedExample.event.encoded()
        print("worked example event frame: \(hex(frame))")
        #expect(hex(frame) == WorkedExample.frameHex)
        #expect(frame.count == 52 + 3 + 9 + 14)
        #expect(try WireEvent(decoding: bytes(hex: WorkedExample.frameHex)) == WorkedExample.event)
        #expect(hex(MessageHeader(version: 1, kind: .events, requestID: 7).encoded()) == WorkedExample.headerHex)
    }

    @Test("protocol 2 worked example with a session in docs/PROTOCOL.md is byte-exact")
    func workedExampleWithSession() throws {
        let frame = WorkedExample.sessionEvent.encoded()
        #expect(hex(frame) == WorkedExample.sessionFrameHex)
        #expect(try WireEvent(decoding: frame) == WorkedExample.sessionEvent)
        let header = try EventHeader(frame)
        #expect(header.session == WorkedExample.session)
        #expect(header.flags.contains(.extended))
        #expect(header.extensionsOffset == 52 + 3 + 9 + 14)
        #expect(hex(MessageHeader(kind: .events, requestID: 7).encoded()) == WorkedExample.sessionHeaderHex)
        // What a protocol 1 agent is sent instead after refusing version 2.
        #expect(hex(WireEvent.strippingExtensions(frame)) == WorkedExample.frameHex)
    }

    @Test("properties are carried as opaque bytes (the agent never parses them, only checks UTF-8)")
    func opaqueProperties() throws {
        for properties: [UInt8] in [[], Array("[1,2]".utf8), Array("not json".utf8), [0x7B, 0x00, 0xC3, 0xA9]] {
            let event = WireEvent(id: Self.id, timestamp: 1, sequence: 1, pid: 1, type: .track,
                                  source: "s", name: "n", properties: properties)
            #expect(try WireEvent(decoding: event.encoded()).properties == properties)
        }
    }

    // MARK: Rejections

    @Test("frames shorter than the fixed header are truncated", arguments: [0, 1, 15, 16, 17, 36, 51])
    func truncatedFrames(length: Int) {
        let frame = Array(WorkedExample.event.encoded().prefix(length))
        let error = expectProtocolError(.truncated("")) { try EventHeader(frame) }
        #expect(error?.code == .malformedMessage)
        #expect(error?.rejectReason == .malformed)
        expectProtocolError(.truncated("")) { try WireEvent(decoding: frame) }
    }

    @Test("the frame must be exactly as long as its header declares", arguments: [-30, -14, -1, 1, 2, 1000])
    func declaredLengthMismatch(delta: Int) {
        var frame = WorkedExample.event.encoded()
        if delta < 0 { frame.removeLast(-delta) } else { frame += [UInt8](repeating: 0x20, count: delta) }
        // Shorter than declared is documented as `truncated`, longer as `malformed`; both are
        // rejected with reason `malformed` and reported as `malformed_message`.
        let kind: ProtocolError = delta < 0 ? .truncated("") : .malformed("")
        let error = expectProtocolError(kind) { try EventHeader(frame) }
        #expect(error?.rejectReason == .malformed)
        #expect(error?.code == .malformedMessage)
        expectProtocolError(kind) { try WireEvent(decoding: frame) }
    }

    @Test("a length field that points past the end is refused, whichever field it is", arguments: [40, 42, 44, 46, 48])
    func lengthFieldPastEnd(offset: Int) {
        var frame = WorkedExample.event.encoded()
        frame[offset] &+= 1
        expectProtocolError(.truncated("")) { try EventHeader(frame) }
        frame[offset + 1] = 0xFF  // a huge length, far beyond the frame
        expectProtocolError(.truncated("")) { try WireEvent(decoding: frame) }
    }

    @Test("unknown event type codes are malformed", arguments: [0, 7, 8, 0x7F, 0xFF] as [UInt8])
    func unknownType(code: UInt8) {
        var frame = WorkedExample.event.encoded()
        frame[36] = code
        let error = expectProtocolError(.malformed("")) { try EventHeader(frame) }
        #expect(error?.rejectReason == .malformed)
        #expect(error?.detail.contains("\(code)") == true)
        expectProtocolError(.malformed("")) { try WireEvent(decoding: frame) }
    }

    static let invalidUTF8: [[UInt8]] = [
        [0xFF],                     // never valid
        [0xC0, 0x80],               // overlong NUL
        [0xE2, 0x82],               // truncated sequence
        [0xED, 0xA0, 0x80],         // UTF-16 surrogate
        [0xF4, 0x90, 0x80, 0x80],   // above U+10FFFF
        [0x61, 0x80, 0x62],         // stray continuation byte
    ]

    @Test("invalid UTF-8 in any text field is refused at ingest and by the full decoder",
          arguments: ["source", "name", "user", "once"], invalidUTF8)
    func invalidText(field: String, bad: [UInt8]) throws {
        // Build the frame by hand: the Swift encoder only takes valid strings.
        var event = WireEvent(id: Self.id, timestamp: 1, sequence: 1, pid: 1, type: .track,
                              source: "s", name: "n", userID: "u", onceKey: "o", properties: Array("{}".utf8))
        let marker = "\u{1}\u{2}\u{3}\u{4}"  // replaced below by the bad bytes, same length or not
        switch field {
        case "source": event.source = marker
        case "name": event.name = marker
        case "user": event.userID = marker
        default: event.onceKey = marker
        }
        var frame = event.encoded()
        let start = try #require(frame.indices.dropFirst(52).first { Array(frame[$0..<min($0 + 4, frame.count)]) == [1, 2, 3, 4] })
        frame.replaceSubrange(start..<start + 4, with: bad)
        let lengthOffset = ["source": 40, "name": 42, "user": 44, "once": 46][field]!
        frame[lengthOffset] = UInt8(bad.count)

        // The ingest path (the fixed header) and the full decoder both refuse it.
        let atIngest = expectProtocolError(.invalidUTF8("")) { try EventHeader(frame) }
        #expect(atIngest?.rejectReason == .invalidUTF8)
        let error = expectProtocolError(.invalidUTF8("")) { try WireEvent(decoding: frame) }
        #expect(error?.rejectReason == .invalidUTF8)
        #expect(error?.code == .malformedMessage)
    }

    @Test("properties that are not valid UTF-8 are refused at ingest and by the full decoder", arguments: invalidUTF8)
    func invalidProperties(bad: [UInt8]) {
        let frame = WireEvent(id: Self.id, timestamp: 1, sequence: 1, pid: 1, type: .track, source: "s", name: "n",
                              properties: Array(#"{"a":""#.utf8) + bad + Array(#""}"#.utf8)).encoded()
        let atIngest = expectProtocolError(.invalidUTF8("")) { try EventHeader(frame) }
        #expect(atIngest?.rejectReason == .invalidUTF8)
        #expect(atIngest?.detail == "properties is not valid UTF-8")
        expectProtocolError(.invalidUTF8("")) { try WireEvent(decoding: frame) }
    }

    @Test("the fixed header checks the length before the type")
    func checkOrder() {
        var short = [UInt8](repeating: 0, count: 40)
        short[36] = 99
        expectProtocolError(.truncated("")) { try EventHeader(short) }
    }
}
