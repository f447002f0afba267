import FerryProtocol

/// The kind of one JSON value on a ``JSONTape``.
enum JSONKind: UInt8, Sendable {
    case object, array, string, number, `true`, `false`, null
}

/// One value on a ``JSONTape``: where its bytes are, and where the next sibling starts.
///
/// An object's children follow it on the tape as key, value, key, value …; an array's as its
/// elements. `next` is the index just past the whole subtree, so siblings are walked by jumping.
struct JSONNode: Sendable {
    var kind: JSONKind
    /// A string holds an escape (its bytes must be decoded before comparing).
    var escaped: Bool
    /// A string holds a digit, `:` or `@` (raw bytes): only such a string can be a value the
    /// detectors look for (``Detectors/mayBePersonal(_:)``, found while parsing at no extra pass).
    var candidate: Bool = false
    /// First byte of the value (for a string: just after the opening quote).
    var start: Int32
    /// One past the last byte (for a string: the closing quote).
    var end: Int32
    /// The tape index after this value's subtree.
    var next: Int32
    /// Members (object) or elements (array).
    var count: Int32
}

/// A parsed JSON document as a flat array of nodes over the original bytes: one allocation, no
/// strings built. Strict RFC 8259 (the input must be valid UTF-8; the caller checks it).
struct JSONTape: Sendable {
    var nodes: [JSONNode] = []

    /// Nesting deeper than this is refused (it bounds the recursion of the checks).
    static let maxDepth = 64

    /// Why parsing stopped.
    struct Failure: Error {
        var offset: Int
        var reason: String
    }

