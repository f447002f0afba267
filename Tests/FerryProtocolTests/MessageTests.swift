import FerryProtocol
import Testing

@Suite("MessageHeader")
struct MessageHeaderTests {
    static let kinds: [MessageKind] = [.events, .ack, .error]

    @Test("round trip", arguments: kinds, [0, 1, 7, 0xDEAD_BEEF, .max] as [UInt32])
    func roundTrip(kind: MessageKind, requestID: UInt32) throws {
        let header = MessageHeader(kind: kind, flags: UInt16(truncatingIfNeeded: requestID), requestID: requestID)
        let frame = header.encoded()
        #expect(frame.count == MessageHeader.size)
        #expect(try MessageHeader(decoding: frame) == header)
        #expect(MessageHeader.requestID(ofRaw: frame) == requestID)
    }

    @Test("layout: version, kind, flags u16le, request id u32le")
    func layout() {
        let frame = MessageHeader(version: 1, kind: .ack, flags: 0x0201, requestID: 0x0403_0201).encoded()
        #expect(frame == [1, 2, 0x01, 0x02, 0x01, 0x02, 0x03, 0x04])
        #expect(ferryProtocolVersion == 2)
        #expect(supportedProtocolVersions == 1...2)
        #expect(MessageHeader(kind: .events, requestID: 1).version == 2)
        #expect([MessageKind.events, .ack, .error].map(\.rawValue) == [1, 2, 3])
    }

    @Test("an empty header frame is truncated")
    func empty() {
        let error = expectProtocolError(.truncated("")) { try MessageHeader(decoding: []) }
        #expect(error?.code == .malformedMessage)
    }

    @Test("an unsupported version is reported before the size is checked", arguments: [
        [0], [3], [0xFF], [3, 1], [3, 1, 0, 0, 7, 0, 0, 0], [9] + [UInt8](repeating: 0, count: 40),
    ] as [[UInt8]])
    func unsupportedVersion(frame: [UInt8]) {
        let error = expectProtocolError(.unsupportedVersion("")) { try MessageHeader(decoding: frame) }
        #expect(error?.code == .unsupportedVersion)
        #expect(error?.detail.contains("\(frame[0])") == true)
    }

    @Test("a header of a supported version and the wrong size is malformed", arguments: [1, 2, 7, 9, 16])
    func wrongSize(length: Int) {
        var frame = MessageHeader(kind: .events, requestID: 5).encoded()
        frame = length <= frame.count ? Array(frame.prefix(length)) : frame + [UInt8](repeating: 0, count: length - frame.count)
        let error = expectProtocolError(.malformed("")) { try MessageHeader(decoding: frame) }
        #expect(error?.code == .malformedMessage)
    }

    @Test("an unknown kind is reported as such", arguments: [0, 4, 0x80, 0xFF] as [UInt8])
    func unknownKind(kind: UInt8) {
        let frame: [UInt8] = [1, kind, 0, 0, 9, 0, 0, 0]
        let error = expectProtocolError(.unknownKind("")) { try MessageHeader(decoding: frame) }
        #expect(error?.code == .unknownKind)
        #expect(MessageHeader.requestID(ofRaw: frame) == 9)
    }

    @Test("requestID(ofRaw:) reads bytes 4..<8 of any frame long enough, else 0")
    func requestIDOfRaw() {
        #expect(MessageHeader.requestID(ofRaw: []) == 0)
        #expect(MessageHeader.requestID(ofRaw: [1, 1, 0, 0, 7, 0, 0]) == 0)
        #expect(MessageHeader.requestID(ofRaw: [9, 9, 9, 9, 0x78, 0x56, 0x34, 0x12]) == 0x1234_5678)
        #expect(MessageHeader.requestID(ofRaw: [1, 1, 0, 0, 1, 0, 0, 0, 0xFF, 0xFF]) == 1)
    }
}

@Suite("AckCodec")
struct AckCodecTests {
    @Test("round trip of empty, single and large acks with every status and reason")
    func roundTrip() throws {
        let generator = EventIDGenerator()
        var all: [AckEntry] = []
        for status in EventStatus.allCases {
            for reason in RejectReason.allCases {
                all.append(AckEntry(id: generator.next(), status: status, reason: reason))
            }
        }
        let big = (0..<4096).map { AckEntry(id: generator.next(), status: EventStatus.allCases[$0 % 5]) }
        for entries in [[], [AckEntry(id: .zero, status: .accepted)], all, big] {
            let frame = AckCodec.encode(entries)
            #expect(frame.count == 4 + entries.count * AckEntry.size)
            #expect(try AckCodec.decode(frame) == entries)
        }
    }

