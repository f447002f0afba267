import FerryProtocol

/// The detectors inside text: the parts of a string that are an address, a number … of a kind,
/// with the rest of the text kept (docs/QUALITY.md, "Inside text"). The shapes are the whole-value
/// predicates of ``Detectors`` (`isCard`, `isPhone`, `isIPv4`, `isIPv6`, `isIBAN`, `Formats.isEmail`)
/// applied to the candidate parts the boundaries allow; URLs are read by component (path segments,
/// query and fragment values, percent-decoded).
///
/// What counts as a match (the specification `scripts/detector-oracle` implements independently):
/// - **e-mail**: around each `@`, the longest run of `A–Z a–z 0–9 . _ % + -` before it and of
///   `A–Z a–z 0–9 . -` after it (trailing dots and hyphens dropped), if that is an address.
/// - the other kinds start at a **token start** (the byte before is not a letter, digit, `_` or
///   a non-ASCII byte) and end before a byte that is none of those either; among the candidates at
///   the leftmost start the longest wins (then card, phone, IPv4, IPv6, IBAN), and the scan goes on
///   after it. A candidate is at most 45 bytes.
/// - **card, phone, IPv4**: digits, spaces, `+ ( ) . -`, starting with a digit, `+` or `(`,
///   ending with a digit; not continuing a dotted, dashed or timed number (`.` `-` `:` after a
///   digit before it; `.` `-` then a digit after it; for card and phone also `:` then a digit).
/// - **IPv4** is not taken after a product token's `/` (`Chrome/120.0.0.0`), after the word
///   `version` or `build` (and up to two of ` `, `:`, `=`), nor under a member or query
///   parameter named `version` or `build`.
/// - **IPv6**: hex digits, `:` and `.`, not after `:` or `.`, not followed by a hex digit, `:` or
///   `.` going on; two colons at least and a decimal digit.
/// - **IBAN**: two capitals, two digits, then capitals, digits and single spaces.
extension Detectors {
    /// A part of a text one detector recognised: the bytes `start..<end` of the text, of `kind`;
    /// `encoding` says how they are written (a URL component's part was found percent-decoded).
    struct Match: Equatable, Sendable {
        var start: Int
        var end: Int
        var kind: DetectorKind
        var encoding: URLEncoding
    }

    /// How a part of a URL is written.
    enum URLEncoding: Sendable {
        /// As it is.
        case none
        /// Percent-escapes (a path segment).
        case path
        /// Percent-escapes and `+` for a space (a query or fragment value, as forms write it).
        case query
    }

    /// The longest part a kind may take inside text.
    static let longestPart = 45

    /// What a text may hold, from one count of its bytes (``find(_:kinds:key:prefiltered:inText:)``):
    /// false rules the search for a kind out.
    struct Hints: Sendable {
        /// An `@`: an e-mail address (outside a URL's escapes).
        var at = true
        /// A `:`: an IPv6 address, a URL.
        var colon = true
        /// 8 digits, or 4 and three dots: a card, a phone number, an IPv4 address.
        var numbers = true
        /// 2 digits in 15 bytes: an IBAN.
        var iban = true
        /// Everything possible (a percent-decoded URL component).
        static let all = Hints()
    }

    /// The parts of `text` the detectors of `kinds` recognise, in order, not overlapping (empty:
    /// none; nothing is allocated then). `noIP`: the text is under a member named `version` or
    /// `build`. `hints`: what the caller knows the text cannot hold.
    static func matches(in text: UnsafeRawBufferPointer, kinds: KindSet, noIP: Bool, hints: Hints = .all) -> [Match] {
        var found: [Match] = []
        guard hints.colon else {
            scanBuffer(text, kinds: kinds, noIP: noIP, hints: hints) { start, end, kind in
                found.append(Match(start: start, end: end, kind: kind, encoding: .none))
            }
            return found
        }
        // URLs first (a `://` after a scheme at a token start); the text between them as it is.
        var plainStart = 0
        var search = 0
        while let colon = nextSchemeSeparator(text, from: search) {
            var start = colon
            while start > plainStart, Formats.isAlpha(text[start - 1]) { start -= 1 }
            guard start < colon, start == 0 || !isWord(text[start - 1]) else {
                search = colon + 3
                continue
            }
            var end = colon + 3
            while end < text.count, !endsURL(text[end]) { end += 1 }
            scanPlain(text, plainStart..<start, kinds: kinds, noIP: noIP, hints: hints, into: &found)
            scanURL(text, (colon + 3)..<end, kinds: kinds, noIP: noIP, hints: hints, into: &found)
            plainStart = end
            search = end
        }
        scanPlain(text, plainStart..<text.count, kinds: kinds, noIP: noIP, hints: hints, into: &found)
        return found
    }

