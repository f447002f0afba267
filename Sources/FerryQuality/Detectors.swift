/// Recognises personal values in a string (the `detect` kinds) and masks them keeping their
/// shape. ``classify(_:kinds:key:prefiltered:)`` judges a whole value (a string that *is* an
/// address, a number …); DetectorsInText.swift finds the same kinds inside text, with the same
/// shape tests (docs/QUALITY.md, "Detectors").
enum Detectors {
    /// The kinds a value could be, from one cheap look at it: a string without a digit, `@` or
    /// `:` is none (most strings; tested eight bytes at a time).
    static func mayBePersonal(_ text: UnsafeRawBufferPointer) -> Bool {
        var index = 0
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080, lows: UInt64 = 0x7F7F_7F7F_7F7F_7F7F
        while text.count - index >= 8 {
            let word = text.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            // A byte in 0x30…0x3A (digits and ':'), from Bit Twiddling Hacks' hasbetween(x, 0x2F, 0x3B).
            let between = (ones &* (127 + 0x3B) &- (word & lows)) & ~word & ((word & lows) &+ ones &* (127 - 0x2F)) & highs
            let at = word ^ (ones &* 0x40)
            if between != 0 || (at &- ones) & ~at & highs != 0 { return true }
            index += 8
        }
        while index < text.count {
            let byte = text[index]
            if byte &- 0x30 <= 0x0A || byte == 0x40 { return true }
            index += 1
        }
        return false
    }

    /// The first of `kinds` that `text` is, as a whole value, or nil. `key` is the member name
    /// the value is under (the ip detector skips `version` and `build`: `1.2.3.4` there is a
    /// version). `prefiltered`: the caller knows the text may be personal (the parser's
    /// ``JSONNode/candidate``).
    static func classify(_ text: UnsafeRawBufferPointer, kinds: KindSet, key: UnsafeRawBufferPointer?, prefiltered: Bool = false) -> DetectorKind? {
        if case .whole(let kind) = find(text, kinds: kinds, key: key, prefiltered: prefiltered, inText: false) { return kind }
        return nil
    }

    /// What the detectors find in a string.
    enum Finding {
        /// The whole value is of a kind.
        case whole(DetectorKind)
        /// Parts of the text are (``matches(in:kinds:noIP:hints:)``), in order.
        case parts([Match])
    }

    /// What `kinds` find in `text`: the whole value (``classify(_:kinds:key:prefiltered:)``), else,
    /// when `inText`, its parts; nil for nothing. One pass counts what each kind needs, so that
    /// neither a whole-value test nor the search inside text runs where it cannot match.
    static func find(_ text: UnsafeRawBufferPointer, kinds: KindSet, key: UnsafeRawBufferPointer?, prefiltered: Bool, inText: Bool) -> Finding? {
        guard text.count >= 2, inText || text.count <= 320, prefiltered || mayBePersonal(text) else { return nil }
        // Values Ferry wrote itself.
        if text.count > 5 && text[0] == UInt8(ascii: "h") && text.starts(with: "hmac:".utf8) { return nil }
        // What every kind needs, counted in one pass, so that a detector that cannot match is not
        // run: an `@` (email), 13 digits (card), 8 (phone), 4 and three dots (IPv4), a `:` (IPv6,
        // a URL), a capital first (IBAN).
        var digits = 0, dots = 0, at = false, colon = false
        for byte in text {
            if byte &- UInt8(ascii: "0") < 10 {
                digits &+= 1
            } else if byte == UInt8(ascii: ".") {
                dots &+= 1
            } else if byte == UInt8(ascii: "@") {
                at = true
            } else if byte == UInt8(ascii: ":") {
                colon = true
            }
        }
        let noIP = isVersionKey(key)
        if text.count <= 320 {
            if at, kinds.contains(.email), Formats.isEmail(text) { return .whole(.email) }
            if text[0] &- UInt8(ascii: "A") < 26, kinds.contains(.iban), isIBAN(text) { return .whole(.iban) }
            if digits >= 13, kinds.contains(.card), isCard(text) { return .whole(.card) }
            if digits >= 8, kinds.contains(.phone), isPhone(text) { return .whole(.phone) }
            if digits >= 4 || colon, kinds.contains(.ip), !noIP, (digits >= 4 && isIPv4(text)) || (colon && isIPv6(text)) {
                return .whole(.ip)
            }
        }
        // Inside text: only when some kind could be there (a URL needs a `:`, and only a URL's
        // components are percent-decoded).
        let hints = Hints(at: at, colon: colon, numbers: digits >= 8 || (digits >= 4 && dots >= 3), iban: digits >= 2 && text.count >= 15)
        guard inText, at || colon || hints.numbers || hints.iban else { return nil }
        // The commonest strings with digits hold no part: a UUID (its groups are dashed hex) and
        // an RFC 3339 timestamp (dashed and timed numbers).
        if text.count == 36, text[8] == UInt8(ascii: "-"), Formats.isUUID(text) { return nil }
        if text.count >= 20, text[4] == UInt8(ascii: "-"), text[10] | 0x20 == UInt8(ascii: "t"), Formats.isDateTime(text) { return nil }
        let parts = matches(in: text, kinds: kinds, noIP: noIP, hints: hints)
        return parts.isEmpty ? nil : .parts(parts)
    }

