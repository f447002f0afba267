import FerryProtocol
import Foundation
import Testing

/// The event frame's extension block (protocol version 2).
@Suite("Event extensions")
struct ExtensionBlockTests {
    static let id = EventID("0190f5c2-7a3b-7c4d-8e5f-0123456789ab")!
    static let session = EventID("7f3c2a1e-9b8d-4c6f-a5e4-d3c2b1a09f8e")!

    static func event(session: EventID? = nil, extensions: [EventExtension] = []) -> WireEvent {
        WireEvent(id: id, timestamp: 1, sequence: 7, pid: 1, type: .track, flags: .localOnly, source: "s", name: "n",
                  properties: Array("{}".utf8), session: session, extensions: extensions)
    }

    /// A frame without extensions, then `block` appended with the extended flag set by hand.
    static func frame(withBlock block: [UInt8]) -> [UInt8] {
        var frame = event().encoded()
        frame[39] |= 0x80
        return frame + block
    }

    static func entry(_ tag: UInt16, _ value: [UInt8], declaredLength: UInt32? = nil) -> [UInt8] {
        var out: [UInt8] = []
        appendLE(tag, to: &out)
        appendLE(declaredLength ?? UInt32(value.count), to: &out)
        return out + value
    }

    @Test("a session and unknown non-critical fields round-trip; the extended flag follows the content")
    func roundTrip() throws {
        let other = EventExtension(tag: .init(rawValue: 0x0042), value: Array("future".utf8))
        let event = Self.event(session: Self.session, extensions: [other])
        let frame = event.encoded()
        let decoded = try WireEvent(decoding: frame)
        #expect(decoded == event)
        #expect(decoded.flags == .localOnly)
        let header = try EventHeader(frame)
        #expect(header.flags == [.localOnly, .extended])
        #expect(header.session == Self.session)
        #expect(header.extensions(in: frame).map(\.tag) == [.session, other.tag])
        frame.withUnsafeBytes { #expect(EventHeader.session(ofValidated: $0) == Self.session) }
        // Without extensions the frame is a version 1 frame.
        let plain = Self.event().encoded()
        #expect(try EventHeader(plain).flags == .localOnly)
        #expect(WireEvent.strippingExtensions(plain) == plain)
        #expect(WireEvent.strippingExtensions(frame) == plain)
    }

    @Test("an unknown critical field is refused as unsupported_field; an unknown ordinary one is kept")
    func criticalFields() throws {
        let critical = Self.frame(withBlock: Self.entry(0x8001, [1, 2, 3]))
        let error = expectProtocolError(.unsupportedField("")) { try EventHeader(critical) }
        #expect(error?.rejectReason == .unsupportedField)
        #expect(error?.detail.contains("0x8001") == true)
        let ordinary = Self.frame(withBlock: Self.entry(0x0001, Self.session.bytes) + Self.entry(0x7FFF, [9]))
        #expect(try EventHeader(ordinary).session == Self.session)
        #expect(try WireEvent(decoding: ordinary).extensions == [EventExtension(tag: .init(rawValue: 0x7FFF), value: [9])])
    }

    @Test("a malformed block is refused", arguments: [
        ("cut-short entry header", [0x01, 0x00, 0x10]),
        ("value past the end", entry(0x0001, Array(repeating: 0, count: 15), declaredLength: 16)),
        ("session of the wrong size", entry(0x0001, [1, 2, 3])),
        ("repeated tag", entry(0x0002, [1]) + entry(0x0002, [2])),
        ("length near UInt32.max", entry(0x0002, [], declaredLength: .max)),
    ] as [(String, [UInt8])])
    func malformed(_ label: String, block: [UInt8]) {
        expectProtocolError(.malformed("")) { try EventHeader(Self.frame(withBlock: block)) }
    }

    @Test("an empty block with the flag set is allowed; trailing bytes without the flag are not")
    func flagAndLength() throws {
        #expect(try EventHeader(Self.frame(withBlock: [])).session == nil)
        var frame = Self.event().encoded()
        frame += Self.entry(0x0001, Self.session.bytes)
        expectProtocolError(.malformed("")) { try EventHeader(frame) }
    }

    // MARK: The event-model fields (tags 2–5)

    static func modelEvent(
        anonymousID: String = "", groupID: String = "", previousID: String = "", context: String = ""
    ) -> WireEvent {
        WireEvent(id: id, timestamp: 1, sequence: 7, pid: 1, type: .group, source: "s", name: "n",
                  properties: Array("{}".utf8), anonymousID: anonymousID, groupID: groupID, previousID: previousID,
                  context: Array(context.utf8))
    }

    @Test("anonymousId, groupId, previousId and context round-trip as tags 2–5, each only when set")
    func modelFieldsRoundTrip() throws {
        let event = Self.modelEvent(anonymousID: "anon ✈︎", groupID: "acme", previousID: "old-42",
                                    context: #"{"app":{"name":"x"},"locale":"fr-FR"}"#)
        let frame = event.encoded()
        let header = try EventHeader(frame)
        #expect(header.flags.contains(.extended))
        #expect(header.extensions(in: frame).map(\.tag) == [.anonymousID, .groupID, .previousID, .context])
        #expect(header.extensions(in: frame).map(\.tag.rawValue) == [2, 3, 4, 5])
        let decoded = try WireEvent(decoding: frame)
        #expect(decoded == event)
        #expect(decoded.extensions.isEmpty)
        #expect(decoded.encoded() == frame)
        // One field alone sets the flag and adds one entry; none leaves a version 1 frame.
        let alone = Self.modelEvent(previousID: "p").encoded()
        #expect(try EventHeader(alone).extensions(in: alone) == [EventExtension(tag: .previousID, value: Array("p".utf8))])
        #expect(!(try EventHeader(Self.modelEvent().encoded()).flags.contains(.extended)))
        // Falling back to version 1 drops them with the rest of the block.
        #expect(try WireEvent(decoding: WireEvent.strippingExtensions(frame)) == Self.modelEvent())
        #expect(EventExtension.Tag.known.isSuperset(of: [.anonymousID, .groupID, .previousID, .context]))
        #expect(!EventExtension.Tag.context.isCritical)
    }

    @Test("an identifier may be 1024 bytes; 1025 is refused invalid_field", arguments: [2, 3, 4] as [UInt16])
    func identifierLimit(tag: UInt16) throws {
        // The limit counts bytes: 512 two-byte characters fit.
        let fits = Self.frame(withBlock: Self.entry(tag, Array(String(repeating: "é", count: 512).utf8)))
        #expect(try EventHeader(fits).extensions(in: fits).first?.value.count == 1024)
        let long = Self.frame(withBlock: Self.entry(tag, Array(repeating: UInt8(ascii: "x"), count: 1025)))
        let error = expectProtocolError(.invalidField("")) { try EventHeader(long) }
        #expect(error?.rejectReason == .invalidField)
        #expect(error?.code == .malformedMessage)
        #expect(error?.detail.contains("1025") == true)
        expectProtocolError(.invalidField("")) { try WireEvent(decoding: long) }
    }

    @Test("an identifier or context that is not UTF-8 is refused invalid_utf8",
          arguments: [2, 3, 4, 5] as [UInt16], WireEventTests.invalidUTF8)
    func modelFieldUTF8(tag: UInt16, bad: [UInt8]) {
        let value = tag == 5 ? Array(#"{"a":""#.utf8) + bad + Array(#""}"#.utf8) : bad
        let error = expectProtocolError(.invalidUTF8("")) { try EventHeader(Self.frame(withBlock: Self.entry(tag, value))) }
        #expect(error?.rejectReason == .invalidUTF8)
    }

    static let notObjects = [
        "[1,2]", "\"text\"", "42", "null", "{", "}", "{\"a\":}", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "{\"a\":1}{}",
        "{\"a\":1} x", "{\"a\":tru}", "{\"a\":01}", "{\"a\":1.}", "{\"a\":-}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}",
        "{\"a\":\"line\nbreak\"}", "{\"a\":[1,]}", "{\"a\":NaN}", " ", "{\"locale\":\"en\",\"x\":\"\\ud800\"}",
        "{\"a\":\"\\udc00\"}", "{\"a\":\"\\ud83d\\u0041\"}",
        String(repeating: "{\"a\":", count: 70) + "1" + String(repeating: "}", count: 70),
    ]

    @Test("a context that is not one JSON object is refused invalid_field", arguments: notObjects)
    func contextNotObject(text: String) {
        let frame = Self.frame(withBlock: Self.entry(5, Array(text.utf8)))
        let error = expectProtocolError(.invalidField("")) { try EventHeader(frame) }
        #expect(error?.rejectReason == .invalidField)
        #expect(error?.detail.contains("JSON object") == true)
    }

    static let objects = [
        "{}", " { } ", "{\"a\":1}", "{\"a\":[1,-2.5e+3,0,true,false,null,\"\\\"\\u00e9\\n\"],\"b\":{\"c\":{}}}",
        "{\n  \"locale\": \"fr-FR\",\n  \"ip\": \"0.0.0.0\"\n}\n", "{\"é\":\"😀\",\"a\":0.5E-1}",
        String(repeating: "{\"a\":", count: 60) + "1" + String(repeating: "}", count: 60),
    ]

    @Test("a context that is one JSON object (whitespace around it allowed) is accepted as sent", arguments: objects)
    func contextObject(text: String) throws {
        // The check agrees with Foundation's parser on what an object is.
        #expect((try JSONSerialization.jsonObject(with: Data(text.utf8))) is [String: Any])
        let event = Self.modelEvent(context: text)
        #expect(try WireEvent(decoding: event.encoded()).context == Array(text.utf8))
    }

    @Test("empty values count as not set")
    func emptyValues() throws {
        let frame = Self.frame(withBlock: Self.entry(2, []) + Self.entry(3, []) + Self.entry(4, []) + Self.entry(5, []))
        let decoded = try WireEvent(decoding: frame)
        #expect(decoded.anonymousID.isEmpty && decoded.groupID.isEmpty && decoded.previousID.isEmpty && decoded.context.isEmpty)
        #expect(!decoded.isExtended)
    }

    @Test("a stored frame with fields the agent did not check stays readable without the check")
    func uncheckedStoredFrame() throws {
        let frame = Self.frame(withBlock: Self.entry(2, [0x61, 0xFF]) + Self.entry(5, Array("[1]".utf8)))
        expectProtocolError(.invalidUTF8("")) { try WireEvent(decoding: frame) }
        let decoded = try WireEvent(decoding: frame, checkingFields: false)
        #expect(decoded.anonymousID == "a\u{FFFD}")
        #expect(decoded.context == Array("[1]".utf8))
    }

    /// The hex of the "Worked example: event-model fields" block of docs/PROTOCOL.md.
    static func documentedModelExample() throws -> [UInt8] {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/PROTOCOL.md")
        let text = try String(contentsOf: url, encoding: .utf8)
        let section = try #require(text.range(of: "#### Worked example: event-model fields"))
        let fence = try #require(text.range(of: "```\n", range: section.upperBound..<text.endIndex))
        let end = try #require(text.range(of: "```", range: fence.upperBound..<text.endIndex))
        var digits = ""
        for line in text[fence.upperBound..<end.lowerBound].split(separator: "\n") {
            // The hex comes first; two or more spaces separate it from the comment.
            let code = line.range(of: "  ").map { line[..<$0.lowerBound] } ?? line[...]
            digits += code.filter { $0 != " " }
        }
        return bytes(hex: digits)
    }

    @Test("the event-model worked example in docs/PROTOCOL.md is byte-exact")
    func documentedExample() throws {
        let event = WireEvent(
            id: Self.id, timestamp: 1_700_000_000_000, sequence: 2, pid: 4242, type: .group, source: "app", name: "",
            session: Self.session, anonymousID: "anon-7", groupID: "acme", context: Array(#"{"locale":"fr-FR"}"#.utf8))
        let documented = try Self.documentedModelExample()
        #expect(hex(event.encoded()) == hex(documented))
        #expect(try WireEvent(decoding: documented) == event)
    }
}
