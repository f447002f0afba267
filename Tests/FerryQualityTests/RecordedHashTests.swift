import Crypto
import FerryProtocol
@testable import FerryQuality
import Testing

/// Redaction's `hash` output, byte for byte as ferryd wrote it before swift-crypto replaced the
/// module's own SHA-256 (recorded from that code; the same values come out of Python's `hmac`).
/// A stored `hmac:` value must keep meaning the same input under the same key.
@Suite struct RecordedHashTests {
    @Test("hash by path and by detector: strings by their text, other values by their JSON as written")
    func recorded() throws {
        let table = #"""
            {"rules": [{"path": "properties.email", "action": "hash"}, {"path": "properties.n", "action": "hash"},
                       {"path": "properties.k", "action": "hash"}, {"path": "properties.s", "action": "hash"},
                       {"path": "properties.e", "action": "hash"}],
             "detect": [{"kind": "phone", "action": "hash"}]}
            """#
        let judgement = try redacted(table, event(properties: #"""
            {"email": "jane@example.com", "n": 12, "k": {"a": 1}, "s": "\u00e9😀", "e": "", "phone": "+14155552671"}
            """#))
        #expect(judgement.redacted)
        let expected = #"{"email":"hmac:b91b29c2b07fbd79091e07901846112769573f82112e56801c7c270aab017ba0","#
            + #""n":"hmac:ecbbfa70edeb50f0002df660eb35125f1da4b5888794a47e28b7ee34ab95b714","#
            + #""k":"hmac:dca792714ef57d180a587a7e63c1ef3166765145a5370f1e6da9790fa29272e1","#
            + #""s":"hmac:86b11ed906171dc6fddd090c2cff97d54a51f7bec1db2892dc1d44209d05d3c2","#
            + #""e":"hmac:58f0742d53a418d2df62182814f137600fd049ed179c20b311a62ea179895be7","#
            + #""phone":"hmac:91ce9100a19729d2dab77f6523974db9454e7ccda20120ec1f028c0764f0ca44"}"#
        #expect(String(decoding: judgement.event.properties, as: UTF8.self) == expected)
    }
}

/// The SHA-256 every hash in Ferry runs on (swift-crypto's): FIPS 180-4's examples, and a
/// message fed in uneven pieces across block boundaries.
@Suite struct SHA256VectorTests {
    @Test("FIPS 180-4 test vectors", arguments: [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
        ("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"),
    ])
    func vectors(input: String, expected: String) {
        #expect(Self.hex(SHA256.hash(data: Array(input.utf8))) == expected)
    }

    @Test("a million 'a's, fed in uneven pieces")
    func millionA() {
        var hasher = SHA256()
        var remaining = 1_000_000
        var piece = 1
        while remaining > 0 {
            let n = min(piece, remaining)
            hasher.update(data: [UInt8](repeating: UInt8(ascii: "a"), count: n))
            remaining -= n
            piece = piece * 3 % 997 + 1
        }
        #expect(Self.hex(hasher.finalize()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    static func hex(_ digest: SHA256.Digest) -> String {
        digest.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }
}
