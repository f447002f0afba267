/// JSON string escaping shared by the client (properties) and the agent (bus, file sink).
package enum JSONText {
    private static let hex = Array("0123456789abcdef".utf8)

    /// Appends `string` as a quoted, escaped JSON string.
    package static func appendString(_ string: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Native strings (small ones included) are contiguous UTF-8: copy the runs that need no
        // escaping in one go each.
        let contiguous: Void? = string.utf8.withContiguousStorageIfAvailable { bytes in
            var runStart = 0
            for (index, byte) in bytes.enumerated() where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index]))
                appendEscaped(byte, to: &out)
                runStart = index + 1
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...]))
        }
        if contiguous == nil {
            for byte in string.utf8 {
                if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                    appendEscaped(byte, to: &out)
                } else {
                    out.append(byte)
                }
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// Appends the escape sequence of a byte JSON does not allow unescaped in a string.
    private static func appendEscaped(_ byte: UInt8, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\\"))
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): out.append(byte)
        case UInt8(ascii: "\n"): out.append(UInt8(ascii: "n"))
        case UInt8(ascii: "\r"): out.append(UInt8(ascii: "r"))
        case UInt8(ascii: "\t"): out.append(UInt8(ascii: "t"))
        default:
            out.append(contentsOf: "u00".utf8)
            out.append(hex[Int(byte >> 4)])
            out.append(hex[Int(byte & 0xF)])
        }
    }

    /// Appends the valid UTF-8 in `utf8` as a quoted, escaped JSON string: runs of bytes that need
    /// no escape are copied whole (a per-byte append cost most of the file sink's encoding).
    package static func appendString(utf8: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var start = 0
        for index in 0..<utf8.count {
            let byte = utf8[index]
            guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
            if start < index { out.append(contentsOf: UnsafeRawBufferPointer(rebasing: utf8[start..<index])) }
            start = index + 1
            appendEscaped(byte, to: &out)
        }
        if start < utf8.count { out.append(contentsOf: UnsafeRawBufferPointer(rebasing: utf8[start...])) }
        out.append(UInt8(ascii: "\""))
    }

    /// Appends `bytes` as a JSON string read as UTF-8 the way `String(decoding:as:)` reads it
    /// (invalid sequences become U+FFFD), without making a `String` when they are ASCII.
    package static func appendString(decoding bytes: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        if bytes.allSatisfy({ $0 < 0x80 }) {
            appendString(utf8: bytes, to: &out)
        } else {
            appendString(String(decoding: bytes, as: UTF8.self), to: &out)
        }
    }

    /// Appends the decimal digits of `value`.
    package static func appendInteger(_ value: UInt64, to out: inout [UInt8]) {
        guard value >= 10 else {
            out.append(UInt8(ascii: "0") + UInt8(value))
            return
        }
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: room for 20 digits
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            var rest = value
            while rest > 0 {
                count += 1
                buffer[24 - count] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
            }
            out.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[(24 - count)...]))
        }
    }
}
