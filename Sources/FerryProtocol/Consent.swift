/// Consent vocabulary shared by the agent, the client library and the CLI.
///
/// The agent owns one consent state for the whole host; these types describe it on the control
/// socket (JSON) and in the client API. See `docs/CONSENT.md` for the model.

/// A consent status for one category (or for persistence).
public enum ConsentStatus: String, Sendable, Hashable, Codable, CaseIterable, CustomStringConvertible {
    /// Nobody has decided yet; the configured pre-consent policy applies.
    case undetermined
    /// Allowed.
    case granted
    /// Refused.
    case denied

    public var description: String { rawValue }
}

/// One field of the GDPR record (Google Consent Mode v2 style).
public enum GDPRValue: String, Sendable, Hashable, Codable, CaseIterable, CustomStringConvertible {
    /// Not set.
    case unset
    /// Granted (for `subjectToGDPR`: the user is subject to the GDPR).
    case granted
    /// Denied (for `subjectToGDPR`: the user is not subject to the GDPR).
    case denied

    public var description: String { rawValue }
}

/// The GDPR record. `subjectToGDPR` granted with `dataUsage` denied stops delivery and purges the
/// queue; the two ad fields never gate, they are stamped on every delivered batch.
public struct GDPRRecord: Sendable, Hashable, Codable {
    /// Whether the user is subject to the GDPR.
    public var subjectToGDPR: GDPRValue
    /// Consent for data usage.
    public var dataUsage: GDPRValue
    /// Consent for ads personalisation (Google `ad_personalization`); forwarded, not gating.
    public var adsPersonalization: GDPRValue
    /// Consent for ad storage (Google `ad_storage`); forwarded, not gating.
    public var adStorage: GDPRValue

    /// The JSON keys, in order (`subject_to_gdpr`, `data_usage`, `ads_personalization`, `ad_storage`).
    public static let fieldNames = ["subject_to_gdpr", "data_usage", "ads_personalization", "ad_storage"]

    /// Creates a record; every field defaults to `unset`.
    public init(
        subjectToGDPR: GDPRValue = .unset, dataUsage: GDPRValue = .unset,
        adsPersonalization: GDPRValue = .unset, adStorage: GDPRValue = .unset
    ) {
        self.subjectToGDPR = subjectToGDPR
        self.dataUsage = dataUsage
        self.adsPersonalization = adsPersonalization
        self.adStorage = adStorage
    }

    /// True when delivery must stop and the queue be purged.
    public var forbidsDataUsage: Bool { subjectToGDPR == .granted && dataUsage == .denied }

    /// The value of a field by its JSON name.
    public subscript(field: String) -> GDPRValue? {
        get {
            switch field {
            case "subject_to_gdpr": subjectToGDPR
            case "data_usage": dataUsage
            case "ads_personalization": adsPersonalization
            case "ad_storage": adStorage
            default: nil
            }
        }
        set {
            guard let newValue else { return }
            switch field {
            case "subject_to_gdpr": subjectToGDPR = newValue
            case "data_usage": dataUsage = newValue
            case "ads_personalization": adsPersonalization = newValue
            case "ad_storage": adStorage = newValue
            default: break
            }
        }
    }

    /// The record as a flat string map (the consent stamp on delivered batches).
    public var stamp: [String: String] {
        [
            "subject_to_gdpr": subjectToGDPR.rawValue, "data_usage": dataUsage.rawValue,
            "ads_personalization": adsPersonalization.rawValue, "ad_storage": adStorage.rawValue,
        ]
    }

    private enum CodingKeys: String, CodingKey {
        case subjectToGDPR = "subject_to_gdpr", dataUsage = "data_usage"
        case adsPersonalization = "ads_personalization", adStorage = "ad_storage"
    }
}

/// The built-in consent categories and their wire codes (the event header's category byte).
///
/// Code `0` on the wire means "derive from the event type". Further categories can be declared in
/// the agent's configuration with codes 16–254; code 255 is the agent's own `consent` category,
/// used for `consent_updated` events.
public enum ConsentCategories {
    /// Built-in name → code.
    public static let builtIn: [(name: String, code: UInt8)] = [
        ("analytics", 1), ("advertising", 2), ("personalization", 3), ("diagnostics", 4), ("push", 5),
    ]
    /// The agent's own category for `consent_updated` events.
    public static let consentCode: UInt8 = 255
    /// The name of ``consentCode``.
    public static let consentName = "consent"
    /// The code of a built-in category name.
    public static func code(of name: String) -> UInt8? { builtIn.first { $0.name == name }?.code }
}

