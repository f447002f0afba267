/// What a configuration reload does, decided from the configuration in effect and the new one
/// alone (no I/O): ``FerryAgent/reload(_:)`` refuses it when ``restartOnly`` is not empty, and
/// otherwise applies it.
struct ReloadPlan: Sendable, Hashable {
    /// The keys a reload applies without a restart (``FerryAgent/reloadableKeys``).
    static let reloadableKeys = [
        "logLevel", "delivery", "sinks[].batch", "sinks[].retry", "sinks[].circuit", "sinks[].disclose", "sinks[].requiresConsent", "sinks[].route", "access.ingest", "access.control",
        "quality.plan", "quality.onViolation", "quality.allowUnplanned", "redact",
    ]

    /// One sink's settings after the reload (every sink gets one: its credentials are read
    /// again on every reload, changed or not).
    struct SinkUpdate: Sendable, Hashable {
        /// The sink's name.
        var name: String
        /// Its batch settings.
        var batch: AgentConfiguration.SinkConfiguration.Batch
        /// Its retry settings.
        var retry: AgentConfiguration.SinkConfiguration.Retry
        /// Its circuit breaker settings.
        var circuit: AgentConfiguration.SinkConfiguration.Circuit
        /// What its bodies say about the host and the process (from its next attempt on).
        var disclose: AgentConfiguration.SinkConfiguration.Disclose
        /// The consent categories it requires (from its next attempt on).
        var requiresConsent: [String] = []
        /// Its route (from its next attempt on).
        var route: AgentConfiguration.SinkConfiguration.Route?
    }

    /// The changed keys that need a restart; when there is one the reload is refused whole.
    var restartOnly: [String]
    /// The reloadable key paths that changed, as the reload reports and logs them.
    var changed: [String]
    /// The new access policy, when the ingest or control rules changed.
    var access: AccessPolicy?
    /// The sinks' settings to apply, in configuration order.
    var sinks: [SinkUpdate]

    /// The plan for going from `old` to `new`.
    init(from old: AgentConfiguration, to new: AgentConfiguration) {
        restartOnly = Self.restartOnlyChanges(from: old, to: new)
        changed = []
        access = nil
        if new.access != old.access {
            access = new.access
            changed.append("access")
        }
        if new.logLevel != old.logLevel { changed.append("logLevel") }
        if new.delivery != old.delivery { changed.append("delivery") }
        if new.quality.configuration != old.quality.configuration { changed.append("quality") }
        if new.redact != old.redact { changed.append("redact") }
        sinks = []
        for (index, (before, after)) in zip(old.sinks, new.sinks).enumerated() {
            if before.batch != after.batch { changed.append("sinks[\(index)].batch") }
            if before.retry != after.retry { changed.append("sinks[\(index)].retry") }
            if before.circuit != after.circuit { changed.append("sinks[\(index)].circuit") }
            if before.disclose != after.disclose { changed.append("sinks[\(index)].disclose") }
            if before.requiresConsent != after.requiresConsent { changed.append("sinks[\(index)].requiresConsent") }
            if before.route != after.route { changed.append("sinks[\(index)].route") }
            sinks.append(SinkUpdate(name: after.name, batch: after.batch, retry: after.retry, circuit: after.circuit,
                                    disclose: after.disclose, requiresConsent: after.requiresConsent, route: after.route))
        }
    }

    /// The key paths that differ between `old` and `new` and need a restart.
    static func restartOnlyChanges(from old: AgentConfiguration, to new: AgentConfiguration) -> [String] {
        var keys: [String] = []
        if old.runtimeDirectory != new.runtimeDirectory { keys.append("runtimeDirectory") }
        if old.dataDirectory != new.dataDirectory { keys.append("dataDirectory") }
        if old.maxEventBytes != new.maxEventBytes { keys.append("maxEventBytes") }
        if old.log != new.log { keys.append("log") }
        if old.dedup != new.dedup { keys.append("dedup") }
        if old.consent != new.consent { keys.append("consent") }
        if old.mode != new.mode { keys.append("mode") }
        for key in Set(old.ingestPaths.keys + new.ingestPaths.keys).sorted()
        where old.ingestPaths[key]?.anyHashable != new.ingestPaths[key]?.anyHashable {
            keys.append(key)
        }
        if old.quality.quarantineMaxBytes != new.quality.quarantineMaxBytes { keys.append("quality.quarantineMaxBytes") }
        // The ingest and control rules reload; the bus is guarded by its socket file's group and
        // mode, set when it is bound.
        if old.access.events != new.access.events { keys.append("access.events") }
        if old.sinks.map(\.name) != new.sinks.map(\.name) {
            keys.append("sinks (names or order)")
        } else {
            for (index, (a, b)) in zip(old.sinks, new.sinks).enumerated() where a.settings.anyHashable != b.settings.anyHashable {
                keys.append("sinks[\(index)] (\(a.name)): settings of type \(a.type)")
            }
        }
        return keys
    }
}
