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

    /// Whether `bytes` are one plain JSON object (RFC 8259, whitespace around it allowed) that
    /// every parser reads the same way: printable ASCII strings with the short escapes, numbers of
    /// at most 15 digits without exponent, nesting under 64. `false` says only "not plain" (a `\u`
    /// escape, non-ASCII text, a large number, or invalid JSON): the caller asks a full parser
    /// then. No allocation.
    package static func isPlainObject(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var reader = StrictReader(bytes: bytes)
        reader.skipSpace()
        guard reader.peek == UInt8(ascii: "{"), reader.value(depth: 0) else { return false }
        reader.skipSpace()
        return reader.offset == bytes.count
    }

    /// A validating reader for ``isPlainObject(_:)``; any doubt answers false.
    private struct StrictReader {
        let bytes: UnsafeRawBufferPointer
        var offset = 0
        static let maxDepth = 64

        init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

        var peek: UInt8? { offset < bytes.count ? bytes[offset] : nil }

        mutating func skipSpace() {
            while offset < bytes.count {
                switch bytes[offset] {
                case 0x20, 0x09, 0x0A, 0x0D: offset += 1
                default: return
                }
            }
        }

        mutating func take(_ byte: UInt8) -> Bool {
            guard peek == byte else { return false }
            offset += 1
            return true
        }

        mutating func literal(_ text: StaticString) -> Bool {
            let count = text.utf8CodeUnitCount
            guard bytes.count - offset >= count else { return false }
            for index in 0..<count where bytes[offset + index] != text.utf8Start[index] { return false }
            offset += count
            return true
        }

        mutating func value(depth: Int) -> Bool {
            guard depth < Self.maxDepth, let first = peek else { return false }
            switch first {
            case UInt8(ascii: "{"):
                offset += 1
                skipSpace()
                if take(UInt8(ascii: "}")) { return true }
                while true {
                    guard string() else { return false }
                    skipSpace()
                    guard take(UInt8(ascii: ":")) else { return false }
                    skipSpace()
                    guard value(depth: depth + 1) else { return false }
                    skipSpace()
                    if take(UInt8(ascii: "}")) { return true }
                    guard take(UInt8(ascii: ",")) else { return false }
                    skipSpace()
                }
            case UInt8(ascii: "["):
                offset += 1
                skipSpace()
                if take(UInt8(ascii: "]")) { return true }
                while true {
                    guard value(depth: depth + 1) else { return false }
                    skipSpace()
                    if take(UInt8(ascii: "]")) { return true }
                    guard take(UInt8(ascii: ",")) else { return false }
                    skipSpace()
                }
            case UInt8(ascii: "\""): return string()
            case UInt8(ascii: "t"): return literal("true")
            case UInt8(ascii: "f"): return literal("false")
            case UInt8(ascii: "n"): return literal("null")
            default: return number()
            }
        }

        /// A string of printable ASCII with the short escapes only.
        mutating func string() -> Bool {
            guard take(UInt8(ascii: "\"")) else { return false }
            while offset < bytes.count {
                let byte = bytes[offset]
                offset += 1
                switch byte {
                case UInt8(ascii: "\""): return true
                case UInt8(ascii: "\\"):
                    guard let escaped = peek else { return false }
                    switch escaped {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                         UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        offset += 1
                    default: return false  // \u (surrogates are the parser's business) or invalid
                    }
                case 0..<0x20, 0x80...: return false
                default: continue
                }
            }
            return false
        }

        /// An integer or a decimal fraction of at most 15 digits, no exponent: a value every
        /// parser reads the same way.
        mutating func number() -> Bool {
            let start = offset
            _ = take(UInt8(ascii: "-"))
            var digits = 0
            func isDigit(_ byte: UInt8?) -> Bool { byte.map { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") } ?? false }
            guard isDigit(peek) else { return false }
            if peek == UInt8(ascii: "0") {
                offset += 1
                digits = 1
            } else {
                while isDigit(peek) { offset += 1; digits += 1 }
            }
            if take(UInt8(ascii: ".")) {
                guard isDigit(peek) else { return false }
                while isDigit(peek) { offset += 1; digits += 1 }
            }
            if peek == UInt8(ascii: "e") || peek == UInt8(ascii: "E") { return false }
            return digits <= 15 && offset > start
        }
    }
}