    static func isVersionKey(_ key: UnsafeRawBufferPointer?) -> Bool {
        guard let key else { return false }
        return equals(key, "version") || equals(key, "build")
    }

    /// Whether `bytes` are the ASCII `text`.
    private static func equals(_ bytes: UnsafeRawBufferPointer, _ text: StaticString) -> Bool {
        guard bytes.count == text.utf8CodeUnitCount else { return false }
        for index in 0..<bytes.count where bytes[index] != text.utf8Start[index] { return false }
        return true
    }

    /// A set of kinds, as bits.
    struct KindSet: OptionSet, Sendable {
        let rawValue: UInt8
        init(rawValue: UInt8) { self.rawValue = rawValue }
        init(_ kind: DetectorKind) { rawValue = 1 << UInt8(kind.index) }
        static let email = KindSet(.email), phone = KindSet(.phone), ip = KindSet(.ip), card = KindSet(.card), iban = KindSet(.iban)
        static let all: KindSet = [.email, .phone, .ip, .card, .iban]
    }

    // MARK: Kinds

    /// 13–19 digits, single spaces or dashes between them, a payment network's prefix (2–6: so a
    /// millisecond timestamp, which starts with 1, is not a card), and the Luhn check.
    static func isCard(_ text: UnsafeRawBufferPointer) -> Bool {
        var digits = 0, sum = 0
        var previousSeparator = true
        // Luhn from the right: walk backwards.
        var index = text.count - 1
        while index >= 0 {
            let byte = text[index]
            if Formats.isDigit(byte) {
                var digit = Int(byte - UInt8(ascii: "0"))
                if digits % 2 == 1 {
                    digit *= 2
                    if digit > 9 { digit -= 9 }
                }
                sum += digit
                digits += 1
                previousSeparator = false
            } else if byte == UInt8(ascii: " ") || byte == UInt8(ascii: "-") {
                if previousSeparator { return false }
                previousSeparator = true
            } else {
                return false
            }
            index -= 1
        }
        guard !previousSeparator, digits >= 13, digits <= 19, sum % 10 == 0 else { return false }
        let first = text[0]
        return first >= UInt8(ascii: "2") && first <= UInt8(ascii: "6")
    }

