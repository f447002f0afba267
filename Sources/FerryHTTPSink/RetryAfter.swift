import FerryProtocol

/// The `Retry-After` response header (RFC 9110 §10.2.3): either delay-seconds or an HTTP-date.
///
/// - `120` — a delay in seconds (digits only).
/// - `Sun, 06 Nov 1994 08:49:37 GMT` — an IMF-fixdate; the obsolete RFC 850
///   (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime (`Sun Nov  6 08:49:37 1994`) forms are
///   accepted too, as RFC 9110 requires of recipients. A date in the past means "now" (zero).
/// - Anything else is ignored (`nil`): the delivery loop then uses its normal backoff.
///
/// Values above ``maximum`` (one hour) are cut to it, so a misconfigured upstream cannot stall
/// delivery for days; the loop retries after an hour and gets a fresh answer.
public enum RetryAfter {
    /// The longest delay honoured: one hour.
    public static let maximum: Duration = .seconds(3600)

    /// The delay `value` asks for, seen at `now` (ms since the Unix epoch); `nil` if it is not a
    /// valid `Retry-After` value.
    public static func delay(_ value: String, now: UInt64 = WallClock.unixMilliseconds()) -> Duration? {
        let text = value.trimmingWhitespace()
        guard !text.isEmpty else { return nil }
        if text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
            // More than 10 digits is beyond any cap (and beyond Int on some platforms).
            guard text.utf8.count <= 10, let seconds = Int64(text) else { return maximum }
            return min(.seconds(seconds), maximum)
        }
        guard let date = httpDate(text, nowYear: CivilTime.year(ofUnixSeconds: Int64(now / 1000))) else { return nil }
        let milliseconds = date * 1000 - Int64(now)
        guard milliseconds > 0 else { return .zero }
        return min(.milliseconds(milliseconds), maximum)
    }

    /// An HTTP-date as seconds since the Unix epoch, or `nil`.
    static func httpDate(_ text: String, nowYear: Int64) -> Int64? {
        let tokens = text.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        guard let first = tokens.first else { return nil }
        if first.hasSuffix(",") {
            let dayName = String(first.dropLast())
            if tokens.count == 6 {
                // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
                guard shortDays.contains(dayName), tokens[1].utf8.count == 2, tokens[3].utf8.count == 4,
                      tokens[5] == "GMT", let day = Int64(tokens[1]), let month = month(tokens[2]),
                      let year = Int64(tokens[3]) else { return nil }
                return timestamp(year: year, month: month, day: day, time: tokens[4])
            }
            if tokens.count == 4 {
                // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
                let parts = tokens[1].split(separator: "-", omittingEmptySubsequences: false).map(String.init)
                guard longDays.contains(dayName), parts.count == 3, parts[0].utf8.count == 2, parts[2].utf8.count == 2,
                      tokens[3] == "GMT", let day = Int64(parts[0]), let month = month(parts[1]),
                      let twoDigitYear = Int64(parts[2]) else { return nil }
                // RFC 9110: a two-digit year more than 50 years in the future is in the past century.
                var year = nowYear - nowYear % 100 + twoDigitYear
                if year > nowYear + 50 { year -= 100 }
                return timestamp(year: year, month: month, day: day, time: tokens[2])
            }
            return nil
        }
        // asctime: Sun Nov  6 08:49:37 1994
        guard tokens.count == 5, shortDays.contains(first), let month = month(tokens[1]),
              (1...2).contains(tokens[2].utf8.count), let day = Int64(tokens[2]),
              tokens[4].utf8.count == 4, let year = Int64(tokens[4]) else { return nil }
        return timestamp(year: year, month: month, day: day, time: tokens[3])
    }

    private static let shortDays: Set<String> = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
    private static let longDays: Set<String> = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    private static func month(_ name: String) -> Int64? {
        months.firstIndex(of: name).map { Int64($0) + 1 }
    }

    /// Seconds since the epoch for a validated date and `HH:MM:SS`.
    private static func timestamp(year: Int64, month: Int64, day: Int64, time: String) -> Int64? {
        let parts = time.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, parts.allSatisfy({ $0.utf8.count == 2 }),
              let hour = Int64(parts[0]), let minute = Int64(parts[1]), let second = Int64(parts[2]),
              (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second),
              (1...9999).contains(year), (1...daysIn(month: month, year: year)).contains(day) else { return nil }
        return CivilTime.daysFromCivil(year: year, month: month, day: day) * 86_400 + hour * 3600 + minute * 60 + min(second, 59)
    }

    private static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }
}

/// Calendar arithmetic on the proleptic Gregorian calendar in UTC, without Foundation.
enum CivilTime {
    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The year, month and day of `days` since 1970-01-01 (the inverse of ``daysFromCivil``).
    static func civilFromDays(_ days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    static func year(ofUnixSeconds seconds: Int64) -> Int64 {
        civilFromDays(seconds / 86_400).year
    }

    /// `milliseconds` since the epoch as ISO 8601 UTC with milliseconds: `2024-05-01T12:00:00.000Z`.
    static func iso8601(milliseconds: UInt64) -> String {
        var bytes: [UInt8] = []
        appendISO8601(milliseconds: milliseconds, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends ``iso8601(milliseconds:)`` to `out` as bytes: the segment body writes one per
    /// event, and building it as an interpolated string cost more than the rest of the message.
    static func appendISO8601(milliseconds: UInt64, to out: inout [UInt8]) {
        let seconds = Int64(milliseconds / 1000)
        let (year, month, day) = civilFromDays(seconds / 86_400)
        let secondOfDay = seconds % 86_400
        /// `value` (never negative here) in decimal, zero-padded to `width` digits.
        func pad(_ value: Int64, _ width: Int, _ separator: UInt8) {
            var digits = 1, rest = value / 10
            while rest > 0 { digits += 1; rest /= 10 }
            for _ in 0..<max(0, width - digits) { out.append(UInt8(ascii: "0")) }
            let start = out.count
            out.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: digits))
            var remaining = value
            for index in stride(from: start + digits - 1, through: start, by: -1) {
                out[index] = UInt8(ascii: "0") + UInt8(remaining % 10)
                remaining /= 10
            }
            out.append(separator)
        }
        pad(year, 4, UInt8(ascii: "-"))
        pad(month, 2, UInt8(ascii: "-"))
        pad(day, 2, UInt8(ascii: "T"))
        pad(secondOfDay / 3600, 2, UInt8(ascii: ":"))
        pad(secondOfDay / 60 % 60, 2, UInt8(ascii: ":"))
        pad(secondOfDay % 60, 2, UInt8(ascii: "."))
        pad(Int64(milliseconds % 1000), 3, UInt8(ascii: "Z"))
    }
}


extension String {
    /// Without leading and trailing spaces and tabs (HTTP's optional whitespace).
    func trimmingWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let start = firstIndex(where: { !isSpace($0) }), let end = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[start...end])
    }
}
