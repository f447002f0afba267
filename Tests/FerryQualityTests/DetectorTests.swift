@testable import FerryQuality
import FerryProtocol
import Foundation
import Testing

/// Each detector on values it must find and on values it must leave alone (false positives).
@Suite struct DetectorTests {
    static func kind(_ text: String) -> DetectorKind? {
        var copy = text
        return copy.withUTF8 { Detectors.classify(UnsafeRawBufferPointer($0), kinds: .all, key: nil) }
    }

    @Test(arguments: [
        ("jane.doe@example.com", DetectorKind.email), ("j+tag@mail.example.co.uk", .email),
        ("+14155552671", .phone), ("+44 20 7946 0958", .phone), ("(415) 555-2671", .phone), ("415-555-2671", .phone),
        ("415.555.2671", .phone), ("1 415 555 2671", .phone), ("020 7946 0958", .phone), ("06 12 34 56 78", .phone), ("0171-1234567", .phone),
        ("203.0.113.42", .ip), ("10.0.0.1", .ip), ("2001:db8::8a2e:370:7334", .ip), ("::1", .ip), ("fe80::1", .ip),
        ("2001:0db8:0000:0000:0000:ff00:0042:8329", .ip), ("::ffff:192.0.2.128", .ip),
        ("4111111111111111", .card), ("4111 1111 1111 1111", .card), ("5555-5555-5555-4444", .card), ("378282246310005", .card),
        ("6011111111111117", .card),
        ("DE89370400440532013000", .iban), ("GB82 WEST 1234 5698 7654 32", .iban), ("FR1420041010050500013M02606", .iban),
    ])
    func finds(text: String, expected: DetectorKind) {
        #expect(Self.kind(text) == expected)
    }

    @Test(arguments: [
        "0190b3c4-2f1e-7a3b-9c4d-5e6f7a8b9c0d",  // a UUID
        "12345678-1234-1234-1234-123456789012",  // an all-digit UUID
        "2024-05-01T12:00:00Z", "2024-05-01", "12:00:00", "01-05-2024", "1700000000000",  // times
        "1.2.3", "v1.2.3.4", "256.1.1.1", "01.2.3.4",  // versions, not addresses
        "4111111111111112",  // fails Luhn
        "1234567812345670",  // passes Luhn, no card network starts with 1
        "DE89370400440532013001",  // wrong IBAN check digits
        "jane@localhost", "@handle", "a@b", "Order Completed", "pro", "A-1234", "SKU 42",
        "hmac:7f1e0c4b2a9d8e3f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f",
        "00:1a:2b:3c:4d:5e",  // a MAC address
        "123456789",  // a bare run of digits is not a phone number
        "std::vector", "1:2",
    ])
    func leavesAlone(text: String) {
        #expect(Self.kind(text) == nil)
    }

    @Test func ipUnderAVersionKeyIsAVersion() {
        var text = "1.2.3.4"
        let found = text.withUTF8 { value in
            "version".utf8.withContiguousStorageIfAvailable { key in
                Detectors.classify(UnsafeRawBufferPointer(value), kinds: .all, key: UnsafeRawBufferPointer(key))
            }!
        }
        #expect(found == nil)
        #expect(Self.kind("1.2.3.4") == .ip)
    }

    @Test(arguments: [
        ("john.doe@example.com", DetectorKind?.some(.email), "j***@e***.com"),
        ("4111 1111 1111 1111", .card, "**** **** **** 1111"),
        ("+1 415-555-2671", .phone, "+* ***-***-**71"),
        ("DE89370400440532013000", .iban, "DE****************3000"),
        ("203.0.113.42", .ip, "203.0.*.*"),
        ("2001:db8::1", .ip, "2001:db8:*"),
        ("Jane Doe", nil, "J***"),
        ("é", nil, "***"),
        ("Émile", nil, "É***"),
    ])
    func masksKeepTheShape(text: String, kind: DetectorKind?, expected: String) {
        var copy = text
        let masked = copy.withUTF8 { Detectors.mask(UnsafeRawBufferPointer($0), kind: kind) }
        #expect(String(decoding: masked, as: UTF8.self) == expected)
    }

    @Test func prefilterIsExact() {
        // Every byte position of a 20-byte string, for each byte that makes a value a candidate.
        for trigger in Array("0123456789:@".utf8) {
            for position in 0..<20 {
                var bytes = [UInt8](repeating: UInt8(ascii: "x"), count: 20)
                bytes[position] = trigger
                #expect(bytes.withUnsafeBytes(Detectors.mayBePersonal))
            }
        }
        for other in Array("/;?AZaz .-+é".utf8) {
            let bytes = [UInt8](repeating: other, count: 20)
            #expect(!bytes.withUnsafeBytes(Detectors.mayBePersonal))
        }
    }

    /// The parser's `candidate` flag (the detectors' prefilter, computed while parsing) agrees
    /// with the prefilter itself wherever the byte that makes a string a candidate falls.
    @Test func parserMarksTheSameCandidates() throws {
        for length in 1..<30 {
            for trigger in Array("5:@xé".utf8) {
                for position in 0..<length {
                    var text = [UInt8](repeating: UInt8(ascii: "y"), count: length)
                    text[position] = trigger
                    let document = Array(#"{"k":""#.utf8) + text + Array(#""}"#.utf8)
                    guard String(validating: document, as: UTF8.self) != nil else { continue }
                    let tape = try JSONTape.parse(document)
                    #expect(tape.nodes[2].candidate == text.withUnsafeBytes(Detectors.mayBePersonal), "\(String(decoding: text, as: UTF8.self))")
                }
            }
        }
    }

    /// Escapes and the closing quote at every position of strings around the 8-byte steps of
    /// the parser's scan: each string decodes to what was written.
    @Test func parserFindsEveryEscapeAndEnd() throws {
        for length in 1..<26 {
            for position in 0..<length {
                for escape in [#"\""#, #"\\"#, #"\n"#, #"\u00e9"#, #"\ud83d\ude00"#] {
                    let plain = String(repeating: "a", count: length)
                    let written = String(plain.prefix(position)) + escape + String(plain.dropFirst(position))
                    let document = Array(#"{"k":""#.utf8) + Array(written.utf8) + Array(#"","n":1}"#.utf8)
                    let tape = try JSONTape.parse(document)
                    let expected = try JSONSerialization.jsonObject(with: Data(document)) as? [String: Any]
                    let decoded = document.withUnsafeBytes { String(decoding: JSONTape.decodedString(tape.nodes[2], in: $0), as: UTF8.self) }
                    #expect(decoded == expected?["k"] as? String)
                    #expect(tape.nodes.count == 5)
                }
            }
        }
    }
}
