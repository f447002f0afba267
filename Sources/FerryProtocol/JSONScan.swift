/// The scanner of Ferry's JSON reader (``JSONTape``): strings and numbers.
///
/// The string scan's byte classes, eight bytes at a time (SWAR). Each test is exact per byte: it
/// works on the low seven bits of each byte (adding at most 0x80 to a byte of at most 0x7F never
/// carries into the next byte), so a flag marks exactly the bytes of its class and the lowest
/// flag is the first such byte. Bytes ≥ 0x80 (UTF-8 sequences) are in no class. Each test first
/// asks whether every byte is above its class (letters, most punctuation: one add and a
/// backslash test) and only then tells the classes apart.
package enum JSONScan {
    package static let ones: UInt64 = 0x0101_0101_0101_0101
    package static let lows: UInt64 = 0x7F7F_7F7F_7F7F_7F7F
    package static let highs: UInt64 = 0x8080_8080_8080_8080

    /// The high bit of each byte of `word` that ends a string's plain run: a quote, a backslash
    /// or a control byte (< 0x20).
    @inline(__always)
    package static func stops(_ word: UInt64) -> UInt64 {
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
    package static func isPlainText(_ word: UInt64) -> Bool {
        let low = word & lows
        let notBackslash = (low ^ (ones &* 0x5C)) &+ lows
        return ((low &+ ones &* (0x80 - 0x41)) & notBackslash | word) & highs == highs
    }

    /// ``stops(_:)`` and the bytes 0x30…0x40: the digits, `:` and `@` that make a string a
    /// detector candidate (``isCandidate(_:)``), and `;<=>?` between them, rare in text, which
    /// the byte-at-a-time step passes over.
    @inline(__always)
    package static func attention(_ word: UInt64) -> UInt64 {
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
    package enum StringFault: UInt8 {
        case unterminated, control, unicodeEscape, unpairedSurrogate, escape

        /// The parser's words for it.
        package var reason: String {
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
    package struct ScannedString {
        /// The offset of the closing quote; with a fault, where the scan stopped.
        package var end: Int
        /// The string holds an escape.
        package var escaped: Bool
        /// The string holds a digit, `:` or `@` (raw) or a `\u` escape: a detector candidate.
        package var candidate: Bool
        /// Why it is not a string; nil when it is one.
        package var fault: StringFault?
    }

    /// Scans the JSON string whose first byte after the opening quote is at `start` in the
    /// `count` bytes at `base`: its end, whether it holds an escape or may be personal, or why it
    /// is not a string (strict RFC 8259: escapes and surrogate pairs checked). Eight bytes at a
    /// time: a word none of whose bytes needs attention is skipped with one test; once the string
    /// is known to be a detector candidate, only its end and escapes are looked for. The tape's
    /// parser (``JSONTape``) reads every string through it.
    @inline(__always)
    package static func string(_ base: UnsafeRawPointer, count: Int, from start: Int) -> ScannedString {
        let last = count &- 8  // the last offset a whole word can be read from
        // The short plain string (most member names and enum values): the first byte its first
        // word flags is the closing quote, so nothing before it is an escape or a candidate.
        if start <= last {
            let flags = attention((base + start).loadUnaligned(as: UInt64.self))
            if flags != 0 {
                let end = start &+ flags.trailingZeroBitCount &>> 3
                if base.load(fromByteOffset: end, as: UInt8.self) == UInt8(ascii: "\"") {
                    return ScannedString(end: end, escaped: false, candidate: false, fault: nil)
                }
            }
        }
        var at = start
        var escaped = false
        var candidate = false
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
            guard let digit = JSONScan.hexValue(base.load(fromByteOffset: at, as: UInt8.self)) else { return nil }
            value = value << 4 | UInt32(truncatingIfNeeded: digit)
            at += 1
        }
        return value
    }

    /// Why bytes are not a JSON number: no digit where the value starts (`value`), or a fraction
    /// or exponent without digits (`number`).
    package enum NumberFault: UInt8 {
        case value, number
    }

    /// Scans the JSON number (RFC 8259: `-`, no leading zero, fraction, exponent) whose first byte
    /// is at `start` in the `count` bytes at `base`: the offset just past it, or where and why it
    /// is not a number. The tape's parser (``JSONTape``) reads every number through it.
    @inline(__always)
    package static func number(_ base: UnsafeRawPointer, count: Int, from start: Int) -> (end: Int, fault: NumberFault?) {
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

    /// The value of a hex digit, nil for another byte.
    package static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// A raw byte that makes a string a candidate for the detectors: a digit, `:` or `@`
    /// (``Detectors/mayBePersonal(_:)``).
    @inline(__always)
    package static func isCandidate(_ byte: UInt8) -> Bool { byte &- 0x30 <= 0x0A || byte == 0x40 }
}
