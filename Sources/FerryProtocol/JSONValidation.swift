/// Allocation-free JSON syntax checks (RFC 8259): are these bytes exactly one JSON object, with
/// optional whitespace around it? Values are not built. One reader serves two strictnesses:
///
/// - ``isObject(_:)`` accepts every valid object: the agent's check of the `context` extension
///   at ingest.
/// - ``isPlainObject(_:)`` accepts only objects every parser reads the same way: the file sink
///   and the HTTP bodies copy those as they are and leave anything else to a full parser.
package enum JSONValidation {
    /// Nesting deeper than this is refused (it bounds the recursion).
    package static let maxDepth = 64

    /// Whether `bytes` (already valid UTF-8) hold one JSON object and nothing else.
    package static func isObject(_ bytes: UnsafeRawBufferPointer) -> Bool {
        check(bytes, plain: false)
    }

    /// Whether `bytes` are one *plain* JSON object: printable ASCII strings with the short escapes
    /// (no `\u`), numbers of at most 15 digits without exponent, nesting under ``maxDepth``.
    /// `false` says only "not plain" (a `\u` escape, non-ASCII text, a large number, or invalid
    /// JSON): the caller asks a full parser then.
    package static func isPlainObject(_ bytes: UnsafeRawBufferPointer) -> Bool {
        check(bytes, plain: true)
    }

    /// ``isPlainObject(_:)``, also telling whether the object holds a raw newline or carriage
    /// return (in a valid object only ever whitespace between tokens): the encoders copy a plain
    /// object whole and compact it only then.
    package static func isPlainObject(_ bytes: UnsafeRawBufferPointer, newlines: inout Bool) -> Bool {
        var reader = Reader(bytes: bytes, plain: true)
        defer { newlines = reader.newlines }
        return reader.object()
    }

    private static func check(_ bytes: UnsafeRawBufferPointer, plain: Bool) -> Bool {
        var reader = Reader(bytes: bytes, plain: plain)
        return reader.object()
    }

    struct Reader {
        let bytes: UnsafeRawBufferPointer
        /// Refuse what is valid but not plain (see ``JSONValidation/isPlainObject(_:)``).
        let plain: Bool
        var index = 0
        /// Whether whitespace skipped so far held a raw newline or carriage return.
        var newlines = false

        init(bytes: UnsafeRawBufferPointer, plain: Bool) {
            self.bytes = bytes
            self.plain = plain
        }

        var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

        /// One object and nothing else, with optional whitespace around it.
        mutating func object() -> Bool {
            skipWhitespace()
            guard peek == UInt8(ascii: "{"), value(depth: 0) else { return false }
            skipWhitespace()
            return index == bytes.count
        }

        mutating func skipWhitespace() {
            while index < bytes.count {
                let byte = bytes[index]
                if byte == 0x20 || byte == 0x09 {
                    index += 1
                } else if byte == 0x0A || byte == 0x0D {
                    newlines = true
                    index += 1
                } else {
                    return
                }
            }
        }

        mutating func take(_ byte: UInt8) -> Bool {
            guard peek == byte else { return false }
            index += 1
            return true
        }

        mutating func literal(_ text: StaticString) -> Bool {
            let count = text.utf8CodeUnitCount
            guard bytes.count - index >= count else { return false }
            for offset in 0..<count where bytes[index + offset] != text.utf8Start[offset] { return false }
            index += count
            return true
        }

        mutating func value(depth: Int) -> Bool {
            guard depth < JSONValidation.maxDepth, let byte = peek else { return false }
            switch byte {
            case UInt8(ascii: "{"):
                index += 1
                skipWhitespace()
                if take(UInt8(ascii: "}")) { return true }
                while true {
                    guard peek == UInt8(ascii: "\""), string() else { return false }
                    skipWhitespace()
                    guard take(UInt8(ascii: ":")) else { return false }
                    skipWhitespace()
                    guard value(depth: depth + 1) else { return false }
                    skipWhitespace()
                    if take(UInt8(ascii: "}")) { return true }
                    guard take(UInt8(ascii: ",")) else { return false }
                    skipWhitespace()
                }
            case UInt8(ascii: "["):
                index += 1
                skipWhitespace()
                if take(UInt8(ascii: "]")) { return true }
                while true {
                    guard value(depth: depth + 1) else { return false }
                    skipWhitespace()
                    if take(UInt8(ascii: "]")) { return true }
                    guard take(UInt8(ascii: ",")) else { return false }
                    skipWhitespace()
                }
            case UInt8(ascii: "\""): return string()
            case UInt8(ascii: "t"): return literal("true")
            case UInt8(ascii: "f"): return literal("false")
            case UInt8(ascii: "n"): return literal("null")
            default: return number()
            }
        }

        /// A string starting at the opening quote.
        mutating func string() -> Bool {
            index += 1
            while index < bytes.count {
                // Eight bytes at a time while none of them needs attention (most of a string).
                while bytes.count - index >= 8, !Self.needsAttention(bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self), plain: plain) {
                    index += 8
                }
                guard index < bytes.count else { return false }
                let byte = bytes[index]
                index += 1
                // Most bytes of a string need no attention: one test for them.
                if byte >= 0x20 && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\") && (byte < 0x80 || !plain) { continue }
                switch byte {
                case UInt8(ascii: "\""): return true
                case UInt8(ascii: "\\"):
                    guard let escape = peek else { return false }
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                         UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        continue
                    case UInt8(ascii: "u") where !plain:  // surrogate pairing is a full parser's business
                        for _ in 0..<4 {
                            guard let digit = peek, isHexDigit(digit) else { return false }
                            index += 1
                        }
                    default: return false
                    }
                case 0..<0x20: return false
                case 0x80...: if plain { return false }
                default: continue
                }
            }
            return false
        }

        /// Whether any of the eight bytes of `word` is a quote, a backslash or a control
        /// character, or (when `plain`) not ASCII: exact existence tests, in a handful of
        /// operations instead of four comparisons a byte.
        static func needsAttention(_ word: UInt64, plain: Bool) -> Bool {
            let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
            func hasZero(_ value: UInt64) -> Bool { (value &- ones) & ~value & highs != 0 }
            let control = (word &- ones &* 0x20) & ~word & highs != 0  // a byte below 0x20
            return control || hasZero(word ^ (ones &* 0x22)) || hasZero(word ^ (ones &* 0x5C)) || (plain && word & highs != 0)
        }

        /// A number; when plain, an integer or decimal fraction of at most 15 digits without
        /// exponent (a value every parser reads the same way).
        mutating func number() -> Bool {
            _ = take(UInt8(ascii: "-"))
            guard let first = peek, isDigit(first) else { return false }
            let start = index
            index += 1
            if first != UInt8(ascii: "0") { digits() }
            var count = index - start
            if take(UInt8(ascii: ".")) {
                guard let digit = peek, isDigit(digit) else { return false }
                let fraction = index
                digits()
                count += index - fraction
            }
            if peek == UInt8(ascii: "e") || peek == UInt8(ascii: "E") {
                if plain { return false }
                index += 1
                if peek == UInt8(ascii: "+") || peek == UInt8(ascii: "-") { index += 1 }
                guard let digit = peek, isDigit(digit) else { return false }
                digits()
            }
            return !plain || count <= 15
        }

        mutating func digits() {
            while let byte = peek, isDigit(byte) { index += 1 }
        }

        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

        func isHexDigit(_ byte: UInt8) -> Bool {
            isDigit(byte) || (byte | 0x20 >= UInt8(ascii: "a") && byte | 0x20 <= UInt8(ascii: "f"))
        }
    }
}
