/// Why a tracking plan, a redaction table or a key file could not be used.
///
/// A struct over a private enum (as FerryProtocol's `ProtocolError`), so new problems can be
/// added without breaking callers. Every ``description`` names the file (or table), the JSON path
/// and what is wrong.
public struct QualityError: Error, Hashable, Sendable, CustomStringConvertible {
    private enum Base: Hashable, Sendable {
        case unreadable, invalidJSON, invalidPlan, unsupportedKeyword, invalidPattern, invalidRedaction, keyFile
    }
    private let base: Base
    /// The whole message: file, JSON path and what is wrong.
    public let description: String

    private init(_ base: Base, _ description: String) {
        self.base = base
        self.description = description
    }

    /// A file could not be read (missing, not a regular file, unreadable).
    public static func unreadable(file: String, reason: String) -> Self {
        .init(.unreadable, "\(file): cannot read: \(reason)")
    }
    /// The bytes are not JSON (`offset`: the byte where the parser stopped).
    public static func invalidJSON(file: String, offset: Int, reason: String) -> Self {
        .init(.invalidJSON, "\(file): not valid JSON at byte \(offset): \(reason)")
    }
    /// The JSON is well-formed but is not a plan (a wrong type, a missing member, a bad value).
    public static func invalidPlan(file: String, path: String, message: String) -> Self {
        .init(.invalidPlan, "\(file): \(path): \(message)")
    }
    /// A schema uses a JSON Schema keyword outside the supported subset (docs/QUALITY.md).
    public static func unsupportedKeyword(file: String, path: String, keyword: String) -> Self {
        .init(.unsupportedKeyword, "\(file): \(path): unsupported JSON Schema keyword \"\(keyword)\" (docs/QUALITY.md lists the supported subset)")
    }
    /// A `pattern` the regular expression engine refuses (syntax error or unsupported feature).
    public static func invalidPattern(file: String, path: String, pattern: String, message: String) -> Self {
        .init(.invalidPattern, "\(file): \(path): pattern \"\(pattern)\": \(message)")
    }
    /// The `redact` table is wrong (a bad path, action or detector kind).
    public static func invalidRedaction(path: String, message: String) -> Self {
        .init(.invalidRedaction, "redact: \(path): \(message)")
    }
    /// The HMAC key file is missing, unsafe (a symlink, readable by others, a wrong owner) or short.
    public static func keyFile(path: String, message: String) -> Self {
        .init(.keyFile, "redact.keyFile \(path): \(message)")
    }

    /// Compares the kind of error only, ignoring ``description``.
    public static func ~= (pattern: QualityError, value: any Error) -> Bool {
        (value as? QualityError)?.base == pattern.base
    }
}
