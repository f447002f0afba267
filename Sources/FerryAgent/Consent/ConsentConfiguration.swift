import FerryProtocol

/// How the agent starts its consent state. See `docs/CONSENT.md`.
///
/// Every field has a default that makes a working agent which delivers everything (the quick
/// start); `daemon/ferryd.consent-optin.example.json` shows a privacy-first configuration.
public struct ConsentConfiguration: Sendable, Hashable {
    /// The kill switch (Convert's `networkTracking`): `false` means nothing is ever queued for
    /// delivery, for the agent's whole life. Immutable at runtime.
    public var networkTracking: Bool
    /// The runtime tracking toggle's value when no state has been persisted yet.
    public var trackingInitial: Bool
    /// Known categories, name → wire code. Defaults to the built-in ones
    /// (``ConsentCategories/builtIn``); extra ones use codes 16–254.
    public var categories: [String: UInt8]
    /// The category of an event whose category byte is 0, by event type name.
    public var typeCategories: [String: String]
    /// Enabled feature categories at first start (and at every start with
    /// ``resetEnabledFeatures``). Empty = no-op mode.
    public var enabledFeatures: Set<String>
    /// Re-apply ``enabledFeatures`` at every start instead of keeping runtime changes.
    public var resetEnabledFeatures: Bool
    /// Consent status of every category when no state has been persisted yet.
    public var defaultConsent: ConsentStatus
    /// Per-category overrides of ``defaultConsent``.
    public var initialConsent: [String: ConsentStatus]
    /// Persistence consent when no state has been persisted yet.
    public var initialPersistence: ConsentStatus
    /// What happens to events of a category whose consent is undetermined.
    public var undetermined: Undetermined
    /// Whether delivery starts with the agent (`false`: events are accepted and queued, no
    /// network until `ferry start`).
    public var autoStart: Bool

    /// The pre-consent policy.
    public struct Undetermined: Sendable, Hashable {
        /// `hold` keeps events durably in the held area; `drop` answers `blocked`.
        public var policy: Policy
        /// Event types that pass (are queued for delivery) before consent is determined
        /// (Contentful's allow-list). `[]` is strict.
        public var allowTypes: Set<EventType>
        /// Held events older than this are purged; `nil` keeps them until consent is decided.
        public var maxHoldAgeSeconds: Int?

        /// What to do with events that are not allow-listed.
        public enum Policy: String, Sendable, Hashable, CaseIterable {
            /// Keep them on disk in the held area; deliver on grant, purge on deny.
            case hold
            /// Refuse them (`blocked`, reason `consent_undetermined`).
            case drop
        }

        /// Creates a policy; defaults: hold, allow `identify` and `screen`, no age limit.
        public init(policy: Policy = .hold, allowTypes: Set<EventType> = [.identify, .screen], maxHoldAgeSeconds: Int? = nil) {
            self.policy = policy
            self.allowTypes = allowTypes
            self.maxHoldAgeSeconds = maxHoldAgeSeconds
        }
    }

    /// The default category per event type: everything is `analytics`.
    public static let defaultTypeCategories: [String: String] = Dictionary(
        uniqueKeysWithValues: EventType.allCases.map { ($0.description, "analytics") })

    /// Creates a configuration; every argument has a default.
    public init(
        networkTracking: Bool = true, trackingInitial: Bool = true,
        categories: [String: UInt8] = Dictionary(uniqueKeysWithValues: ConsentCategories.builtIn.map { ($0.name, $0.code) }),
        typeCategories: [String: String] = ConsentConfiguration.defaultTypeCategories,
        enabledFeatures: Set<String>? = nil, resetEnabledFeatures: Bool = false,
        defaultConsent: ConsentStatus = .granted, initialConsent: [String: ConsentStatus] = [:],
        initialPersistence: ConsentStatus = .granted, undetermined: Undetermined = Undetermined(),
        autoStart: Bool = true
    ) {
        self.networkTracking = networkTracking
        self.trackingInitial = trackingInitial
        self.categories = categories
        self.typeCategories = typeCategories
        self.enabledFeatures = enabledFeatures ?? Set(categories.keys)
        self.resetEnabledFeatures = resetEnabledFeatures
        self.defaultConsent = defaultConsent
        self.initialConsent = initialConsent
        self.initialPersistence = initialPersistence
        self.undetermined = undetermined
        self.autoStart = autoStart
    }

    /// Category names, sorted.
    public var categoryNames: [String] { categories.keys.sorted() }

    /// Expands `all`/`none` and checks names; throws a message listing the valid ones.
    func features(_ names: [String]) throws(AgentError) -> Set<String> {
        var result = Set<String>()
        for name in names {
            switch name {
            case "all": result.formUnion(categories.keys)
            case "none": continue
            default:
                guard categories[name] != nil else {
                    throw AgentError(code: .configuration,
                                     message: "unknown feature \"\(name)\"; valid: \((categoryNames + ["all", "none"]).joined(separator: ", "))")
                }
                result.insert(name)
            }
        }
        return result
    }

    /// Checks the values; throws ``AgentError`` with code `configuration`.
    func validate() throws(AgentError) {
        func fail(_ message: String) -> AgentError { AgentError(code: .configuration, message: "consent: " + message) }
        var seen: [UInt8: String] = [:]
        for (name, code) in categories.sorted(by: { $0.key < $1.key }) {
            guard !name.isEmpty, name != "all", name != "none", name != ConsentCategories.consentName,
                  name.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F || $0 == 0x2D }) else {
                throw fail("category name \"\(name)\" must be lower-case letters, digits, - or _, and not all/none/consent")
            }
            let builtIn = ConsentCategories.code(of: name)
            guard builtIn == code || (builtIn == nil && (16...254).contains(code)) else {
                throw fail("category \"\(name)\" has code \(code); built-in categories keep their codes, others use 16-254")
            }
            if let other = seen[code] { throw fail("categories \"\(other)\" and \"\(name)\" share code \(code)") }
            seen[code] = name
        }
        for (type, category) in typeCategories {
            guard EventType(name: type) != nil else {
                throw fail("typeCategories: unknown event type \"\(type)\"; valid: \(EventType.allCases.map(\.description).joined(separator: ", "))")
            }
            guard categories[category] != nil else {
                throw fail("typeCategories: \(type) maps to unknown category \"\(category)\"; valid: \(categoryNames.joined(separator: ", "))")
            }
        }
        for name in enabledFeatures where categories[name] == nil {
            throw fail("enabledFeatures: unknown category \"\(name)\"; valid: \(categoryNames.joined(separator: ", "))")
        }
        for name in initialConsent.keys where categories[name] == nil {
            throw fail("initialConsent: unknown category \"\(name)\"; valid: \(categoryNames.joined(separator: ", "))")
        }
        if let age = undetermined.maxHoldAgeSeconds, age <= 0 { throw fail("undetermined.maxHoldAgeSeconds must be positive") }
    }
}
