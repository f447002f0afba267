@testable import FerryProtocol
import Testing

@Suite("UTF-8 validation at ingest")
struct UTF8ValidationTests {
    static let cases: [(bytes: [UInt8], valid: Bool)] = [
        (Array("plain ascii".utf8), true),
        (Array("åpp ✈︎ 名前 🚢".utf8), true),
        ([0xC2, 0x80], true), ([0xDF, 0xBF], true),                   // 2-byte bounds
        ([0xE0, 0xA0, 0x80], true), ([0xEF, 0xBF, 0xBF], true),       // 3-byte bounds
        ([0xF0, 0x90, 0x80, 0x80], true), ([0xF4, 0x8F, 0xBF, 0xBF], true), // U+10000, U+10FFFF
        ([0xC0, 0x80], false), ([0xC1, 0xBF], false),                 // overlong 2-byte
        ([0xE0, 0x80, 0x80], false),                                  // overlong 3-byte
        ([0xED, 0xA0, 0x80], false),                                  // surrogate U+D800
        ([0xF0, 0x80, 0x80, 0x80], false),                            // overlong 4-byte
        ([0xF4, 0x90, 0x80, 0x80], false),                            // above U+10FFFF
        ([0xF5, 0x80, 0x80, 0x80], false), ([0xFF], false),
        ([0x80], false),                                              // lone continuation
        ([0xE2, 0x82], false), ([0x61, 0xF0, 0x9F, 0x9A], false),     // truncated sequences
        ([0xE2, 0x28, 0xA1], false),                                  // bad continuation
    ]

    @Test("agrees with the standard library on a table of edge cases", arguments: cases)
    func table(bytes: [UInt8], valid: Bool) {
        #expect(bytes.withUnsafeBytes { UTF8Validation.isValid($0) } == valid)
        #expect((String(validating: bytes, as: UTF8.self) != nil) == valid)
    }

    @Test("agrees with the standard library on random byte strings")
    func random() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let length = Int.random(in: 0...8, using: &generator)
            // Bias towards bytes that form multi-byte sequences.
            let bytes = (0..<length).map { _ in
                Bool.random(using: &generator) ? UInt8.random(in: 0x80...0xF5, using: &generator)
                    : UInt8.random(in: 0...0xFF, using: &generator)
            }
            let expected = String(validating: bytes, as: UTF8.self) != nil
            #expect(bytes.withUnsafeBytes { UTF8Validation.isValid($0) } == expected, "\(bytes)")
        }
    }

    @Test("EventHeader rejects invalid UTF-8 in each text field", arguments: [0, 1, 2, 3])
    func headerRejects(field: Int) {
        var values = ["src", "name", "user", "once"]
        values[field] = "XX"
        let event = WireEvent(id: EventID(high: 1, low: 1), timestamp: 1, sequence: 1, pid: 1, type: .track,
                              source: values[0], name: values[1], userID: values[2], onceKey: values[3])
        var frame = event.encoded()
        let offset = WireEvent.fixedHeaderSize + values[..<field].reduce(0) { $0 + $1.utf8.count }
        frame[offset] = 0xC0 // an overlong lead: "XX" becomes invalid
        do {
            _ = try EventHeader(frame)
            Issue.record("invalid UTF-8 in field \(field) was accepted")
        } catch {
            #expect(error.rejectReason == .invalidUTF8)
        }
    }
}
