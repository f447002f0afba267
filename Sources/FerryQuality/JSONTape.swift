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
        var parser = Parser(bytes: bytes, nodes: .allocate(capacity: 16), capacity: 16, onHeap: true)
        defer { parser.nodes.deallocate() }
        try parser.document()
        return JSONTape(nodes: Array(UnsafeBufferPointer(start: parser.nodes, count: parser.used)))
    }

    /// Parses `bytes` as ``parse(_:)`` does and lends the nodes to `body` (nil when the bytes are
    /// not one JSON value). The nodes of a document of up to ``stackNodes`` values live on the
    /// stack: no allocation (the gate's per-event parse, ``QualityGate/passesUntouched(frame:header:)``).
    @inline(__always)
    static func withNodes<Result>(_ bytes: UnsafeRawBufferPointer, _ body: (UnsafeBufferPointer<JSONNode>?) -> Result) -> Result {
        withUnsafeTemporaryAllocation(of: JSONNode.self, capacity: stackNodes) { buffer in
            var parser = Parser(bytes: bytes, nodes: buffer.baseAddress!, capacity: buffer.count, onHeap: false)
            defer { if parser.onHeap { parser.nodes.deallocate() } }
            do throws(Failure) {
                try parser.document()
            } catch {
                return body(nil)
            }
            return body(UnsafeBufferPointer(start: parser.nodes, count: parser.used))
        }
    }

    /// Nodes ``withNodes(_:_:)`` keeps on the stack (48 × 20 bytes: within the 1 KiB that
    /// `withUnsafeTemporaryAllocation` always places there); more move to the heap.
    static let stackNodes = 48

    /// ``parse(_:)`` over an array.
    static func parse(_ bytes: [UInt8]) throws(Failure) -> JSONTape {
        let result: Result<JSONTape, Failure> = bytes.withUnsafeBytes { raw in
            do throws(Failure) { return .success(try parse(raw)) } catch { return .failure(error) }
        }
        return try result.get()
    }

    /// The parser writes nodes into a buffer it grows itself (no array: an append is a store).
    private struct Parser {
        let bytes: UnsafeRawBufferPointer
        var index = 0
        var nodes: UnsafeMutablePointer<JSONNode>
        var capacity: Int
        /// Nodes written.
        var used = 0
        /// Whether `nodes` was allocated by the parser (freed by its owner).
        var onHeap: Bool

        init(bytes: UnsafeRawBufferPointer, nodes: UnsafeMutablePointer<JSONNode>, capacity: Int, onHeap: Bool) {
            self.bytes = bytes
            self.nodes = nodes
            self.capacity = capacity
            self.onHeap = onHeap
        }

        /// Exactly one value with optional whitespace around it.
        mutating func document() throws(Failure) {
            // Offsets are stored as Int32 (converted unchecked below).
            guard bytes.count < Int(Int32.max) else { throw fail("a document of 2 GiB or more") }
            skipWhitespace()
            try value(depth: 0)
            skipWhitespace()
            guard index == bytes.count else { throw fail("unexpected data after the value") }
        }

        @inline(__always)
        mutating func append(_ node: JSONNode) {
            if used == capacity { grow() }
            (nodes + used).initialize(to: node)
            used &+= 1
        }

        mutating func grow() {
            let bigger = UnsafeMutablePointer<JSONNode>.allocate(capacity: capacity * 2)
            bigger.moveInitialize(from: nodes, count: used)
            if onHeap { nodes.deallocate() }
            nodes = bigger
            capacity *= 2
            onHeap = true
        }

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
            let slot = used
            switch byte {
            case UInt8(ascii: "{"):
                append(JSONNode(kind: .object, escaped: false, start: Int32(truncatingIfNeeded: index), end: 0, next: 0, count: 0))
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
                nodes[slot].end = Int32(truncatingIfNeeded: index)
                nodes[slot].count = count
            case UInt8(ascii: "["):
                append(JSONNode(kind: .array, escaped: false, start: Int32(truncatingIfNeeded: index), end: 0, next: 0, count: 0))
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
                nodes[slot].end = Int32(truncatingIfNeeded: index)
                nodes[slot].count = count
            case UInt8(ascii: "\""):
                try string()
                return
            case UInt8(ascii: "t"): try literal("true", .true)
            case UInt8(ascii: "f"): try literal("false", .false)
            case UInt8(ascii: "n"): try literal("null", .null)
            default: try number()
            }
            nodes[slot].next = Int32(truncatingIfNeeded: used)
        }

        mutating func literal(_ text: StaticString, _ kind: JSONKind) throws(Failure) {
            let count = text.utf8CodeUnitCount
            guard bytes.count - index >= count else { throw fail("unexpected end of input") }
            for offset in 0..<count where bytes[index + offset] != text.utf8Start[offset] { throw fail("invalid literal") }
            append(JSONNode(kind: kind, escaped: false, start: Int32(truncatingIfNeeded: index), end: Int32(truncatingIfNeeded: index + count),
                                  next: Int32(truncatingIfNeeded: used + 1), count: 0))
            index += count
        }

        /// A string from its opening quote (``JSONScan/string(_:count:from:)``).
        mutating func string() throws(Failure) {
            let start = index + 1
            // Not empty: `index` is at the opening quote.
            let scanned = JSONScan.string(bytes.baseAddress!, count: bytes.count, from: start)
            if let fault = scanned.fault {
                index = scanned.end
                throw fail(fault.reason)
            }
            append(JSONNode(kind: .string, escaped: scanned.escaped, candidate: scanned.candidate,
                            start: Int32(truncatingIfNeeded: start), end: Int32(truncatingIfNeeded: scanned.end),
                            next: Int32(truncatingIfNeeded: used + 1), count: 0))
            index = scanned.end + 1
        }

        mutating func number() throws(Failure) {
            let start = index
            // Not empty: `index` is at the number's first byte.
            let end = JSONScan.number(bytes.baseAddress!, count: bytes.count, from: start)
            if let fault = end.fault {
                index = end.end
                throw fail(fault == .value ? "invalid value" : "invalid number")
            }
            index = end.end
            append(JSONNode(kind: .number, escaped: false, start: Int32(truncatingIfNeeded: start), end: Int32(truncatingIfNeeded: index),
                                  next: Int32(truncatingIfNeeded: used + 1), count: 0))
        }
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
        if let exact = fastDouble(node, in: bytes) { return exact }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[Int(node.start)..<Int(node.end)]), as: UTF8.self)
        return Double(text) ?? .nan
    }

    /// Clinger's fast path: a number whose digits, read as an integer, are at most 2^53 and whose
    /// power of ten is within ±22 is that integer times or divided by an exact power of ten, one
    /// correctly rounded operation on two exact doubles: the same value `strtod` gives, without
    /// building a string. Nil for any other number.
    private static func fastDouble(_ node: JSONNode, in bytes: UnsafeRawBufferPointer) -> Double? {
        var index = Int(node.start)
        let end = Int(node.end)
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        var mantissa: UInt64 = 0
        var scale = 0, digits = 0
        var fraction = false
        while index < end {
            let byte = bytes[index]
            if byte == UInt8(ascii: ".") {
                fraction = true
            } else if byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") {
                break
            } else {
                // Digits past 19 could overflow the integer; such numbers take the general path.
                guard digits < 19 else { return nil }
                mantissa = mantissa &* 10 &+ UInt64(byte &- UInt8(ascii: "0"))
                if mantissa != 0 { digits += 1 }
                if fraction { scale -= 1 }
            }
            index += 1
        }
        if index < end {
            index += 1  // the `e`
            var exponentNegative = false
            if bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                exponentNegative = bytes[index] == UInt8(ascii: "-")
                index += 1
            }
            var exponent = 0
            while index < end {
                exponent = exponent * 10 + Int(bytes[index] &- UInt8(ascii: "0"))
                guard exponent <= 400 else { return nil }
                index += 1
            }
            scale += exponentNegative ? -exponent : exponent
        }
        guard mantissa <= 1 << 53, scale >= -22, scale <= 22 else { return nil }
        let power = powersOfTen[abs(scale)]
        let value = scale >= 0 ? Double(mantissa) * power : Double(mantissa) / power
        return negative ? -value : value
    }

    /// 10^0 … 10^22, each exact in a Double.
    private static let powersOfTen: [Double] = (0...22).map { exponent in
        var power = 1.0
        for _ in 0..<exponent { power *= 10 }
        return power
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

/// The string scan's byte classes, eight bytes at a time (SWAR). Each test is exact per byte: it
/// works on the low seven bits of each byte (adding at most 0x80 to a byte of at most 0x7F never
/// carries into the next byte), so a flag marks exactly the bytes of its class and the lowest
/// flag is the first such byte. Bytes ≥ 0x80 (UTF-8 sequences) are in no class. Each test first
/// asks whether every byte is above its class (letters, most punctuation: one add and a
/// backslash test) and only then tells the classes apart.
enum JSONScan {
    static let ones: UInt64 = 0x0101_0101_0101_0101
    static let lows: UInt64 = 0x7F7F_7F7F_7F7F_7F7F
    static let highs: UInt64 = 0x8080_8080_8080_8080

    /// The high bit of each byte of `word` that ends a string's plain run: a quote, a backslash
    /// or a control byte (< 0x20).
    @inline(__always)
    static func stops(_ word: UInt64) -> UInt64 {
        let low = word & lows
        let notBackslash = (low ^ (ones &* 0x5C)) &+ lows  // high bit: ≠ '\\'
        // Every byte ≥ 0x23 (or ≥ 0x80) and none a backslash: nothing to stop at.
        if ((low &+ ones &* (0x80 - 0x23)) & notBackslash | word) & highs == highs { return 0 }
        let notControl = low &+ ones &* (0x80 - 0x20)  // high bit: ≥ 0x20
        let notQuote = (low ^ (ones &* 0x22)) &+ lows  // high bit: ≠ '"'
        return ~((notControl & notQuote & notBackslash) | word) & highs
    }

    /// Whether every byte of `word` is ≥ 0x41 (or ≥ 0x80) and none is a backslash: letters and
    /// the like, nothing ``attention(_:)`` flags (its first test).
    @inline(__always)
    static func isPlainText(_ word: UInt64) -> Bool {
        let low = word & lows
        let notBackslash = (low ^ (ones &* 0x5C)) &+ lows
        return ((low &+ ones &* (0x80 - 0x41)) & notBackslash | word) & highs == highs
    }

    /// ``stops(_:)`` and the bytes 0x30…0x40: the digits, `:` and `@` that make a string a
    /// detector candidate (``isCandidate(_:)``), and `;<=>?` between them, rare in text, which
    /// the byte-at-a-time step passes over.
    @inline(__always)
    static func attention(_ word: UInt64) -> UInt64 {
        let low = word & lows
        let notBackslash = (low ^ (ones &* 0x5C)) &+ lows
        let above40 = low &+ ones &* (0x80 - 0x41)  // high bit: ≥ 0x41
        // Every byte ≥ 0x41 (or ≥ 0x80) and none a backslash: the common word of text.
        if (above40 & notBackslash | word) & highs == highs { return 0 }
        let notControl = low &+ ones &* (0x80 - 0x20)
        let notQuote = (low ^ (ones &* 0x22)) &+ lows
        // High bit of (≥ 0x30) xor (≥ 0x41): in 0x30…0x40.
        let digitToAt = (low &+ ones &* (0x80 - 0x30)) ^ above40
        return (digitToAt | ~(notControl & notQuote & notBackslash)) & ~word & highs
    }

    /// Why bytes from an opening quote are not a JSON string.
    enum StringFault: UInt8 {
        case unterminated, control, unicodeEscape, unpairedSurrogate, escape

        /// The parser's words for it.
        var reason: String {
            switch self {
            case .unterminated: "unterminated string"
            case .control: "control character in a string"
            case .unicodeEscape: "invalid \\u escape"
            case .unpairedSurrogate: "unpaired surrogate"
            case .escape: "invalid escape"
            }
        }
    }

    /// What ``string(_:count:from:)`` found.
    struct ScannedString {
        /// The offset of the closing quote; with a fault, where the scan stopped.
        var end: Int
        /// The string holds an escape.
        var escaped: Bool
        /// The string holds a digit, `:` or `@` (raw) or a `\u` escape: a detector candidate.
        var candidate: Bool
        /// Why it is not a string; nil when it is one.
        var fault: StringFault?
    }

    /// Scans the JSON string whose first byte after the opening quote is at `start` in the
    /// `count` bytes at `base`: its end, whether it holds an escape or may be personal, or why it
    /// is not a string (strict RFC 8259: escapes and surrogate pairs checked). Eight bytes at a
    /// time: a word none of whose bytes needs attention is skipped with one test; once the string
    /// is known to be a detector candidate, only its end and escapes are looked for. Shared by the
    /// tape's parser and the gate's one-pass check.
    @inline(__always)
    static func string(_ base: UnsafeRawPointer, count: Int, from start: Int) -> ScannedString {
        var at = start
        var escaped = false
        var candidate = false
        let last = count &- 8  // the last offset a whole word can be read from
        while true {
            // Wrapping arithmetic: no overflow checks in the loops that read most bytes.
            if candidate {
                while at <= last {
                    let flags = stops((base + at).loadUnaligned(as: UInt64.self))
                    if flags != 0 { at &+= flags.trailingZeroBitCount &>> 3; break }
                    at &+= 8
                }
            } else {
                // Two words per step while both are plain text (one branch for 16 bytes).
                while at &+ 8 <= last {
                    let first = (base + at).loadUnaligned(as: UInt64.self)
                    let second = (base + (at &+ 8)).loadUnaligned(as: UInt64.self)
                    if !isPlainText(first) || !isPlainText(second) { break }
                    at &+= 16
                }
                while at <= last {
                    let flags = attention((base + at).loadUnaligned(as: UInt64.self))
                    if flags != 0 { at &+= flags.trailingZeroBitCount &>> 3; break }
                    at &+= 8
                }
            }
            guard at < count else { return ScannedString(end: at, escaped: escaped, candidate: candidate, fault: .unterminated) }
            let byte = base.load(fromByteOffset: at, as: UInt8.self)
            if byte == UInt8(ascii: "\"") { break }
            if byte < 0x20 { return ScannedString(end: at, escaped: escaped, candidate: candidate, fault: .control) }
            at &+= 1
            if isCandidate(byte) { candidate = true; continue }
            guard byte == UInt8(ascii: "\\") else { continue }
            escaped = true
            if let fault = escape(base, count: count, at: &at, candidate: &candidate) {
                return ScannedString(end: at, escaped: escaped, candidate: candidate, fault: fault)
            }
        }
        return ScannedString(end: at, escaped: escaped, candidate: candidate, fault: nil)
    }

    /// One escape, `at` just past its backslash: `at` moves past it (or to where it is wrong).
    private static func escape(_ base: UnsafeRawPointer, count: Int, at: inout Int, candidate: inout Bool) -> StringFault? {
        guard at < count else { return .unterminated }
        let escape = base.load(fromByteOffset: at, as: UInt8.self)
        at += 1
        switch escape {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
             UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
            return nil
        case UInt8(ascii: "u"):
            candidate = true  // it may stand for one
            guard let unit = hex4(base, count: count, at: &at) else { return .unicodeEscape }
            if unit >= 0xD800 && unit < 0xDC00 {
                // A high surrogate must be followed by a low one.
                guard count - at >= 6, base.load(fromByteOffset: at, as: UInt8.self) == UInt8(ascii: "\\"),
                      base.load(fromByteOffset: at + 1, as: UInt8.self) == UInt8(ascii: "u") else {
                    return .unpairedSurrogate
                }
                at += 2
                guard let low = hex4(base, count: count, at: &at), low >= 0xDC00 && low < 0xE000 else { return .unpairedSurrogate }
            } else if unit >= 0xDC00 && unit < 0xE000 {
                return .unpairedSurrogate
            }
            return nil
        default:
            return .escape
        }
    }

    /// Four hex digits at `at` (moved past each digit read).
    private static func hex4(_ base: UnsafeRawPointer, count: Int, at: inout Int) -> UInt32? {
        guard count - at >= 4 else { return nil }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = JSONTape.hexValue(base.load(fromByteOffset: at, as: UInt8.self)) else { return nil }
            value = value << 4 | UInt32(truncatingIfNeeded: digit)
            at += 1
        }
        return value
    }

    /// Why bytes are not a JSON number: no digit where the value starts (`value`), or a fraction
    /// or exponent without digits (`number`).
    enum NumberFault: UInt8 {
        case value, number
    }

    /// Scans the JSON number (RFC 8259: `-`, no leading zero, fraction, exponent) whose first byte
    /// is at `start` in the `count` bytes at `base`: the offset just past it, or where and why it
    /// is not a number. Shared by the tape's parser and the gate's one-pass check.
    @inline(__always)
    static func number(_ base: UnsafeRawPointer, count: Int, from start: Int) -> (end: Int, fault: NumberFault?) {
        @inline(__always) func byte(_ at: Int) -> UInt8 { base.load(fromByteOffset: at, as: UInt8.self) }
        @inline(__always) func isDigit(_ at: Int) -> Bool { at < count && byte(at) &- UInt8(ascii: "0") < 10 }
        var at = start
        if at < count && byte(at) == UInt8(ascii: "-") { at &+= 1 }
        guard isDigit(at) else { return (at, .value) }
        let first = byte(at)
        at &+= 1
        if first != UInt8(ascii: "0") { while isDigit(at) { at &+= 1 } }
        if at < count && byte(at) == UInt8(ascii: ".") {
            at &+= 1
            guard isDigit(at) else { return (at, .number) }
            while isDigit(at) { at &+= 1 }
        }
        if at < count && (byte(at) == UInt8(ascii: "e") || byte(at) == UInt8(ascii: "E")) {
            at &+= 1
            if at < count && (byte(at) == UInt8(ascii: "+") || byte(at) == UInt8(ascii: "-")) { at &+= 1 }
            guard isDigit(at) else { return (at, .number) }
            while isDigit(at) { at &+= 1 }
        }
        return (at, nil)
    }

    /// Whether `text` can stand in a JSON string as it is: no quote, backslash or control byte.
    static func isLiteral(_ text: [UInt8]) -> Bool {
        !text.contains { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }
    }

    /// A raw byte that makes a string a candidate for the detectors: a digit, `:` or `@`
    /// (``Detectors/mayBePersonal(_:)``).
    @inline(__always)
    static func isCandidate(_ byte: UInt8) -> Bool { byte &- 0x30 <= 0x0A || byte == 0x40 }
}
