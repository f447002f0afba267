import FerryProtocol

/// The `format` checks (and the shape tests the detectors share), over UTF-8 bytes.
enum Formats {
    static func isDigit(_ byte: UInt8) -> Bool { byte &- UInt8(ascii: "0") < 10 }
    static func isHex(_ byte: UInt8) -> Bool { isDigit(byte) || (byte | 0x20) &- UInt8(ascii: "a") < 6 }
    static func isAlpha(_ byte: UInt8) -> Bool { (byte | 0x20) &- UInt8(ascii: "a") < 26 }

    static func check(_ format: Schema.Format, _ text: UnsafeRawBufferPointer) -> Bool {
        switch format {
        case .dateTime: isDateTime(text)
        case .email: isEmail(text)
        case .uri: isURI(text)
        case .uuid: isUUID(text)
        }
    }

    /// RFC 3339 `date-time`: `2024-05-01T12:00:00Z`, `…12:00:00.5+02:00`. `T` and `Z` in either
    /// case (RFC 3339's ABNF is case-insensitive); a space for `T` is not accepted.
    static func isDateTime(_ text: UnsafeRawBufferPointer) -> Bool {
        guard text.count >= 20 else { return false }
        func number(_ at: Int, _ count: Int) -> Int? {
            var value = 0
            for index in at..<(at + count) {
                guard isDigit(text[index]) else { return nil }
                value = value * 10 + Int(text[index] - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0, 4), text[4] == UInt8(ascii: "-"), let month = number(5, 2), text[7] == UInt8(ascii: "-"),
              let day = number(8, 2), text[10] | 0x20 == UInt8(ascii: "t"), let hour = number(11, 2),
              text[13] == UInt8(ascii: ":"), let minute = number(14, 2), text[16] == UInt8(ascii: ":"),
              let second = number(17, 2) else { return false }
        guard (1...12).contains(month), day >= 1, hour <= 23, minute <= 59, second <= 60 else { return false }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]
        guard day <= days else { return false }
        var index = 19
        if text[index] == UInt8(ascii: ".") {
            index += 1
            let start = index
            while index < text.count, isDigit(text[index]) { index += 1 }
            guard index > start else { return false }
        }
        guard index < text.count else { return false }
        if text[index] | 0x20 == UInt8(ascii: "z") { return index + 1 == text.count }
        guard text[index] == UInt8(ascii: "+") || text[index] == UInt8(ascii: "-"), text.count - index == 6,
              let offsetHour = number(index + 1, 2), text[index + 3] == UInt8(ascii: ":"),
              let offsetMinute = number(index + 4, 2) else { return false }
        return offsetHour <= 23 && offsetMinute <= 59
    }

    /// An e-mail address: a dot-atom local part (RFC 5322 atext), `@`, a domain name of at least
    /// two labels (letters, digits, inner hyphens; the last label has a letter). Quoted local
    /// parts and address literals are not accepted.
    static func isEmail(_ text: UnsafeRawBufferPointer) -> Bool {
        guard text.count >= 5, text.count <= 254 else { return false }
        var at = -1
        for index in 0..<text.count where text[index] == UInt8(ascii: "@") {
            guard at < 0 else { return false }
            at = index
        }
        guard at > 0, at <= 64 else { return false }
        // The local part: atext runs separated by single dots.
        var previousDot = true
        for index in 0..<at {
            let byte = text[index]
            if byte == UInt8(ascii: ".") {
                if previousDot { return false }
                previousDot = true
                continue
            }
            guard isAtext(byte) else { return false }
            previousDot = false
        }
        guard !previousDot else { return false }
        return isDomain(UnsafeRawBufferPointer(rebasing: text[(at + 1)...]), labels: 2)
    }

    static func isAtext(_ byte: UInt8) -> Bool {
        if isAlpha(byte) || isDigit(byte) { return true }
        switch byte {
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"),
             UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "/"), UInt8(ascii: "="), UInt8(ascii: "?"),
             UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "{"), UInt8(ascii: "|"), UInt8(ascii: "}"),
             UInt8(ascii: "~"):
            return true
        default: return false
        }
    }

    /// A host name of at least `labels` labels, each 1–63 letters, digits and inner hyphens; the
    /// last label holds a letter (so `1.2.3.4` is not a domain).
    static func isDomain(_ text: UnsafeRawBufferPointer, labels minimum: Int) -> Bool {
        guard !text.isEmpty, text.count <= 253 else { return false }
        var labels = 0, length = 0, letter = false
        var previous: UInt8 = UInt8(ascii: ".")
        for byte in text {
            if byte == UInt8(ascii: ".") {
                guard length > 0, previous != UInt8(ascii: "-") else { return false }
                labels += 1
                length = 0
                letter = false
            } else {
                guard isAlpha(byte) || isDigit(byte) || byte == UInt8(ascii: "-") else { return false }
                if byte == UInt8(ascii: "-") && length == 0 { return false }
                if isAlpha(byte) { letter = true }
                length += 1
                guard length <= 63 else { return false }
            }
            previous = byte
        }
        guard length > 0, previous != UInt8(ascii: "-"), letter else { return false }
        return labels + 1 >= minimum
    }

    /// An absolute URI (RFC 3986): a scheme, `:`, then only URI characters and valid
    /// percent-escapes (no spaces, no control characters, no non-ASCII).
    static func isURI(_ text: UnsafeRawBufferPointer) -> Bool {
        guard let first = text.first, isAlpha(first) else { return false }
        var index = 1
        while index < text.count, text[index] != UInt8(ascii: ":") {
            let byte = text[index]
            guard isAlpha(byte) || isDigit(byte) || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".") else {
                return false
            }
            index += 1
        }
        guard index < text.count else { return false }
        index += 1
        while index < text.count {
            let byte = text[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < text.count, isHex(text[index + 1]), isHex(text[index + 2]) else { return false }
                index += 3
                continue
            }
            guard isAlpha(byte) || isDigit(byte) || Self.uriCharacters.contains(byte) else { return false }
            index += 1
        }
        return true
    }

    private static let uriCharacters: Set<UInt8> = Set("-._~:/?#[]@!$&'()*+,;=".utf8)

    /// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, hex digits of either case.
    static func isUUID(_ text: UnsafeRawBufferPointer) -> Bool {
        guard text.count == 36 else { return false }
        for index in 0..<36 {
            if index == 8 || index == 13 || index == 18 || index == 23 {
                guard text[index] == UInt8(ascii: "-") else { return false }
            } else if !isHex(text[index]) {
                return false
            }
        }
        return true
    }
}