    /// E.164 (`+` then 8–15 digits, separators allowed) or a common national shape with
    /// separators: North American `(415) 555-2671`, `415-555-2671`, `415.555.2671`,
    /// `415 555 2671` (optionally after `1 `); a trunk-prefix number `020 7946 0958`,
    /// `06 12 34 56 78`, `0171-1234567` (a 0, 9–12 digits). A bare run of digits without `+` is
    /// not a phone number (order numbers, timestamps).
    static func isPhone(_ text: UnsafeRawBufferPointer) -> Bool {
        var digits = 0, separators = 0
        // The groups of digits: how many, the shortest, and the lengths of the first four (a
        // byte each, for the North American shape): no array, nothing allocated.
        var groups = 0, shortest = Int.max
        var firstFour: UInt32 = 0
        var group = 0
        var parens = 0
        var plus = false
        @inline(__always) func close() {
            if groups < 4 { firstFour |= UInt32(min(group, 255)) << UInt32(8 * groups) }
            groups += 1
            shortest = min(shortest, group)
        }
        for (index, byte) in text.enumerated() {
            if Formats.isDigit(byte) {
                digits += 1
                group += 1
                continue
            }
            switch byte {
            case UInt8(ascii: "+"):
                guard index == 0 else { return false }
                plus = true
            case UInt8(ascii: "("):
                guard parens == 0, group == 0 else { return false }
                parens = 1
            case UInt8(ascii: ")"):
                guard parens == 1, group > 0 else { return false }
                parens = 2
                close()
                group = 0
                separators += 1
            case UInt8(ascii: " "), UInt8(ascii: "-"), UInt8(ascii: "."):
                if group > 0 { close() }
                guard group > 0 || (index > 0 && text[index - 1] == UInt8(ascii: ")")) else { return false }
                group = 0
                separators += 1
            default: return false
            }
        }
        guard group > 0, parens != 1 else { return false }
        close()
        if plus { return digits >= 8 && digits <= 15 }
        guard separators > 0 else { return false }
        // North American: 3-3-4, optionally after a 1.
        let threeThreeFour: UInt32 = 3 | 3 << 8 | 4 << 16
        if groups == 3 && firstFour == threeThreeFour { return true }
        if groups == 4 && firstFour & 0xFF == 1 && firstFour >> 8 == threeThreeFour { return true }
        // A trunk prefix.
        return text[0] == UInt8(ascii: "0") || (text[0] == UInt8(ascii: "(") && text.count > 1 && text[1] == UInt8(ascii: "0"))
            ? digits >= 9 && digits <= 12 && shortest >= 2 : false
    }

    /// Four decimal parts 0–255 without leading zeros.
    static func isIPv4(_ text: UnsafeRawBufferPointer) -> Bool {
        var parts = 0, value = 0, length = 0
        for byte in text {
            if Formats.isDigit(byte) {
                if length == 1 && value == 0 { return false }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
                length += 1
                guard value <= 255 else { return false }
            } else if byte == UInt8(ascii: ".") {
                guard length > 0 else { return false }
                parts += 1
                value = 0
                length = 0
            } else {
                return false
            }
        }
        return parts == 3 && length > 0
    }

    /// RFC 4291 text: eight groups of 1–4 hex digits, or fewer with one `::`, optionally ending
    /// in an IPv4 address.
    static func isIPv6(_ text: UnsafeRawBufferPointer) -> Bool {
        guard text.count >= 2, text.count <= 45 else { return false }
        var groups = 0, length = 0
        var compressed = false
        var index = 0
        if text[0] == UInt8(ascii: ":") {
            guard text[1] == UInt8(ascii: ":") else { return false }
            compressed = true
            index = 2
            if index == text.count { return true }
        }
        var groupStart = index
        while index < text.count {
            let byte = text[index]
            if Formats.isHex(byte) {
                length += 1
                guard length <= 4 else { return false }
            } else if byte == UInt8(ascii: ":") {
                guard length > 0 else { return false }
                groups += 1
                length = 0
                if index + 1 < text.count && text[index + 1] == UInt8(ascii: ":") {
                    guard !compressed else { return false }
                    compressed = true
                    index += 1
                    if index + 1 == text.count { return groups <= 7 }
                } else if index + 1 == text.count {
                    return false
                }
                groupStart = index + 1
            } else if byte == UInt8(ascii: ".") {
                // An embedded IPv4 address takes the last two groups.
                guard isIPv4(UnsafeRawBufferPointer(rebasing: text[groupStart...])) else { return false }
                groups += 2
                return compressed ? groups <= 7 : groups == 8
            } else {
                return false
            }
            index += 1
        }
        guard length > 0 else { return false }
        groups += 1
        return compressed ? groups <= 7 : groups == 8
    }

