import FerryProtocol

/// Redaction compiled once per load: the rules by path, the detectors and the HMAC key.
public struct Redactor: Sendable {
    /// Compiles `configuration`; `key` is the HMAC key (at least 32 bytes when a rule hashes).
    public init(configuration: RedactionConfiguration, key: [UInt8]) throws(QualityError) {
        throw .invalidRedaction(path: "$", message: "redaction is not implemented yet")
    }

    /// Reads the key file named by `configuration.keyFile` (a regular file, not a symlink, owned
    /// by root or this process's user, not readable by group or others, at least 32 bytes) and
    /// compiles the configuration.
    public static func load(configuration: RedactionConfiguration) throws(QualityError) -> Redactor {
        var key: [UInt8] = []
        if let path = configuration.keyFile { key = try FileAccess.readKey(path) }
        return try Redactor(configuration: configuration, key: key)
    }

    /// Redacts `event` in place; true when a field changed. Fields parsed and left unchanged are
    /// handed to the plan in `parsed`.
    func redact(_ event: inout WireEvent, parsed: inout ParsedFields) -> Bool {
        false
    }

    /// The rules and detectors, one line each, for `ferryd validate`.
    public var summary: [String] { [] }
}