    @Test("layout: count u32le, then 16-byte id, status, reason per entry")
    func layout() {
        let id = EventID("0190f5c2-7a3b-7c4d-8e5f-0123456789ab")!
        let frame = AckCodec.encode([
            AckEntry(id: id, status: .accepted),
            AckEntry(id: .zero, status: .rejected, reason: .malformed),
            AckEntry(id: id, status: .duplicate),
        ])
        #expect(hex(frame) == AckExample.hex)
        #expect(AckEntry.size == 18)
    }

    @Test("status and reason codes are the documented ones")
    func codeTables() {
        #expect(EventStatus.allCases.map { "\($0.rawValue)=\($0)" }
            == ["0=accepted", "1=duplicate", "2=rejected", "3=blocked", "4=suppressed"])
        #expect(RejectReason.allCases.map { "\($0.rawValue)=\($0)" }
            == ["0=none", "1=malformed", "2=too_large", "3=full", "4=storage", "5=shutting_down", "6=invalid_utf8",
                "7=unsupported_field", "8=invalid_field", "9=local_only", "10=no_op", "11=kill_switch",
                "12=tracking_disabled", "13=gdpr_data_usage_denied", "14=unknown_category", "15=feature_disabled",
                "16=consent_denied", "17=consent_undetermined", "18=once_key", "19=held", "20=plan_violation",
                "21=quarantined"])
        #expect(Set(RejectReason.rejections + RejectReason.consentBlocks + [.none, .localOnly, .onceKey, .held, .quarantined])
            == Set(RejectReason.allCases))
        #expect(RejectReason.allCases.allSatisfy { RejectReason(name: $0.description) == $0 })
    }

    @Test("frames shorter than the count are truncated", arguments: [0, 1, 3])
    func tooShort(length: Int) {
        expectProtocolError(.truncated("")) { try AckCodec.decode([UInt8](repeating: 0, count: length)) }
    }

    @Test("the frame size must match the count", arguments: [
        (count: 2, entries: 1), (count: 1, entries: 2), (count: 0, entries: 1), (count: 0xFFFF_FFFF, entries: 1),
    ])
    func countMismatch(shape: (count: UInt32, entries: Int)) {
        var frame = AckCodec.encode((0..<shape.entries).map { _ in AckEntry(id: .zero, status: .accepted) })
        frame.replaceSubrange(0..<4, with: withUnsafeBytes(of: shape.count.littleEndian, Array.init))
        expectProtocolError(.malformed("")) { try AckCodec.decode(frame) }
    }

    @Test("a partial trailing entry is malformed")
    func partialEntry() {
        var frame = AckCodec.encode([AckEntry(id: .zero, status: .accepted)])
        frame.removeLast()
        expectProtocolError(.malformed("")) { try AckCodec.decode(frame) }
        frame += [0, 0]
        expectProtocolError(.malformed("")) { try AckCodec.decode(frame) }
    }

    @Test("an unknown status is malformed", arguments: [5, 6, 0xFF] as [UInt8])
    func unknownStatus(status: UInt8) {
        var frame = AckCodec.encode([AckEntry(id: .zero, status: .accepted), AckEntry(id: .zero, status: .accepted)])
        frame[4 + 18 + 16] = status
        expectProtocolError(.malformed("")) { try AckCodec.decode(frame) }
    }

    @Test("an unknown reason code decodes as malformed rather than failing the whole ack")
    func unknownReason() throws {
        var frame = AckCodec.encode([AckEntry(id: .zero, status: .rejected, reason: .full)])
        frame[4 + 17] = 200
        #expect(try AckCodec.decode(frame) == [AckEntry(id: .zero, status: .rejected, reason: .malformed)])
    }
}

/// The ack body example of docs/PROTOCOL.md; `ferry_emit.py --selftest` decodes the same bytes.
enum AckExample {
    static let hex = "03000000"
        + "0190f5c27a3b7c4d8e5f0123456789ab" + "00" + "00"
        + "00000000000000000000000000000000" + "02" + "01"
        + "0190f5c27a3b7c4d8e5f0123456789ab" + "01" + "00"
}

@Suite("ErrorReply")
struct ErrorReplyTests {
    static let codes: [ErrorCode] = [.malformedMessage, .unsupportedVersion, .unknownKind, .messageTooLarge, .shuttingDown, .accessDenied]