    /// Parses `bytes` as exactly one JSON value with optional whitespace around it.
    static func parse(_ bytes: UnsafeRawBufferPointer) throws(Failure) -> JSONTape {
        var parser = Parser(bytes: bytes)
        parser.nodes.reserveCapacity(16)
        parser.skipWhitespace()
        try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw Failure(offset: parser.index, reason: "unexpected data after the value") }
        return JSONTape(nodes: parser.nodes)
    }

    /// ``parse(_:)`` over an array.
    static func parse(_ bytes: [UInt8]) throws(Failure) -> JSONTape {
        let result: Result<JSONTape, Failure> = bytes.withUnsafeBytes { raw in
            do throws(Failure) { return .success(try parse(raw)) } catch { return .failure(error) }
        }
        return try result.get()
    }

    private struct Parser {
        let bytes: UnsafeRawBufferPointer
        var index = 0
        var nodes: [JSONNode] = []

        var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipWhitespace() {
            while index < bytes.count {
                let byte = bytes[index]
                guard byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 else { return }
                index += 1
            }
        }

        func fail(_ reason: String) -> Failure { Failure(offset: index, reason: reason) }

        mutating func value(depth: Int) throws(Failure) {
            guard depth < JSONTape.maxDepth else { throw fail("nesting deeper than \(JSONTape.maxDepth)") }
            guard let byte = peek else { throw fail("unexpected end of input") }
            let slot = nodes.count
            switch byte {
            case UInt8(ascii: "{"):
                nodes.append(JSONNode(kind: .object, escaped: false, start: Int32(index), end: 0, next: 0, count: 0))
                index += 1
                skipWhitespace()
                var count: Int32 = 0
                if peek == UInt8(ascii: "}") {
                    index += 1
                } else {
                    while true {
                        guard peek == UInt8(ascii: "\"") else { throw fail("expected a member name") }
                        try string()
                        skipWhitespace()
                        guard peek == UInt8(ascii: ":") else { throw fail("expected ':'") }
                        index += 1
                        skipWhitespace()
                        try value(depth: depth + 1)
                        count += 1
                        skipWhitespace()
                        guard let separator = peek else { throw fail("unexpected end of input in an object") }
                        index += 1
                        if separator == UInt8(ascii: "}") { break }
                        guard separator == UInt8(ascii: ",") else { index -= 1; throw fail("expected ',' or '}'") }
                        skipWhitespace()
                    }
                }
                nodes[slot].end = Int32(index)
                nodes[slot].count = count
            case UInt8(ascii: "["):
                nodes.append(JSONNode(kind: .array, escaped: false, start: Int32(index), end: 0, next: 0, count: 0))
                index += 1
                skipWhitespace()
                var count: Int32 = 0
                if peek == UInt8(ascii: "]") {
                    index += 1
                } else {
                    while true {
                        try value(depth: depth + 1)
                        count += 1
                        skipWhitespace()
                        guard let separator = peek else { throw fail("unexpected end of input in an array") }
                        index += 1
                        if separator == UInt8(ascii: "]") { break }
                        guard separator == UInt8(ascii: ",") else { index -= 1; throw fail("expected ',' or ']'") }
                        skipWhitespace()
                    }
                }
                nodes[slot].end = Int32(index)
                nodes[slot].count = count
            case UInt8(ascii: "\""):
                try string()
                return
            case UInt8(ascii: "t"): try literal("true", .true)
            case UInt8(ascii: "f"): try literal("false", .false)
            case UInt8(ascii: "n"): try literal("null", .null)
            default: try number()
            }
            nodes[slot].next = Int32(nodes.count)
        }

        mutating func literal(_ text: StaticString, _ kind: JSONKind) throws(Failure) {
            let count = text.utf8CodeUnitCount
            guard bytes.count - index >= count else { throw fail("unexpected end of input") }
            for offset in 0..<count where bytes[index + offset] != text.utf8Start[offset] { throw fail("invalid literal") }
            nodes.append(JSONNode(kind: kind, escaped: false, start: Int32(index), end: Int32(index + count),
                                  next: Int32(nodes.count + 1), count: 0))
            index += count
        }

        /// A string from its opening quote.
        mutating func string() throws(Failure) {
            let start = index + 1
            var at = start
            var escaped = false
            var candidate: UInt64 = 0
            var candidateByte = false
            let count = bytes.count
            let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080, lows: UInt64 = 0x7F7F_7F7F_7F7F_7F7F
            while true {
                // Eight bytes at a time while none is a quote, a backslash or a control byte
                // (wrapping arithmetic: no overflow checks in the loop that reads most bytes).
                while count &- at >= 8 {
                    let word = bytes.loadUnaligned(fromByteOffset: at, as: UInt64.self)
                    let quote = word ^ (ones &* 0x22), backslash = word ^ (ones &* 0x5C)
                    let stop = (((word &- ones &* 0x20) & ~word) | ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash)) & highs
                    // A digit or ':' (0x30…0x3A, Bit Twiddling Hacks' hasbetween) or '@'.
                    let at40 = word ^ (ones &* 0x40)
                    let found = (((ones &* (127 + 0x3B) &- (word & lows)) & ~word & ((word & lows) &+ ones &* (127 - 0x2F)))
                        | ((at40 &- ones) & ~at40)) & highs
                    if stop != 0 {
                        // The lowest flagged byte is a real one (a borrow only flags bytes above a
                        // real hit): the bytes below it are plain, skip them at once.
                        let offset = stop.trailingZeroBitCount >> 3
                        if offset > 0 { candidate |= found & (UInt64.max >> UInt64(64 - offset * 8)) }
                        at &+= offset
                        break
                    }
                    candidate |= found
                    at &+= 8
                }
                guard at < count else { index = at; throw fail("unterminated string") }
                let byte = bytes[at]
                if byte == UInt8(ascii: "\"") { break }
                if byte < 0x20 { index = at; throw fail("control character in a string") }
                at &+= 1
                if byte &- 0x30 <= 0x0A || byte == 0x40 { candidateByte = true }
                guard byte == UInt8(ascii: "\\") else { continue }
                escaped = true
                index = at
                guard let escape = peek else { throw fail("unterminated string") }
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                     UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    break
                case UInt8(ascii: "u"):
                    candidateByte = true  // it may stand for one
                    guard let unit = hex4() else { throw fail("invalid \\u escape") }
                    if unit >= 0xD800 && unit < 0xDC00 {
                        // A high surrogate must be followed by a low one.
                        guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                            throw fail("unpaired surrogate")
                        }
                        index += 2
                        guard let low = hex4(), low >= 0xDC00 && low < 0xE000 else { throw fail("unpaired surrogate") }
                    } else if unit >= 0xDC00 && unit < 0xE000 {
                        throw fail("unpaired surrogate")
                    }
                default: throw fail("invalid escape")
                }
                at = index
            }
            nodes.append(JSONNode(kind: .string, escaped: escaped, candidate: candidateByte || candidate & highs != 0,
                                  start: Int32(start), end: Int32(at), next: Int32(nodes.count + 1), count: 0))
            index = at + 1
        }

        mutating func hex4() -> UInt32? {
            guard bytes.count - index >= 4 else { return nil }
            var value: UInt32 = 0
            for _ in 0..<4 {
                guard let digit = JSONTape.hexValue(bytes[index]) else { return nil }
                value = value << 4 | UInt32(digit)
                index += 1
            }
            return value
        }

        static func needsAttention(_ word: UInt64) -> Bool {
            let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
            func hasZero(_ value: UInt64) -> Bool { (value &- ones) & ~value & highs != 0 }
            let control = (word &- ones &* 0x20) & ~word & highs != 0
            return control || hasZero(word ^ (ones &* 0x22)) || hasZero(word ^ (ones &* 0x5C))
        }

        mutating func number() throws(Failure) {
            let start = index
            if peek == UInt8(ascii: "-") { index += 1 }
            guard let first = peek, isDigit(first) else { throw fail("invalid value") }
            index += 1
            if first != UInt8(ascii: "0") { digits() }
            if peek == UInt8(ascii: ".") {
                index += 1
                guard let digit = peek, isDigit(digit) else { throw fail("invalid number") }
                digits()
            }
            if peek == UInt8(ascii: "e") || peek == UInt8(ascii: "E") {
                index += 1
                if peek == UInt8(ascii: "+") || peek == UInt8(ascii: "-") { index += 1 }
                guard let digit = peek, isDigit(digit) else { throw fail("invalid number") }
                digits()
            }
            nodes.append(JSONNode(kind: .number, escaped: false, start: Int32(start), end: Int32(index),
                                  next: Int32(nodes.count + 1), count: 0))
        }

        mutating func digits() {
            while let byte = peek, isDigit(byte) { index += 1 }
        }

        func isDigit(_ byte: UInt8) -> Bool { byte &- UInt8(ascii: "0") < 10 }
    }

    static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// The bytes of a value as written (a string with its quotes).
    static func rawRange(_ node: JSONNode) -> Range<Int> {
        node.kind == .string ? Int(node.start) - 1..<Int(node.end) + 1 : Int(node.start)..<Int(node.end)
    }

    /// The decoded UTF-8 bytes of a string node (escapes resolved).
    static func decodedString(_ node: JSONNode, in bytes: UnsafeRawBufferPointer) -> [UInt8] {
        let raw = UnsafeRawBufferPointer(rebasing: bytes[Int(node.start)..<Int(node.end)])
        guard node.escaped else { return Array(raw) }
        var out: [UInt8] = []
        out.reserveCapacity(raw.count)
        var index = 0
        func hex4(_ at: Int) -> UInt32 {
            var value: UInt32 = 0
            for offset in 0..<4 { value = value << 4 | UInt32(hexValue(raw[at + offset]) ?? 0) }
            return value
        }
        while index < raw.count {
            let byte = raw[index]
            index += 1
            guard byte == UInt8(ascii: "\\") else { out.append(byte); continue }
            let escape = raw[index]
            index += 1
            switch escape {
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = hex4(index)
                index += 4
                if scalar >= 0xD800 && scalar < 0xDC00 {
                    let low = hex4(index + 2)
                    index += 6
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                out.append(contentsOf: UTF8.encode(Unicode.Scalar(scalar) ?? "\u{FFFD}")!)
            default: out.append(escape)
            }
        }
        return out
    }

    /// The number a number node holds, as a Double.
    static func double(_ node: JSONNode, in bytes: UnsafeRawBufferPointer) -> Double {
        // Short plain integers (most numbers in events) without the general parser.
        let count = Int(node.end - node.start)
        var index = Int(node.start)
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        var value: Int64 = 0
        var plain = count <= 16
        while plain, index < Int(node.end) {
            let digit = bytes[index] &- UInt8(ascii: "0")
            guard digit < 10 else { plain = false; break }
            value = value * 10 + Int64(digit)
            index += 1
        }
        if plain { return negative ? -Double(value) : Double(value) }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[Int(node.start)..<Int(node.end)]), as: UTF8.self)
        return Double(text) ?? .nan
    }

    /// Whether a number node is an integer in JSON Schema's sense (`1.0` is one).
    static func isInteger(_ node: JSONNode, in bytes: UnsafeRawBufferPointer) -> Bool {
        var fraction = false
        for index in Int(node.start)..<Int(node.end) {
            let byte = bytes[index]
            if byte == UInt8(ascii: ".") || byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") { fraction = true; break }
        }
        guard fraction else { return true }
        let value = double(node, in: bytes)
        return value.isFinite && value.rounded(.towardZero) == value
    }
}
