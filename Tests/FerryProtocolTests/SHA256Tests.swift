import FerryProtocol
import Testing

@Suite("SHA-256")
struct SHA256Tests {
    @Test("FIPS 180-4 test vectors", arguments: [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
        ("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"),
    ])
    func vectors(input: String, expected: String) {
        #expect(SHA256.hexHash(Array(input.utf8)) == expected)
    }

    @Test("a million 'a's, fed in uneven pieces")
    func millionA() {
        var hasher = SHA256()
        var remaining = 1_000_000
        var piece = 1
        while remaining > 0 {
            let n = min(piece, remaining)
            hasher.update([UInt8](repeating: UInt8(ascii: "a"), count: n))
            remaining -= n
            piece = piece * 3 % 997 + 1
        }
        let hex = hasher.finalize().map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
        #expect(hex == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    @Test("block-boundary lengths agree between one-shot and streaming")
    func boundaries() {
        for length in [55, 56, 57, 63, 64, 65, 119, 120, 128] {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            var hasher = SHA256()
            hasher.update(bytes.prefix(length / 2))
            hasher.update(bytes.dropFirst(length / 2))
            #expect(hasher.finalize() == SHA256.hash(bytes))
        }
    }
}