/// The whole consent state as reported by the agent (`consent_state` on the control socket).
public struct ConsentSnapshot: Sendable, Hashable, Codable {
    /// The configured kill switch: `false` means nothing is ever delivered (immutable at runtime).
    public var networkTracking: Bool
    /// The runtime tracking toggle (AND-gated with ``networkTracking``).
    public var trackingEnabled: Bool
    /// Every known category.
    public var categories: [String]
    /// Enabled feature categories; empty means no-op mode.
    public var enabledFeatures: [String]
    /// Consent status per category.
    public var consent: [String: ConsentStatus]
    /// Persistence consent: whether the agent may keep a stable anonymous id across restarts.
    public var persistence: ConsentStatus
    /// The GDPR record.
    public var gdpr: GDPRRecord
    /// Whether delivery runs (false until `start` when the agent was configured with `autoStart: false`).
    public var deliveryStarted: Bool
    /// The agent's anonymous id (stable across restarts only with persistence consent granted).
    public var anonymousID: String
    /// Events waiting in the held area (undetermined consent with the `hold` policy).
    public var heldEvents: Int
    /// The audit log's length and head hash.
    public var auditEntries: Int
    /// Hex SHA-256 of the last audit entry (empty when there is none).
    public var auditHead: String

    /// True when no category is enabled: the agent stores and sends nothing.
    public var isNoOp: Bool { enabledFeatures.isEmpty }

    /// Creates a snapshot.
    public init(
        networkTracking: Bool, trackingEnabled: Bool, categories: [String], enabledFeatures: [String],
        consent: [String: ConsentStatus], persistence: ConsentStatus, gdpr: GDPRRecord, deliveryStarted: Bool,
        anonymousID: String, heldEvents: Int, auditEntries: Int, auditHead: String
    ) {
        self.networkTracking = networkTracking
        self.trackingEnabled = trackingEnabled
        self.categories = categories
        self.enabledFeatures = enabledFeatures
        self.consent = consent
        self.persistence = persistence
        self.gdpr = gdpr
        self.deliveryStarted = deliveryStarted
        self.anonymousID = anonymousID
        self.heldEvents = heldEvents
        self.auditEntries = auditEntries
        self.auditHead = auditHead
    }

    private enum CodingKeys: String, CodingKey {
        case networkTracking = "network_tracking", trackingEnabled = "tracking_enabled", categories
        case enabledFeatures = "enabled_features", consent, persistence, gdpr
        case deliveryStarted = "delivery_started", anonymousID = "anonymous_id", heldEvents = "held_events"
        case auditEntries = "audit_entries", auditHead = "audit_head"
    }
}

/// What a purge or erasure removed (`purge`/`forget` on the control socket):
/// `{"queued":7,"held":2}`, with `"quarantined":N` when the change deleted quarantined events
/// (absent means none, as from agents older than the quarantine).
public struct PurgeReport: Sendable, Hashable, Codable {
    /// Pending events erased from the queue.
    public var queued: Int
    /// Events erased from the held area.
    public var held: Int
    /// Events deleted from the quarantine (docs/QUALITY.md, "Quarantine").
    public var quarantined: Int
    /// Total.
    public var total: Int { queued + held + quarantined }

    /// Creates a report.
    public init(queued: Int, held: Int, quarantined: Int = 0) {
        self.queued = queued
        self.held = held
        self.quarantined = quarantined
    }

    private enum CodingKeys: String, CodingKey { case queued, held, quarantined }

    /// Decodes a report; a missing `quarantined` is zero.
    public init(from decoder: any Decoder) throws {
        let object = try decoder.container(keyedBy: CodingKeys.self)
        queued = try object.decode(Int.self, forKey: .queued)
        held = try object.decode(Int.self, forKey: .held)
        quarantined = try object.decodeIfPresent(Int.self, forKey: .quarantined) ?? 0
    }

    /// Encodes `queued` and `held`, and `quarantined` when not zero.
    public func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: CodingKeys.self)
        try object.encode(queued, forKey: .queued)
        try object.encode(held, forKey: .held)
        if quarantined != 0 { try object.encode(quarantined, forKey: .quarantined) }
    }
}