    /// `text` with each of `matches` replaced by `replacement` of its (decoded) bytes, written
    /// back as the part was (percent-encoded in a URL component).
    static func rewrite(_ text: UnsafeRawBufferPointer, _ matches: [Match],
                        _ replacement: (UnsafeRawBufferPointer, DetectorKind) -> [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(text.count + 64 * matches.count)
        var next = 0
        for match in matches {
            out.append(contentsOf: text[next..<match.start])
            let part = UnsafeRawBufferPointer(rebasing: text[match.start..<match.end])
            switch match.encoding {
            case .none:
                out += replacement(part, match.kind)
            case .path, .query:
                let (decoded, _) = percentDecoded(part, plusIsSpace: match.encoding == .query)
                let replaced = decoded.withUnsafeBytes { replacement($0, match.kind) }
                percentEncode(replaced, into: &out)
            }
            next = match.end
        }
        out.append(contentsOf: text[next...])
        return out
    }

    // MARK: Plain text

    /// Letters, digits, `_` and non-ASCII bytes: what a match may not touch.
    @inline(__always)
    static func isWord(_ byte: UInt8) -> Bool {
        Formats.isAlpha(byte) || Formats.isDigit(byte) || byte == UInt8(ascii: "_") || byte >= 0x80
    }

    /// The matches in `text[range]`, read as a text of its own (its ends are boundaries), appended
    /// to `found` in the text's offsets.
    static func scanPlain(_ text: UnsafeRawBufferPointer, _ range: Range<Int>, kinds: KindSet, noIP: Bool, hints: Hints, into found: inout [Match]) {
        guard range.count >= 2 else { return }
        let part = UnsafeRawBufferPointer(rebasing: text[range])
        scanBuffer(part, kinds: kinds, noIP: noIP, hints: hints) { start, end, kind in
            found.append(Match(start: range.lowerBound + start, end: range.lowerBound + end, kind: kind, encoding: .none))
        }
    }

    /// The matches in `text`, in order, handed to `emit` (start, end, kind).
    static func scanBuffer(_ text: UnsafeRawBufferPointer, kinds: KindSet, noIP: Bool, hints: Hints, _ emit: (Int, Int, DetectorKind) -> Void) {
        let count = text.count
        // The addresses first: around each `@`.
        var emails: [(start: Int, end: Int)] = []
        if hints.at, kinds.contains(.email) {
            var index = 0
            while index < count {
                if text[index] == UInt8(ascii: "@"), let email = email(text, at: index, after: emails.last?.end ?? 0) {
                    emails.append(email)
                    index = email.end
                    continue
                }
                index += 1
            }
        }
        let numbers = hints.numbers && (kinds.contains(.card) || kinds.contains(.phone) || (kinds.contains(.ip) && !noIP))
        let ipv6 = hints.colon && kinds.contains(.ip) && !noIP
        let iban = hints.iban && kinds.contains(.iban)
        guard numbers || ipv6 || iban || !emails.isEmpty else { return }
        var nextEmail = 0
        var start = 0
        // Whether the byte before `start` is a word byte (then `start` is no token start).
        var afterWord = false
        while start < count {
            if nextEmail < emails.count, start >= emails[nextEmail].start {
                emit(emails[nextEmail].start, emails[nextEmail].end, .email)
                start = emails[nextEmail].end
                afterWord = isWord(text[start - 1])
                nextEmail += 1
                continue
            }
            let byte = text[start]
            if afterWord {
                afterWord = isWord(byte)
                start += 1
                continue
            }
            afterWord = isWord(byte)
            let limit = nextEmail < emails.count ? emails[nextEmail].start : count
            var best: (end: Int, kind: DetectorKind)?
            if numbers, Formats.isDigit(byte) || ((byte == UInt8(ascii: "+") || byte == UInt8(ascii: "(")) && start + 1 < count && Formats.isDigit(text[start + 1])) {
                best = numberAt(text, start, limit: limit, kinds: kinds, noIP: noIP)
            }
            if ipv6, Formats.isHex(byte) || byte == UInt8(ascii: ":"), let end = ipv6At(text, start, limit: limit), end > (best?.end ?? 0) {
                best = (end, .ip)
            }
            if iban, byte &- UInt8(ascii: "A") < 26, let end = ibanAt(text, start, limit: limit), end > (best?.end ?? 0) {
                best = (end, .iban)
            }
            if let best {
                emit(start, best.end, best.kind)
                start = best.end
                afterWord = isWord(text[start - 1])
            } else {
                start += 1
            }
        }
    }

    /// The e-mail address around the `@` at `at`, not reaching before `floor`.
    private static func email(_ text: UnsafeRawBufferPointer, at: Int, after floor: Int) -> (start: Int, end: Int)? {
        var start = at
        while start > floor, isLocal(text[start - 1]) { start -= 1 }
        var end = at + 1
        while end < text.count, isDomainByte(text[end]) { end += 1 }
        while end > at + 1, text[end - 1] == UInt8(ascii: ".") || text[end - 1] == UInt8(ascii: "-") { end -= 1 }
        guard start < at, end > at + 1, Formats.isEmail(UnsafeRawBufferPointer(rebasing: text[start..<end])) else { return nil }
        return (start, end)
    }

    private static func isLocal(_ byte: UInt8) -> Bool {
        Formats.isAlpha(byte) || Formats.isDigit(byte) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_")
            || byte == UInt8(ascii: "%") || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-")
    }

    private static func isDomainByte(_ byte: UInt8) -> Bool {
        Formats.isAlpha(byte) || Formats.isDigit(byte) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
    }

    /// A card, phone number or IPv4 address starting at `start` (a token start): the longest,
    /// and its kind.
    private static func numberAt(_ text: UnsafeRawBufferPointer, _ start: Int, limit: Int, kinds: KindSet, noIP: Bool) -> (end: Int, kind: DetectorKind)? {
        // Not the middle of a dotted, dashed or timed number (`1.2.3.4.5`, `2024-05-01`, `12:00`).
        if start >= 2, isNumberSeparator(text[start - 1]) || text[start - 1] == UInt8(ascii: ":"), Formats.isDigit(text[start - 2]) {
            return nil
        }
        // The extent, and its digits and dots (kept for the part as it shortens).
        var extent = start, digits = 0, dots = 0
        let cap = min(limit, start + longestPart)
        while extent < cap {
            let byte = text[extent]
            if Formats.isDigit(byte) {
                digits += 1
            } else if byte == UInt8(ascii: ".") {
                dots += 1
            } else if !isNumberByte(byte) {
                break
            }
            extent += 1
        }
        guard digits >= 4 else { return nil }
        let card = kinds.contains(.card), phone = kinds.contains(.phone)
        var ip: Bool?  // decided when first needed
        var end = extent
        while end > start && digits >= 4 {
            let last = text[end - 1]
            defer {
                if Formats.isDigit(last) { digits -= 1 } else if last == UInt8(ascii: ".") { dots -= 1 }
                end -= 1
            }
            // Ends are after a digit, before a byte that is not a word byte.
            guard Formats.isDigit(last), end == text.count || !isWord(text[end]) else { continue }
            let follows: UInt8 = end < text.count ? text[end] : 0
            let next: UInt8 = end + 1 < text.count ? text[end + 1] : 0
            // Going on as a dotted or dashed number.
            if isNumberSeparator(follows), Formats.isDigit(next) { continue }
            let timed = follows == UInt8(ascii: ":") && Formats.isDigit(next)
            let part = UnsafeRawBufferPointer(rebasing: text[start..<end])
            if !timed, card, digits >= 13, digits <= 19, isCard(part) { return (end, .card) }
            if !timed, phone, digits >= 8, digits <= 15, isPhone(part) { return (end, .phone) }
            if dots == 3, digits <= 12 {
                if ip == nil { ip = kinds.contains(.ip) && !noIP && !followsVersion(text, start) }
                if ip!, isIPv4(part) { return (end, .ip) }
            }
        }
        return nil
    }

    @inline(__always)
    private static func isNumberSeparator(_ byte: UInt8) -> Bool { byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-") }

    private static func isNumberByte(_ byte: UInt8) -> Bool {
        Formats.isDigit(byte) || byte == UInt8(ascii: " ") || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "(")
            || byte == UInt8(ascii: ")") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
    }

    /// Whether the number at `start` is a version: after a product token's `/`
    /// (`Chrome/120.0.0.0`) or the word `version` or `build` and up to two of ` `, `:`, `=`.
    private static func followsVersion(_ text: UnsafeRawBufferPointer, _ start: Int) -> Bool {
        guard start >= 2 else { return false }
        if text[start - 1] == UInt8(ascii: "/") { return isWord(text[start - 2]) }
        var end = start
        while end > 0, start - end < 2, text[end - 1] == UInt8(ascii: " ") || text[end - 1] == UInt8(ascii: ":") || text[end - 1] == UInt8(ascii: "=") {
            end -= 1
        }
        guard end < start else { return false }
        var wordStart = end
        while wordStart > 0, Formats.isAlpha(text[wordStart - 1]) { wordStart -= 1 }
        guard wordStart == 0 || !isWord(text[wordStart - 1]) else { return false }
        return isVersionWord(UnsafeRawBufferPointer(rebasing: text[wordStart..<end]))
    }

    /// `version` or `build`, in any case.
    static func isVersionWord(_ word: UnsafeRawBufferPointer) -> Bool {
        func equals(_ name: StaticString) -> Bool {
            guard word.count == name.utf8CodeUnitCount else { return false }
            for index in 0..<word.count where word[index] | 0x20 != name.utf8Start[index] { return false }
            return true
        }
        return equals("version") || equals("build")
    }

    /// An IPv6 address starting at `start`.
    private static func ipv6At(_ text: UnsafeRawBufferPointer, _ start: Int, limit: Int) -> Int? {
        if start > 0, text[start - 1] == UInt8(ascii: ":") || text[start - 1] == UInt8(ascii: ".") { return nil }
        var extent = start, colons = 0
        let cap = min(limit, start + longestPart)
        while extent < cap {
            let byte = text[extent]
            if byte == UInt8(ascii: ":") {
                colons += 1
            } else if !(Formats.isHex(byte) || byte == UInt8(ascii: ".")) {
                break
            }
            extent += 1
        }
        guard colons >= 2 else { return nil }
        var end = extent
        while end >= start + 2 {
            defer { end -= 1 }
            if end < text.count {
                let follows = text[end]
                if follows == UInt8(ascii: ":") || follows == UInt8(ascii: ".") {
                    if end + 1 < text.count {
                        let next = text[end + 1]
                        if isWord(next) || next == UInt8(ascii: ":") || next == UInt8(ascii: ".") { continue }
                    }
                } else if isWord(follows) {
                    continue
                }
            }
            let part = UnsafeRawBufferPointer(rebasing: text[start..<end])
            guard part.contains(where: Formats.isDigit), isIPv6(part) else { continue }
            var partColons = 0
            for byte in part where byte == UInt8(ascii: ":") { partColons += 1 }
            if partColons >= 2 { return end }
        }
        return nil
    }

    /// An IBAN starting at `start`.
    private static func ibanAt(_ text: UnsafeRawBufferPointer, _ start: Int, limit: Int) -> Int? {
        guard limit - start >= 15, text[start + 1] &- UInt8(ascii: "A") < 26, Formats.isDigit(text[start + 2]),
              Formats.isDigit(text[start + 3]) else { return nil }
        var extent = start
        let cap = min(limit, start + 42)
        while extent < cap {
            let byte = text[extent]
            guard Formats.isDigit(byte) || byte &- UInt8(ascii: "A") < 26 || byte == UInt8(ascii: " ") else { break }
            extent += 1
        }
        var end = extent
        while end >= start + 15 {
            defer { end -= 1 }
            guard text[end - 1] != UInt8(ascii: " "), end == text.count || !isWord(text[end]) else { continue }
            if isIBAN(UnsafeRawBufferPointer(rebasing: text[start..<end])) { return end }
        }
        return nil
    }

    // MARK: URLs

    /// The index of the next `://` at or after `from`.
    private static func nextSchemeSeparator(_ text: UnsafeRawBufferPointer, from: Int) -> Int? {
        var index = from
        while index + 3 <= text.count {
            if text[index] == UInt8(ascii: ":"), text[index + 1] == UInt8(ascii: "/"), text[index + 2] == UInt8(ascii: "/") { return index }
            index += 1
        }
        return nil
    }

    /// White space, quotes and angle brackets end a URL in text.
    private static func endsURL(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: " "), 0x09, 0x0A, 0x0B, 0x0C, 0x0D, UInt8(ascii: "\""), UInt8(ascii: "'"), UInt8(ascii: "<"),
             UInt8(ascii: ">"), UInt8(ascii: "`"):
            true
        default: false
        }
    }

    /// The URL after its `scheme://` in `range`: the authority as text, each path segment, each
    /// query and fragment value (a parameter named `version` or `build` holds no address).
    private static func scanURL(_ text: UnsafeRawBufferPointer, _ range: Range<Int>, kinds: KindSet, noIP: Bool, hints: Hints,
                                into found: inout [Match]) {
        var index = range.lowerBound
        while index < range.upperBound, text[index] != UInt8(ascii: "/"), text[index] != UInt8(ascii: "?"), text[index] != UInt8(ascii: "#") {
            index += 1
        }
        scanPlain(text, range.lowerBound..<index, kinds: kinds, noIP: noIP, hints: hints, into: &found)
        // The path: segments between slashes.
        var segment = index
        while index < range.upperBound, text[index] != UInt8(ascii: "?"), text[index] != UInt8(ascii: "#") {
            if text[index] == UInt8(ascii: "/") {
                scanComponent(text, segment..<index, .path, kinds: kinds, noIP: noIP, hints: hints, into: &found)
                segment = index + 1
            }
            index += 1
        }
        scanComponent(text, segment..<index, .path, kinds: kinds, noIP: noIP, hints: hints, into: &found)
        // The query and the fragment: `name=value` pairs between `&`.
        while index < range.upperBound {
            index += 1  // the `?` or `#`
            var pair = index
            while index <= range.upperBound {
                let atEnd = index == range.upperBound || text[index] == UInt8(ascii: "#")
                if atEnd || text[index] == UInt8(ascii: "&") {
                    var equals = pair
                    while equals < index, text[equals] != UInt8(ascii: "=") { equals += 1 }
                    let named = equals < index
                    let versioned = named && isVersionWord(UnsafeRawBufferPointer(rebasing: text[pair..<equals]))
                    scanComponent(text, (named ? equals + 1 : pair)..<index, .query, kinds: kinds, noIP: noIP || versioned, hints: hints, into: &found)
                    pair = index + 1
                    if atEnd { break }
                }
                index += 1
            }
        }
    }

    /// A URL component: scanned as it is, or percent-decoded when it holds an escape (or, in a
    /// query, a `+`), its matches mapped back to the escaped bytes.
    private static func scanComponent(_ text: UnsafeRawBufferPointer, _ range: Range<Int>, _ encoding: URLEncoding, kinds: KindSet,
                                      noIP: Bool, hints: Hints, into found: inout [Match]) {
        guard range.count >= 2 else { return }
        let part = UnsafeRawBufferPointer(rebasing: text[range])
        let escaped = part.contains { $0 == UInt8(ascii: "%") || (encoding == .query && $0 == UInt8(ascii: "+")) }
        guard escaped else {
            scanPlain(text, range, kinds: kinds, noIP: noIP, hints: hints, into: &found)
            return
        }
        let (decoded, offsets) = percentDecoded(part, plusIsSpace: encoding == .query)
        decoded.withUnsafeBytes { buffer in
            scanBuffer(buffer, kinds: kinds, noIP: noIP, hints: .all) { start, end, kind in
                found.append(Match(start: range.lowerBound + offsets[start], end: range.lowerBound + offsets[end], kind: kind, encoding: encoding))
            }
        }
    }

    /// `part` with `%XX` escapes (and `+`, in a query) decoded, and for each decoded byte (and
    /// the end) its offset in `part`. A `%` not followed by two hex digits stays as it is.
    static func percentDecoded(_ part: UnsafeRawBufferPointer, plusIsSpace: Bool) -> (bytes: [UInt8], offsets: [Int]) {
        var bytes: [UInt8] = [], offsets: [Int] = []
        bytes.reserveCapacity(part.count)
        offsets.reserveCapacity(part.count + 1)
        var index = 0
        while index < part.count {
            offsets.append(index)
            let byte = part[index]
            if byte == UInt8(ascii: "%"), index + 2 < part.count, let high = JSONScan.hexValue(part[index + 1]),
               let low = JSONScan.hexValue(part[index + 2]) {
                bytes.append(high << 4 | low)
                index += 3
            } else {
                bytes.append(plusIsSpace && byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
                index += 1
            }
        }
        offsets.append(part.count)
        return (bytes, offsets)
    }

    /// Appends `bytes` percent-encoded: letters, digits and `- . _ ~ * : @` as they are.
    static func percentEncode(_ bytes: [UInt8], into out: inout [UInt8]) {
        let digits = Array("0123456789ABCDEF".utf8)
        for byte in bytes {
            switch byte {
            case _ where Formats.isAlpha(byte) || Formats.isDigit(byte), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                 UInt8(ascii: "~"), UInt8(ascii: "*"), UInt8(ascii: ":"), UInt8(ascii: "@"):
                out.append(byte)
            default:
                out += [UInt8(ascii: "%"), digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]]
            }
        }
    }
}
