#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A refused request: the reply `{"ok": false, "error": message, "valid": […]}` (`valid`, the
/// accepted values of the field the message names, only when there is such a list).
public struct ControlRefusal: Error, Sendable, Hashable, Codable, CustomStringConvertible {
    /// Why the agent refused.
    public var message: String
    /// The accepted values, when the refusal is about a value with a fixed set (may be empty).
    public var valid: [String]
    /// A machine-readable reason, when there is one: ``accessDenied`` (`"access_denied"`).
    public var code: String?

    /// The ``code`` of a refusal by the access policy.
    public static let accessDenied = "access_denied"

    /// A refusal with `message`, the accepted values and a code.
    public init(_ message: String, valid: [String] = [], code: String? = nil) {
        self.message = message
        self.valid = valid
        self.code = code
    }

    /// The refusal of a request that is not a JSON object with a string field `op`.
    public static let notARequest = ControlRefusal("request must be a JSON object with a string field \"op\"")


    /// Whether the access policy turned the caller away: `code` is `access_denied`, or (from an
    /// agent that sends no code) the message starts with "access denied".
    public var isAccessDenied: Bool {
        code == Self.accessDenied || message.lowercased().hasPrefix("access denied")
    }

    public var description: String { message }

    private enum CodingKeys: String, CodingKey { case ok, error, valid, code }

    /// Decodes a refusal; a missing `error` reads as "no reason given", a missing `valid` as [].
    public init(from decoder: any Decoder) throws {
        let object = try decoder.container(keyedBy: CodingKeys.self)
        message = try object.decodeIfPresent(String.self, forKey: .error) ?? "no reason given"
        valid = try object.decodeIfPresent([String].self, forKey: .valid) ?? []
        code = try? object.decodeIfPresent(String.self, forKey: .code)
    }

    public func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: CodingKeys.self)
        try object.encode(false, forKey: .ok)
        try object.encode(message, forKey: .error)
        if !valid.isEmpty { try object.encode(valid, forKey: .valid) }
        if let code { try object.encode(code, forKey: .code) }
    }
}
