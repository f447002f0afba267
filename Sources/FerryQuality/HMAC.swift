import FerryProtocol

/// HMAC-SHA-256 (RFC 2104) on FerryProtocol's SHA256, with the key's inner and outer blocks
/// absorbed once: each value then costs the compressions of its own bytes.
struct HMACSHA256: Sendable {
    private let inner: SHA256
    private let outer: SHA256

    init(key: [UInt8]) {
        var block = key.count > 64 ? SHA256.hash(key) : key
        block += [UInt8](repeating: 0, count: 64 - block.count)
        var inner = SHA256(), outer = SHA256()
        inner.update(block.map { $0 ^ 0x36 })
        outer.update(block.map { $0 ^ 0x5C })
        self.inner = inner
        self.outer = outer
    }

    /// The 32-byte MAC of `message`.
    func mac<Bytes: Sequence>(_ message: Bytes) -> [UInt8] where Bytes.Element == UInt8 {
        var inner = self.inner
        inner.update(message)
        var outer = self.outer
        outer.update(inner.finalize())
        return outer.finalize()
    }

    /// `hmac:<64 hex digits>` of `message`.
    func tag<Bytes: Sequence>(_ message: Bytes) -> [UInt8] where Bytes.Element == UInt8 {
        let digits: StaticString = "0123456789abcdef"
        var out: [UInt8] = Array("hmac:".utf8)
        out.reserveCapacity(69)
        for byte in mac(message) {
            out.append(digits.utf8Start[Int(byte >> 4)])
            out.append(digits.utf8Start[Int(byte & 0xF)])
        }
        return out
    }
}
