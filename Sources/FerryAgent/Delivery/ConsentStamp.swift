import FerryStorage

/// How a body writes the consent stamp of a batch (docs/PROTOCOL.md, "Consent stamp"): one
/// writer for every sink, so the file sink, JetStream and the HTTP bodies write the same bytes.
///
/// The stamp is the send-time gate's `[String: String]` (``DeliveryBatch/consent``): the four
/// GDPR fields, `anonymous_id` and `consent_seq`. The current style writes `consent_seq` as a
/// JSON number and names the ad-personalisation field as Google Consent Mode v2 does
/// (`ad_personalization`); the older styles are kept for the body versions that still write them.
public struct ConsentStampStyle: Sendable, Hashable {
    /// `consent_seq` as a JSON number (else a string of digits).
    public var numericSequence: Bool
    /// Google Consent Mode v2's `ad_personalization` (else Ferry's earlier `ads_personalization`).
    public var consentModeNames: Bool

    /// A style.
    public init(numericSequence: Bool, consentModeNames: Bool) {
        self.numericSequence = numericSequence
        self.consentModeNames = consentModeNames
    }

    /// The stamp of this release, in every body: `consent_seq` a number, `ad_personalization`.
    public static let current = ConsentStampStyle(numericSequence: true, consentModeNames: true)
    /// File line format 2 and JetStream body version 1: `consent_seq` a number, `ads_personalization`.
    public static let numericSequenceOnly = ConsentStampStyle(numericSequence: true, consentModeNames: false)
    /// File line format 1 and HTTP body version 1: `consent_seq` a string, `ads_personalization`.
    public static let original = ConsentStampStyle(numericSequence: false, consentModeNames: false)

    /// The stamp's key for the record's field `field` (a key of ``GDPRRecord/stamp``).
    public func key(_ field: String) -> String {
        consentModeNames && field == "ads_personalization" ? "ad_personalization" : field
    }

    /// `stamp` as a JSON object, keys sorted (`{}` when empty).
    public func json(_ stamp: [String: String]) -> [UInt8] {
        var json = JSONWriter()
        for (key, value) in stamp.map({ (key($0.key), $0.value) }).sorted(by: { $0.0 < $1.0 }) {
            if numericSequence, key == "consent_seq", let number = UInt64(value) {
                json.field(named: key, number)
            } else {
                json.field(named: key, value)
            }
        }
        return json.finish()
    }
}

/// The line formats of an event's JSON object as the sinks write it — a file sink line, a
/// JetStream message body (docs/PROTOCOL.md, "File sink lines"): one numbering for every sink.
public enum LineFormat {
    /// The newest line format, written by default.
    public static let current = 3
    /// Every line format a sink can write.
    public static let all = 1...3

    /// The consent stamp's style in line format `lineFormat`: 3 the current, 2 with
    /// `ads_personalization`, 1 with `consent_seq` a string as well.
    public static func consentStyle(lineFormat: Int) -> ConsentStampStyle {
        switch lineFormat {
        case ...1: .original
        case 2: .numericSequenceOnly
        default: .current
        }
    }

    /// The consent stamp as a JSON object in line format `lineFormat`'s style, or `nil` when
    /// empty (docs/PROTOCOL.md, "Consent stamp").
    public static func consentJSON(_ stamp: [String: String], lineFormat: Int = current) -> [UInt8]? {
        guard !stamp.isEmpty else { return nil }
        return consentStyle(lineFormat: lineFormat).json(stamp)
    }
}