    @Test("round trip", arguments: codes, ["", "protocol version 2 is not supported", "défaut ⚠️ 🚫"])
    func roundTrip(code: ErrorCode, message: String) throws {
        let reply = ErrorReply(code: code, message: message)
        let frame = reply.encoded()
        #expect(frame.count == 2 + message.utf8.count)
        #expect(try ErrorReply(decoding: frame) == reply)
    }

    @Test("layout: code u16le then the UTF-8 message; codes are the documented ones")
    func layout() {
        #expect(hex(ErrorReply(code: .unsupportedVersion, message: "v2").encoded()) == "02007632")
        #expect(Self.codes.map { "\($0.rawValue)=\($0)" } == [
            "1=malformed_message", "2=unsupported_version", "3=unknown_kind", "4=message_too_large", "5=shutting_down", "6=access_denied",
        ])
    }

    @Test("frames without a whole code are truncated", arguments: [0, 1])
    func tooShort(length: Int) {
        expectProtocolError(.truncated("")) { try ErrorReply(decoding: [UInt8](repeating: 1, count: length)) }
    }

    @Test("unknown codes are malformed", arguments: [0, 7, 0x0100, 0xFFFF] as [UInt16])
    func unknownCode(code: UInt16) {
        let frame = withUnsafeBytes(of: code.littleEndian, Array.init) + Array("x".utf8)
        expectProtocolError(.malformed("")) { try ErrorReply(decoding: frame) }
    }

    @Test("an invalid UTF-8 message is decoded with replacement characters, not refused")
    func lossyMessage() throws {
        let reply = try ErrorReply(decoding: [5, 0, 0x61, 0xFF, 0x62])
        #expect(reply.code == .shuttingDown)
        #expect(reply.message == "a\u{FFFD}b")
    }
}

@Suite("ProtocolError")
struct ProtocolErrorTests {
    static let mapping: [(error: ProtocolError, code: ErrorCode, reason: RejectReason)] = [
        (.truncated("t"), .malformedMessage, .malformed),
        (.malformed("m"), .malformedMessage, .malformed),
        (.invalidUTF8("u"), .malformedMessage, .invalidUTF8),
        (.unsupportedVersion("v"), .unsupportedVersion, .malformed),
        (.unknownKind("k"), .unknownKind, .malformed),
        (.tooLarge("l"), .messageTooLarge, .tooLarge),
        (.unsupportedField("f"), .malformedMessage, .unsupportedField),
    ]

    @Test("wire error code and reject reason of each kind", arguments: mapping)
    func codes(entry: (error: ProtocolError, code: ErrorCode, reason: RejectReason)) {
        #expect(entry.error.code == entry.code)
        #expect(entry.error.rejectReason == entry.reason)
    }

    @Test("~= compares the kind only; == compares the detail too")
    func matching() {
        let makers: [@Sendable (String) -> ProtocolError] = [
            ProtocolError.truncated, ProtocolError.malformed, ProtocolError.invalidUTF8,
            ProtocolError.unsupportedVersion, ProtocolError.unknownKind, ProtocolError.tooLarge,
            ProtocolError.unsupportedField,
        ]
        for (i, makeA) in makers.enumerated() {
            for (j, makeB) in makers.enumerated() {
                #expect((makeA("pattern") ~= makeB("some other detail") as any Error) == (i == j), "\(i) vs \(j)")
            }
        }
        #expect(ProtocolError.truncated("a") != .truncated("b"))
        #expect(ProtocolError.truncated("a") == .truncated("a"))
        struct Other: Error {}
        #expect(!(ProtocolError.malformed("") ~= Other()))
    }

    @Test("the kind patterns work in catch clauses and switches")
    func patterns() {
        func classify(_ frame: [UInt8]) -> String {
            do {
                _ = try MessageHeader(decoding: frame)
                return "ok"
            } catch ProtocolError.unsupportedVersion("") {
                return "version"
            } catch ProtocolError.unknownKind("") {
                return "kind"
            } catch {
                switch error {
                case ProtocolError.truncated(""): return "truncated"
                case ProtocolError.malformed(""): return "malformed"
                default: return "other"
                }
            }
        }
        #expect(classify([1, 1, 0, 0, 0, 0, 0, 0]) == "ok")
        #expect(classify([3]) == "version")
        #expect(classify([1, 9, 0, 0, 0, 0, 0, 0]) == "kind")
        #expect(classify([]) == "truncated")
        #expect(classify([1, 1]) == "malformed")
    }

    @Test("description names the kind and the detail")
    func description() {
        #expect(ProtocolError.tooLarge("70000 bytes").description == "tooLarge: 70000 bytes")
    }
}
