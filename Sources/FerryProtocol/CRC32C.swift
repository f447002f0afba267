import CFerryCRC32C

/// CRC-32C (Castagnoli, polynomial 0x1EDC6F41 reflected as 0x82F63B78), as used by iSCSI, ext4
/// and Kafka. Uses the CPU's CRC32 instruction (SSE4.2) when present, several times faster than
/// the portable software path (slicing-by-8, roughly a byte per cycle), which is used otherwise.
public enum CRC32C {
    /// Whether the hardware instruction is used.
    public static let usesHardware = CFerryCRC32C_hardwareAvailable() != 0

    private static let flat: [UInt32] = {
        var tables = [[UInt32]](repeating: [UInt32](repeating: 0, count: 256), count: 8)
        for n in 0..<256 {
            var crc = UInt32(n)
            for _ in 0..<8 { crc = (crc & 1) != 0 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
            tables[0][n] = crc
        }
        for n in 0..<256 {
            var crc = tables[0][n]
            for k in 1..<8 {
                crc = tables[0][Int(crc & 0xFF)] ^ (crc >> 8)
                tables[k][n] = crc
            }
        }
        return tables.flatMap { $0 }
    }()

    /// The CRC-32C of `bytes`, continuing from `crc` (pass the previous result to checksum data
    /// in pieces; start with 0).
    public static func checksum(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        if usesHardware { return CFerryCRC32C_hardware(crc, bytes.baseAddress, bytes.count) }
        return software(bytes, continuing: crc)
    }

    /// The portable software path (also the reference the hardware path is tested against).
    public static func software(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        var crc = ~crc
        flat.withUnsafeBufferPointer { t in
            var index = 0
            let count = bytes.count
            while count - index >= 8 {
                let low = bytes.loadUnaligned(fromByteOffset: index, as: UInt32.self).littleEndian ^ crc
                let high = bytes.loadUnaligned(fromByteOffset: index + 4, as: UInt32.self).littleEndian
                crc = t[7 * 256 + Int(low & 0xFF)] ^ t[6 * 256 + Int((low >> 8) & 0xFF)]
                    ^ t[5 * 256 + Int((low >> 16) & 0xFF)] ^ t[4 * 256 + Int(low >> 24)]
                    ^ t[3 * 256 + Int(high & 0xFF)] ^ t[2 * 256 + Int((high >> 8) & 0xFF)]
                    ^ t[1 * 256 + Int((high >> 16) & 0xFF)] ^ t[0 * 256 + Int(high >> 24)]
                index += 8
            }
            while index < count {
                crc = t[Int((crc ^ UInt32(bytes[index])) & 0xFF)] ^ (crc >> 8)
                index += 1
            }
        }
        return ~crc
    }

    /// The CRC-32C of `bytes`.
    public static func checksum(_ bytes: [UInt8], continuing crc: UInt32 = 0) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0, continuing: crc) }
    }
}
