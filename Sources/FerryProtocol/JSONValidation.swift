/// An allocation-free JSON syntax check (RFC 8259) for the agent's ingest path: is this UTF-8
/// text exactly one JSON object, with optional whitespace around it? Values are not built.
enum JSONValidation {
    /// Nesting deeper than this is refused (it bounds the recursion).
    static let maxDepth = 64

    /// Whether `bytes` (already valid UTF-8) hold one JSON object and nothing else.
    static func isObject(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var parser = Parser(bytes: bytes)
        parser.skipWhitespace()
        guard parser.peek == UInt8(ascii: "{"), parser.value(depth: 0) else { return false }
        parser.skipWhitespace()
        return parser.index == bytes.count
    }

    private struct Parser {
        let bytes: UnsafeRawBufferPointer
        var index = 0

        init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

        var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipWhitespace() {
            while let byte = peek, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { index += 1 }
        }

        mutating func literal(_ text: StaticString) -> Bool {
            let count = text.utf8CodeUnitCount
            guard bytes.count - index >= count else { return false }
            for k in 0..<count where bytes[index + k] != text.utf8Start[k] { return false }
            index += count
            return true
        }

        mutating func value(depth: Int) -> Bool {
            guard depth < JSONValidation.maxDepth, let byte = peek else { return false }
            switch byte {
            case UInt8(ascii: "{"):
                index += 1
                skipWhitespace()
                if peek == UInt8(ascii: "}") { index += 1; return true }
                while true {
                    guard peek == UInt8(ascii: "\""), string() else { return false }
                    skipWhitespace()
                    guard peek == UInt8(ascii: ":") else { return false }
                    index += 1
                    skipWhitespace()
                    guard value(depth: depth + 1) else { return false }
                    skipWhitespace()
                    switch peek {
                    case UInt8(ascii: ","): index += 1; skipWhitespace()
                    case UInt8(ascii: "}"): index += 1; return true
                    default: return false
                    }
                }
            case UInt8(ascii: "["):
                index += 1
                skipWhitespace()
                if peek == UInt8(ascii: "]") { index += 1; return true }
                while true {
                    guard value(depth: depth + 1) else { return false }
                    skipWhitespace()
                    switch peek {
                    case UInt8(ascii: ","): index += 1; skipWhitespace()
                    case UInt8(ascii: "]"): index += 1; return true
                    default: return false
                    }
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
            while let byte = peek {
                index += 1
                switch byte {
                case UInt8(ascii: "\""): return true
                case UInt8(ascii: "\\"):
                    guard let escape = peek else { return false }
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                         UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        continue
                    case UInt8(ascii: "u"):
                        for _ in 0..<4 {
                            guard let digit = peek, isHexDigit(digit) else { return false }
                            index += 1
                        }
                    default: return false
                    }
                case 0..<0x20: return false
                default: continue
                }
            }
            return false
        }

        mutating func number() -> Bool {
            if peek == UInt8(ascii: "-") { index += 1 }
            guard let first = peek, isDigit(first) else { return false }
            index += 1
            if first != UInt8(ascii: "0") { digits() }
            if peek == UInt8(ascii: ".") {
                index += 1
                guard let digit = peek, isDigit(digit) else { return false }
                digits()
            }
            if peek == UInt8(ascii: "e") || peek == UInt8(ascii: "E") {
                index += 1
                if peek == UInt8(ascii: "+") || peek == UInt8(ascii: "-") { index += 1 }
                guard let digit = peek, isDigit(digit) else { return false }
                digits()
            }
            return true
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
