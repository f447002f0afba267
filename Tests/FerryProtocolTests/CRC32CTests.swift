import FerryProtocol
import Testing

/// Bit-at-a-time CRC-32C straight from the definition (reflected polynomial 0x82F63B78), sharing
/// nothing with the table-driven implementation under test.
func referenceCRC32C(_ bytes: [UInt8], continuing crc: UInt32 = 0) -> UInt32 {
    var crc = ~crc
    for byte in bytes {
        crc ^= UInt32(byte)
        for _ in 0..<8 { crc = (crc & 1) != 0 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
    }
    return ~crc
}

/// Deterministic pseudo-random bytes (SplitMix64), so failures reproduce.
func pseudoRandomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
    var state = seed
    var out: [UInt8] = []
    out.reserveCapacity(count)
    while out.count < count {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        withUnsafeBytes(of: z) { out += $0.prefix(count - out.count) }
    }
    return out
}

@Suite("CRC32C")
struct CRC32CTests {
    /// Published check values: the CRC catalogue's "123456789" and RFC 3720 (iSCSI) appendix B.4.
    static let vectors: [(name: String, bytes: [UInt8], crc: UInt32)] = [
        ("empty", [], 0x0000_0000),
        ("123456789", Array("123456789".utf8), 0xE306_9283),
        ("32 zero bytes", [UInt8](repeating: 0, count: 32), 0x8A91_36AA),
        ("32 0xFF bytes", [UInt8](repeating: 0xFF, count: 32), 0x62A8_AB43),
        ("32 incrementing bytes", (0..<32).map { UInt8($0) }, 0x46DD_794E),
        ("32 decrementing bytes", (0..<32).reversed().map { UInt8($0) }, 0x113F_DB5C),
        ("a", Array("a".utf8), 0xC1D0_4330),
    ]

    @Test("known vectors", arguments: vectors)
    func knownVectors(vector: (name: String, bytes: [UInt8], crc: UInt32)) {
        #expect(CRC32C.checksum(vector.bytes) == vector.crc, "\(vector.name)")
        #expect(referenceCRC32C(vector.bytes) == vector.crc, "reference implementation, \(vector.name)")
    }

    @Test("lengths 0...17 match the bitwise reference (tail, one 8-byte block, block + tail)", arguments: 0...17)
    func shortLengths(length: Int) {
        let bytes = pseudoRandomBytes(length, seed: UInt64(length))
        #expect(CRC32C.checksum(bytes) == referenceCRC32C(bytes))
        let ones = [UInt8](repeating: 0xFF, count: length)
        #expect(CRC32C.checksum(ones) == referenceCRC32C(ones))
    }

    @Test("longer buffers at every alignment match the bitwise reference")
    func longerAndUnaligned() {
        let buffer = pseudoRandomBytes(4096 + 16, seed: 42)
        buffer.withUnsafeBytes { raw in
            for start in 0..<16 {
                for length in [63, 64, 65, 255, 1000, 4096] {
                    let slice = UnsafeRawBufferPointer(rebasing: raw[start..<start + length])
                    #expect(CRC32C.checksum(slice) == referenceCRC32C(Array(slice)), "start \(start) length \(length)")
                }
            }
        }
    }

    @Test("incremental checksums over every split point equal the one-shot checksum")
    func incremental() {
        let bytes = pseudoRandomBytes(100, seed: 7)
        let whole = CRC32C.checksum(bytes)
        #expect(whole == referenceCRC32C(bytes))
        for split in 0...bytes.count {
            let first = CRC32C.checksum(Array(bytes[..<split]))
            #expect(CRC32C.checksum(Array(bytes[split...]), continuing: first) == whole, "split at \(split)")
        }
        // Three pieces, including empty ones.
        var crc: UInt32 = 0
        for piece in [bytes[0..<0], bytes[0..<13], bytes[13..<13], bytes[13..<57], bytes[57...]] {
            crc = CRC32C.checksum(Array(piece), continuing: crc)
        }
        #expect(crc == whole)
    }

    @Test("a single flipped bit changes the checksum")
    func detectsBitFlips() {
        let bytes = pseudoRandomBytes(64, seed: 3)
        let original = CRC32C.checksum(bytes)
        for bit in 0..<(bytes.count * 8) {
            var damaged = bytes
            damaged[bit / 8] ^= UInt8(1 << (bit % 8))
            #expect(CRC32C.checksum(damaged) != original, "bit \(bit)")
        }
    }

    @Test("the software path (used where the CPU lacks SSE4.2) matches the reference at every length and alignment, continuing too")
    func softwarePath() {
        let buffer = pseudoRandomBytes(1024 + 16, seed: 7)
        buffer.withUnsafeBytes { raw in
            for start in 0..<8 {
                for length in [0, 1, 7, 8, 9, 63, 64, 65, 1000] {
                    let slice = UnsafeRawBufferPointer(rebasing: raw[start..<start + length])
                    #expect(CRC32C.software(slice) == referenceCRC32C(Array(slice)), "start \(start) length \(length)")
                    #expect(CRC32C.software(slice, continuing: 0x1234_5678) == referenceCRC32C(Array(slice), continuing: 0x1234_5678))
                    #expect(CRC32C.checksum(slice, continuing: 0x1234_5678) == referenceCRC32C(Array(slice), continuing: 0x1234_5678))
                }
            }
        }
    }
}