    /// An IBAN: two capital letters, two check digits, 11–30 letters and digits (single spaces
    /// allowed between groups), and the ISO 7064 mod-97 check equal to 1.
    static func isIBAN(_ text: UnsafeRawBufferPointer) -> Bool {
        guard text.count >= 15, text.count <= 42 else { return false }
        // First pass: the shape (single spaces between groups, digits and capitals), the compact
        // length and its first four characters; nothing allocated.
        var compact = 0
        var head: (UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0)
        var previousSpace = false
        for byte in text {
            if byte == UInt8(ascii: " ") {
                if previousSpace || compact == 0 { return false }
                previousSpace = true
                continue
            }
            previousSpace = false
            guard Formats.isDigit(byte) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) else { return false }
            switch compact {
            case 0: head.0 = byte
            case 1: head.1 = byte
            case 2: head.2 = byte
            case 3: head.3 = byte
            default: break
            }
            compact += 1
        }
        guard !previousSpace, compact >= 15, compact <= 34, head.0 >= UInt8(ascii: "A"), head.1 >= UInt8(ascii: "A"),
              Formats.isDigit(head.2), Formats.isDigit(head.3) else { return false }
        // The first four characters move to the end; letters count as 10–35.
        @inline(__always) func step(_ remainder: Int, _ byte: UInt8) -> Int {
            Formats.isDigit(byte) ? (remainder * 10 + Int(byte - UInt8(ascii: "0"))) % 97
                : (remainder * 100 + Int(byte - UInt8(ascii: "A")) + 10) % 97
        }
        var remainder = 0, seen = 0
        for byte in text where byte != UInt8(ascii: " ") {
            seen += 1
            if seen > 4 { remainder = step(remainder, byte) }
        }
        remainder = step(step(step(step(remainder, head.0), head.1), head.2), head.3)
        return remainder == 1
    }

    // MARK: Masks

    /// `text` masked keeping its shape; `kind` nil for a value of no detected kind.
    static func mask(_ text: UnsafeRawBufferPointer, kind: DetectorKind?) -> [UInt8] {
        let star = UInt8(ascii: "*")
        switch kind {
        case .email:
            // j***@e***.com: the first character of the local part and of the domain, the top-level domain.
            let at = text.firstIndex(of: UInt8(ascii: "@"))!
            let lastDot = text.lastIndex(of: UInt8(ascii: "."))!
            return [text[0]] + [star, star, star, UInt8(ascii: "@"), text[at + 1], star, star, star] + Array(text[lastDot...])
        case .card:
            // Every digit but the last four hidden; separators kept.
            return maskDigits(text, keeping: 4)
        case .phone:
            // `+` and separators kept, every digit but the last two hidden.
            return maskDigits(text, keeping: 2)
        case .iban:
            // The country code and the last four characters kept.
            var seen = 0
            let total = text.filter { $0 != UInt8(ascii: " ") }.count
            return text.map { byte in
                guard byte != UInt8(ascii: " ") else { return byte }
                seen += 1
                return seen <= 2 || seen > total - 4 ? byte : star
            }
        case .ip:
            if text.contains(UInt8(ascii: ":")) {
                // IPv6: the first two groups kept (the network's prefix), the rest hidden.
                var colons = 0
                var out: [UInt8] = []
                for byte in text {
                    if byte == UInt8(ascii: ":") { colons += 1 }
                    if colons == 2 { break }
                    out.append(byte)
                }
                return out + Array(":*".utf8)
            }
            // IPv4: the first two parts kept.
            var dots = 0
            var out: [UInt8] = []
            for byte in text {
                if byte == UInt8(ascii: ".") { dots += 1 }
                if dots == 2 { break }
                out.append(byte)
            }
            return out + Array(".*.*".utf8)
        case nil:
            // The first character, then ***.
            let (_, length) = Regex.decode(text, at: 0)
            guard text.count > length else { return [star, star, star] }
            return Array(text[..<length]) + [star, star, star]
        }
    }

    private static func maskDigits(_ text: UnsafeRawBufferPointer, keeping kept: Int) -> [UInt8] {
        let digits = text.filter(Formats.isDigit).count
        var seen = 0
        return text.map { byte in
            guard Formats.isDigit(byte) else { return byte }
            seen += 1
            return seen > digits - kept ? byte : UInt8(ascii: "*")
        }
    }
}
