/// Control-socket replies written exactly as `docs/PROTOCOL.md` ("Control", the consent ops
/// table) documents them, for decoding and rendering tests.
public enum ControlSamples {
    /// A 64-hex-digit SHA-256 head.
    public static let head = "9f2c4e6a8b0d1f3e5c7a9b1d3f5e7c9a0b2d4f6e8c0a2b4d6f8e0c2a4b6d8f0e"

    /// The `consent` object of a `consent_state` reply.
    public static let consentObject = """
        {"network_tracking":true,"tracking_enabled":true,\
        "categories":["advertising","analytics","diagnostics","personalization","push"],\
        "enabled_features":["analytics","push"],\
        "consent":{"analytics":"granted","advertising":"denied","personalization":"undetermined","diagnostics":"undetermined","push":"granted"},\
        "persistence":"undetermined",\
        "gdpr":{"subject_to_gdpr":"granted","data_usage":"granted","ads_personalization":"denied","ad_storage":"unset"},\
        "delivery_started":false,"anonymous_id":"0190f5c2-7a3b-7c4d-8e5f-0123456789ab",\
        "held_events":3,"audit_entries":2,"audit_head":"\(head)"}
        """

    /// A `consent_state` reply.
    public static let consentState = #"{"ok":true,"consent":"# + consentObject + "}"

    /// A `set_consent` reply that erased events (deny).
    public static let setConsentDenied = #"{"ok":true,"consent":"# + consentObject + #","purged":{"queued":7,"held":2}}"#

    /// A `purge` reply.
    public static let purge = #"{"ok":true,"purged":{"queued":12,"held":1}}"#

    /// A `start` reply.
    public static let start = #"{"ok":true,"delivery_started":true}"#

    /// A refusal naming the valid categories.
    public static let unknownCategory = #"""
        {"ok":false,"error":"unknown category \"analytcs\"","valid":["advertising","analytics","diagnostics","personalization","push","all"]}
        """#

    /// Two audit entries (the second without an actor); `old` and `new` are JSON text.
    public static let auditEntries = """
        [{"seq":1,"at":1700000000000,"uid":1000,"pid":4242,"process":"ferry","actor":"settings-ui",\
        "change":"consent.analytics","old":"\\"undetermined\\"","new":"\\"granted\\"",\
        "prev":"0000000000000000000000000000000000000000000000000000000000000000",\
        "hash":"1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90a"},\
        {"seq":2,"at":1700000001500,"uid":1000,"pid":4243,"process":"settings",\
        "change":"tracking","old":"true","new":"false",\
        "prev":"1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90a",\
        "hash":"\(head)"}]
        """

    /// A verified `consent_log` reply.
    public static let consentLog = #"{"ok":true,"entries":"# + auditEntries + #","verified":true}"#

    /// A `consent_log` reply whose chain does not verify.
    public static let brokenConsentLog = #"{"ok":true,"entries":"# + auditEntries
        + #","verified":false,"problem":"entry 2: prev does not match the hash of entry 1"}"#

    /// The reply a fake agent gives to `op` (consent_state for the state-changing consent ops).
    public static func reply(to op: String) -> String {
        switch op {
        case "consent_state", "set_tracking", "set_persistence", "enable_features": consentState
        case "set_consent", "set_gdpr", "disable_features": setConsentDenied
        case "purge", "forget": purge
        case "start": start
        case "consent_log": consentLog
        case "status": #"{"ok":true,"pid":4242,"protocol_version":1,"queue":{"events":0,"oldest_undelivered_age_ms":null},"counters":{"accepted":5}}"#
        default: #"{"ok":false,"error":"unknown op \"\#(op)\""}"#
        }
    }
}
