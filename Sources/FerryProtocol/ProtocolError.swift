/// Why a frame or message could not be decoded.
///
/// A struct over a private enum (as swift-service-lifecycle's `ServiceRunnerError`), so new codes
/// can be added without breaking callers' exhaustive switches.
public struct ProtocolError: Error, Hashable, Sendable, CustomStringConvertible {
    private enum Base: Hashable, Sendable {
        case truncated, unsupportedVersion, unknownKind, malformed, tooLarge, invalidUTF8, unsupportedField, invalidField
    }
    private let base: Base
    /// What exactly was wrong, for the error reply and the log.
    public let detail: String

    private init(_ base: Base, _ detail: String) {
        self.base = base
        self.detail = detail
    }

    /// A frame is shorter than its fixed header or its declared lengths.
    public static func truncated(_ detail: String) -> Self { .init(.truncated, detail) }
    /// The message header names a protocol version this side does not speak.
    public static func unsupportedVersion(_ detail: String) -> Self { .init(.unsupportedVersion, detail) }
    /// The message header names an unknown message kind.
    public static func unknownKind(_ detail: String) -> Self { .init(.unknownKind, detail) }
    /// The structure is wrong (bad lengths, unknown event type, wrong frame count).
    public static func malformed(_ detail: String) -> Self { .init(.malformed, detail) }
    /// An event exceeds the configured size limit.
    public static func tooLarge(_ detail: String) -> Self { .init(.tooLarge, detail) }
    /// A text field is not valid UTF-8.
    public static func invalidUTF8(_ detail: String) -> Self { .init(.invalidUTF8, detail) }
    /// An event carries a critical extension this side does not know.
    public static func unsupportedField(_ detail: String) -> Self { .init(.unsupportedField, detail) }
    /// A known extension field breaks its rule (an identifier too long, a context that is not a
    /// JSON object).
    public static func invalidField(_ detail: String) -> Self { .init(.invalidField, detail) }

    /// Compares the kind of error only, ignoring ``detail``.
    public static func ~= (pattern: ProtocolError, value: any Error) -> Bool {
        (value as? ProtocolError)?.base == pattern.base
    }

    /// The wire error code for this error (see ``ErrorCode``).
    public var code: ErrorCode {
        switch base {
        case .truncated, .malformed, .invalidUTF8, .unsupportedField, .invalidField: .malformedMessage
        case .unsupportedVersion: .unsupportedVersion
        case .unknownKind: .unknownKind
        case .tooLarge: .messageTooLarge
        }
    }

    /// The reject reason an event frame with this error gets.
    public var rejectReason: RejectReason {
        switch base {
        case .tooLarge: .tooLarge
        case .invalidUTF8: .invalidUTF8
        case .unsupportedField: .unsupportedField
        case .invalidField: .invalidField
        default: .malformed
        }
    }

    public var description: String { "\(base): \(detail)" }
}
