/// The `"quality"` table of ferryd's configuration (FerryAgent's loader parses it; the type lives
/// here so the offline tools share it).
public struct QualityConfiguration: Sendable, Equatable {
    /// `"plan"`: the tracking plan's path; nil for none.
    public var planPath: String?
    /// `"onViolation"`: what the agent does with an event that breaks the plan.
    public var onViolation: ViolationAction
    /// `"allowUnplanned"`: false makes an event the plan does not name a violation (`unplanned`).
    public var allowUnplanned: Bool

    /// Creates a configuration; the defaults are those of an absent key.
    public init(planPath: String? = nil, onViolation: ViolationAction = .block, allowUnplanned: Bool = true) {
        self.planPath = planPath
        self.onViolation = onViolation
        self.allowUnplanned = allowUnplanned
    }
}

/// What the agent does with an event that breaks the tracking plan.
public enum ViolationAction: String, Sendable, CaseIterable {
    /// Refused with reason `plan_violation`; nothing stored.
    case block
    /// Stored in the quarantine area, never delivered until released.
    case quarantine
    /// Delivered with the violations in `context.ferry.violations`.
    case tag
}

/// The `"redact"` table: rules by path, detectors, and the HMAC key file.
public struct RedactionConfiguration: Sendable, Equatable {
    /// `"keyFile"`: the HMAC-SHA-256 key for `hash` (required when any rule hashes).
    public var keyFile: String?
    /// `"rules"`: `{"path": "properties.email", "action": "hash"}`.
    public var rules: [RedactionRule]
    /// `"detect"`: `{"kind": "email", "action": "mask"}`.
    public var detectors: [DetectorRule]

    /// Creates a configuration.
    public init(keyFile: String? = nil, rules: [RedactionRule] = [], detectors: [DetectorRule] = []) {
        self.keyFile = keyFile
        self.rules = rules
        self.detectors = detectors
    }

    /// Parses the `redact` table's JSON object (the loader hands it the table's bytes). Unknown
    /// members, bad paths, actions and kinds are refused with the member's path.
    public init(json: [UInt8]) throws(QualityError) {
        self = try RedactionConfigurationParser.parse(json)
    }

    /// Reads the redact table of the file at `path`: a ferryd configuration file (its `"redact"`
    /// member) or a bare table (`ferry plan check --redact`).
    public init(file path: String) throws(QualityError) {
        let document = try JSONValue.parse(try FileAccess.read(path), file: path)
        let table = document["redact"] ?? document
        do throws(QualityError) {
            try self.init(json: Array(table.text.utf8))
        } catch {
            throw .invalidRedaction(path: path, message: error.description)
        }
    }
}

/// One redaction rule by path.
public struct RedactionRule: Sendable, Equatable {
    /// `properties.email`, `traits.*.phone`, `context.ip`, `userId` … (docs/QUALITY.md).
    public var path: String
    /// What happens to the value found there.
    public var action: RedactionAction

    /// Creates a rule.
    public init(path: String, action: RedactionAction) {
        self.path = path
        self.action = action
    }
}

/// One detector: every string value of this kind gets the action.
public struct DetectorRule: Sendable, Equatable {
    /// The kind of value detected.
    public var kind: DetectorKind
    /// What happens to a value detected.
    public var action: RedactionAction

    /// Creates a detector rule.
    public init(kind: DetectorKind, action: RedactionAction) {
        self.kind = kind
        self.action = action
    }
}

/// What redaction does to a value.
public enum RedactionAction: String, Sendable, CaseIterable {
    /// Removed (an object member disappears; an id becomes empty).
    case drop
    /// Replaced by a value of the same shape with most characters hidden (`j***@e***.com`).
    case mask
    /// Replaced by `hmac:<hex>`, HMAC-SHA-256 of the value under the host key.
    case hash
    /// Left exactly as it is, and not looked at by the detectors (the whole subtree of an object
    /// or array): a field that must be kept whole. Rules only; a detector that keeps is refused.
    case keep

    /// Whether a detector may have the action: every action but ``keep`` (a detector finds
    /// values to redact; a field it must not touch is named by a `keep` rule).
    public var isDetectorAction: Bool { self != .keep }
}

/// A kind of personal value the detectors recognise in any string.
public enum DetectorKind: String, Sendable, CaseIterable {
    /// An e-mail address.
    case email
    /// An E.164 or common national phone number.
    case phone
    /// An IPv4 or IPv6 address.
    case ip
    /// A payment card number (13–19 digits passing Luhn, spaces or dashes allowed).
    case card
    /// An IBAN whose mod-97 check digits are right.
    case iban

    /// The position of the kind in ``allCases`` (a table index, without searching the cases).
    var index: Int {
        switch self {
        case .email: 0
        case .phone: 1
        case .ip: 2
        case .card: 3
        case .iban: 4
        }
    }
}
