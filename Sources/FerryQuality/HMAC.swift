import Crypto

/// HMAC-SHA-256 (RFC 2104) under the redaction key: swift-crypto's, whose SHA-256 (BoringSSL's on
/// Linux, CryptoKit's on Apple platforms) is constant-time in the key. The key's inner and outer
/// blocks are absorbed once, at load: each value then costs the compressions of its own bytes.
struct HMACSHA256: Sendable {
    /// The MAC with the key absorbed; copied for each message (the copy is what gets updated).
    private let keyed: HMAC<SHA256>

    init(key: [UInt8]) {
        keyed = HMAC<SHA256>(key: SymmetricKey(data: key))
    }

    /// The 32-byte MAC of `message`.
    func mac(_ message: UnsafeRawBufferPointer) -> [UInt8] {
        var hmac = keyed
        hmac.update(data: message)
        return Array(hmac.finalize())
    }

    /// ``mac(_:)`` of an array.
    func mac(_ message: [UInt8]) -> [UInt8] { message.withUnsafeBytes { mac($0) } }

    /// ``tag(_:)`` of an array.
    func tag(_ message: [UInt8]) -> [UInt8] { message.withUnsafeBytes { tag($0) } }

    /// `hmac:<64 hex digits>` of `message`.
    func tag(_ message: UnsafeRawBufferPointer) -> [UInt8] {
        let digits: StaticString = "0123456789abcdef"
        var out: [UInt8] = Array("hmac:".utf8)
        out.reserveCapacity(69)
        var hmac = keyed
        hmac.update(data: message)
        for byte in hmac.finalize() {
            out.append(digits.utf8Start[Int(byte >> 4)])
            out.append(digits.utf8Start[Int(byte & 0xF)])
        }
        return out
    }
}
