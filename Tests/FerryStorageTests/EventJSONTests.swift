import Foundation
import Testing
@testable import FerryProtocol
@testable import FerryStorage

/// The delivery encoders' fast paths write exactly what the general code wrote before them.
@Suite struct EventJSONTests {
    @Test(arguments: [
        "{}", " {} \n", "{\"a\":1}", "{\"a\":1,\"a\":2}", "{\"plan\":\"pro\",\"n\":-0.5,\"ok\":true,\"x\":null,\"l\":[1,[2,{}],\"s\"]}",
        "{\"a\":\"\\/\\b\\f\\n\\r\\t\\\"\\\\\"}", "{\n  \"a\": [ ]\n}", "{\"a\":0}", "{\"a\":123456789012345}", "{\"a\":1e400}",
        "{\"a\":1e3}", "{\"a\":12345678901234567890123}", "{\"a\":\"\\u00e9\\ud83d\\ude00\"}", "{\"é\":1}",
    ])
    func objectsAreObjects(_ text: String) {
        #expect(JSONWriter.isJSONObject(Array(text.utf8)))
    }

    /// Not one JSON object by Ferry's reader (docs/PROTOCOL.md, "JSON"): an unpaired surrogate
    /// escape among them, whatever another parser makes of it.
    @Test(arguments: [
        "", "[]", "\"a\"", "1", "{", "{\"a\":}", "{\"a\":1,}", "{\"a\" 1}", "{\"a\":01}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\u{1}\"}",
        "{} {}", "{\"a\":tru}", "{\"a\":-}", "{\"a\":1.}", "\u{FEFF}{}", String(repeating: "{\"a\":", count: 70) + "1" + String(repeating: "}", count: 70),
    ])
    func otherTextIsNot(_ text: String) {
        #expect(!JSONWriter.isJSONObject(Array(text.utf8)))
    }

    @Test(arguments: ["", "plain", "quote \" and \\ back", "tab\tnew\nline\r", "\u{1}\u{1f}", "é ü 🚀", "a\u{0}b"])
    func stringsEscapeAsBefore(_ text: String) {
        // The byte-by-byte escaping this replaced.
        var expected: [UInt8] = [UInt8(ascii: "\"")]
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): expected += Array("\\\"".utf8)
            case UInt8(ascii: "\\"): expected += Array("\\\\".utf8)
            case UInt8(ascii: "\n"): expected += Array("\\n".utf8)
            case UInt8(ascii: "\r"): expected += Array("\\r".utf8)
            case UInt8(ascii: "\t"): expected += Array("\\t".utf8)
            case 0..<0x20: expected += Array(String(format: "\\u%04x", byte).utf8)
            default: expected.append(byte)
            }
        }
        expected.append(UInt8(ascii: "\""))
        var out: [UInt8] = [7]
        JSONText.appendString(text, to: &out)
        #expect(out == [7] + expected)
        var decoded: [UInt8] = []
        Array(text.utf8).withUnsafeBytes { JSONText.appendString(decoding: $0, to: &decoded) }
        #expect(decoded == expected)
        // The reserved-space writer of the stored event's members writes the same bytes.
        for decoding in [false, true] {
            var written: [UInt8] = [7]
            var first = true
            JSONOutput.write(into: &written, maxCount: 6 * text.utf8.count + 2, first: &first) { json in
                Array(text.utf8).withUnsafeBytes { decoding ? json.string(decoding: $0) : json.string(utf8: $0) }
            }
            #expect(written == [7] + expected)
        }
    }

    @Test(arguments: [UInt64(0), 9, 10, 99, 1000, 4242, UInt64(UInt32.max), UInt64.max])
    func integersAsBefore(_ value: UInt64) {
        var expected: [UInt8] = []
        JSONText.appendInteger(value, to: &expected)
        var written: [UInt8] = []
        var first = true
        JSONOutput.write(into: &written, maxCount: 20, first: &first) { $0.integer(value) }
        #expect(written == expected && expected == Array(String(value).utf8))
    }

    /// The bound reserved for an event holds the worst case: every string byte escaped as six.
    @Test func worstCaseEscapingFits() throws {
        let control = String(repeating: "\u{1}", count: 300)
        let event = WireEvent(id: EventID(high: 0x0190_0000_0000_7001, low: 0x8000_0000_0000_0001), timestamp: 1, sequence: 2, pid: 3,
                              type: .track, source: control, name: control, userID: control, properties: Array(control.utf8))
        let metadata = EventOrigin(uid: 1, gid: 2, pid: 3, comm: control, exe: control, unit: control).metadata
        let frame = event.encoded()
        let stored = StoredEvent(position: LogPosition(segment: 1, offset: 16), size: LogRecord.framedSize(frameSize: frame.count),
                                 acceptedAt: 4, frame: frame, metadata: metadata)
        var lines: [UInt8] = []
        JSONWriter.appendLines(for: [stored, stored], consent: nil, lineFormat: 3, disclosure: .all, to: &lines)
        let line = try #require(lines.split(separator: UInt8(ascii: "\n")).first)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any])
        #expect(object["name"] as? String == control && object["properties_raw"] as? String == control)
        #expect((object["origin"] as? [String: Any])?["unit"] as? String == control)
        #expect(lines.count == 2 * (line.count + 1))
    }

    @Test func invalidUTF8IsReadAsStringDecodingReadsIt() {
        let bytes: [UInt8] = [0x61, 0xFF, 0x62, 0xC3]
        var out: [UInt8] = []
        bytes.withUnsafeBytes { JSONText.appendString(decoding: $0, to: &out) }
        var expected: [UInt8] = []
        JSONText.appendString(String(decoding: bytes, as: UTF8.self), to: &expected)
        #expect(out == expected)
    }

    @Test(arguments: [UInt64(0), 1, 9, 10, 99, 100, 1_714_564_800_000, UInt64.max])
    func integersAsDecimal(_ value: UInt64) {
        var out: [UInt8] = []
        JSONText.appendInteger(value, to: &out)
        #expect(String(decoding: out, as: UTF8.self) == String(value))
    }

    @Test func eventIDTextIsItsDescription() {
        for id in [EventID.zero, EventID(high: .max, low: .max), EventID(high: 0x0123_4567_89AB_CDEF, low: 0xFEDC_BA98_7654_3210)] {
            var out: [UInt8] = []
            id.appendText(to: &out)
            #expect(String(decoding: out, as: UTF8.self) == id.description)
        }
    }

    @Test func originFromMetadataMatchesTheOriginObject() throws {
        let origins = [
            EventOrigin(uid: 1000, gid: 100, pid: 4242, comm: "app \"x\"", exe: "/usr/bin/app", unit: nil),
            EventOrigin(uid: 0, gid: nil, pid: nil, comm: nil, exe: nil, unit: "a.service"),
        ]
        for origin in origins {
            var json = JSONWriter()
            json.originField(origin.metadata)
            var expected = JSONWriter()
            expected.rawField("origin", JSONWriter.originObject(origin))
            #expect(json.finish() == expected.finish())
        }
        var none = JSONWriter()
        none.originField(RecordMetadata())
        #expect(String(decoding: none.finish(), as: UTF8.self) == "{\"origin\":null}")
    }

    @Test func appendingWriterContinuesTheBuffer() {
        var out = Array("head".utf8)
        var json = JSONWriter(appendingTo: &out)
        json.field("a", UInt64(1))
        json.field("b", "x")
        json.finish(into: &out)
        #expect(String(decoding: out, as: UTF8.self) == "head{\"a\":1,\"b\":\"x\"}")
    }
}
