import FerryProtocol
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
}
