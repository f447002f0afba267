import FerryProtocol
import FerryStorage
import Foundation
import Synchronization

/// What the ingest gate decided for one event.
enum IngestDecision: Equatable, Sendable {
    /// Queue it for delivery (append to the log).
    case store
    /// Keep it durably in the held area until its category's consent is decided.
    case hold
    /// Ack it as `suppressed` (local-only): never queued, published on the `suppressed` topic.
    case suppressed
    /// Ack it as `blocked` with a reason (one of `RejectReason.consentBlocks`; its name is the
    /// bus's `reason`); nothing stored.
    case blocked(RejectReason)
}

/// What the ingest gate (``ConsentEngine/decide(_:)``) reads of an event: its type, its
/// category byte and its local-only flag. Events alike in these are judged alike under one state,
/// which lets the commit stage judge each such key once a group.
struct ConsentKey: Equatable, Sendable {
    var type: EventType
    /// The event's category byte (0: its type's default category).
    var category: UInt8
    var localOnly: Bool

    init(type: EventType, category: UInt8, localOnly: Bool) {
        self.type = type
        self.category = category
        self.localOnly = localOnly
    }

    init(_ header: EventHeader) {
        self.init(type: header.type, category: header.category, localOnly: header.flags.contains(.localOnly))
    }
}

/// The host's consent state and the two checks made against it: at ingest (``decide(_:)``) and
/// at send time (``admit(_:sink:)``, the delivery loop's ``DeliveryGate``).
///
/// Reads happen on any thread; every change is made by the commit thread (``CommitPipeline``)
/// between two group commits, so each event is judged under exactly one state.
final class ConsentEngine: DeliveryGate, Sendable {
    let configuration: ConsentConfiguration
    private let state: Mutex<State>
    /// Category name by wire code.
    private let names: [UInt8: String]

    struct State: Sendable {
        var persisted: PersistedConsent
        var anonymousID: String
        var deliveryStarted: Bool
        var heldEvents = 0
        var erasures: [Erasure] = []
    }

    /// A purge or erasure already applied to the log; the send-time gate also refuses matching
    /// events read before it (a batch in memory that is not yet on the wire).
    struct Erasure: Sendable {
        enum Scope: Sendable, Equatable {
            case everything
            case category(String)
            case user(String)
        }
        var scope: Scope
        /// Events at positions before this were erased (later ones were accepted after it).
        var upTo: LogPosition
    }

    init(configuration: ConsentConfiguration, persisted: PersistedConsent, anonymousID: String) {
        self.configuration = configuration
        names = Dictionary(uniqueKeysWithValues: configuration.categories.map { ($0.value, $0.key) })
        state = Mutex(State(persisted: persisted, anonymousID: anonymousID, deliveryStarted: configuration.autoStart))
    }

    /// The starting state when nothing was persisted.
    static func initialState(_ configuration: ConsentConfiguration) -> PersistedConsent {
        var consent: [String: ConsentStatus] = [:]
        for name in configuration.categories.keys {
            consent[name] = configuration.initialConsent[name] ?? configuration.defaultConsent
        }
        return PersistedConsent(
            trackingEnabled: configuration.trackingInitial, enabledFeatures: configuration.enabledFeatures.sorted(),
            consent: consent, persistence: configuration.initialPersistence, gdpr: GDPRRecord(),
            anonymousID: nil, auditSeq: 0, auditHead: AuditEntry.genesis)
    }

    // MARK: Reading

    var persisted: PersistedConsent { state.withLock { $0.persisted } }

    /// The snapshot served on the control socket.
    func snapshot(auditEntries: Int? = nil) -> ConsentSnapshot {
        state.withLock { state in
            ConsentSnapshot(
                networkTracking: configuration.networkTracking, trackingEnabled: state.persisted.trackingEnabled,
                categories: configuration.categoryNames, enabledFeatures: state.persisted.enabledFeatures.sorted(),
                consent: state.persisted.consent, persistence: state.persisted.persistence, gdpr: state.persisted.gdpr,
                deliveryStarted: state.deliveryStarted, anonymousID: state.anonymousID, heldEvents: state.heldEvents,
                auditEntries: state.persisted.auditSeq, auditHead: state.persisted.auditHead)
        }
    }

    /// The category name of an event (its own byte, or its type's default), or `nil` if unknown.
    func category(of header: EventHeader) -> String? {
        category(type: header.type, code: header.category)
    }

    /// The category name of an event of `type` whose category byte is `code`.
    private func category(type: EventType, code: UInt8) -> String? {
        if code == 0 { return configuration.typeCategories[type.description] }
        if code == ConsentCategories.consentCode { return ConsentCategories.consentName }
        return names[code]
    }

    /// True while events can reach the upstream at all (used to decide whether a consent change
    /// enqueues a `consent_updated` event).
    var upstreamAllowed: Bool { upstreamAllowed(persisted) }

    /// Whether events could reach the upstream under `persisted`.
    func upstreamAllowed(_ persisted: PersistedConsent) -> Bool {
        configuration.networkTracking && persisted.trackingEnabled && !persisted.enabledFeatures.isEmpty
            && !persisted.gdpr.forbidsDataUsage
    }

    /// True with no feature enabled: the agent stores and sends nothing.
    var isNoOp: Bool { state.withLock { $0.persisted.enabledFeatures.isEmpty } }

    // MARK: The ingest gate

    /// Judges one arriving event. Once-key marks and dedup happen before this (so a suppressed or
    /// blocked conversion still counts); the agent's own `consent` events never come through here.
    func decide(_ header: EventHeader) -> IngestDecision {
        decide(ConsentKey(header))
    }

    /// Judges an event by the only fields the ingest gate reads (see ``ConsentKey``).
    func decide(_ key: ConsentKey) -> IngestDecision {
        let category = category(type: key.type, code: key.category)
        return state.withLock { state in
            let persisted = state.persisted
            if persisted.enabledFeatures.isEmpty { return .blocked(.noOp) }
            if key.localOnly { return .suppressed }
            if !configuration.networkTracking { return .blocked(.killSwitch) }
            if !persisted.trackingEnabled { return .blocked(.trackingDisabled) }
            if persisted.gdpr.forbidsDataUsage { return .blocked(.gdprDataUsageDenied) }
            guard let category, category != ConsentCategories.consentName else { return .blocked(.unknownCategory) }
            if !persisted.enabledFeatures.contains(category) { return .blocked(.featureDisabled) }
            switch persisted.consent[category] ?? configuration.defaultConsent {
            case .granted:
                return .store
            case .denied:
                return .blocked(.consentDenied)
            case .undetermined:
                if configuration.undetermined.allowTypes.contains(key.type) { return .store }
                return configuration.undetermined.policy == .hold ? .hold : .blocked(.consentUndetermined)
            }
        }
    }

    // MARK: The send-time gate

    func isPaused(sink: String, policy: SinkPolicy?) -> Bool {
        state.withLock { state in
            if !state.deliveryStarted || state.persisted.enabledFeatures.isEmpty { return true }
            // A required category undetermined under `hold`: the sink waits for the decision.
            guard let policy else { return false }
            return policy.waits(sinkConsent(state.persisted))
        }
    }

    /// The host's state as a sink's policy reads it.
    var sinkConsent: SinkPolicyConsent { sinkConsent(persisted) }

    /// `persisted` as a sink's policy reads it.
    private func sinkConsent(_ persisted: PersistedConsent) -> SinkPolicyConsent {
        SinkPolicyConsent(consent: persisted.consent, defaultStatus: configuration.defaultConsent,
                          enabledFeatures: Set(persisted.enabledFeatures), undetermined: configuration.undetermined.policy)
    }

    func admit(_ batch: DeliveryBatch, sink: String, policy: SinkPolicy?) -> GateDecision {
        state.withLock { state in
            let persisted = state.persisted
            guard state.deliveryStarted, !persisted.enabledFeatures.isEmpty else { return .paused }
            var stamp = persisted.gdpr.stamp
            stamp["anonymous_id"] = state.anonymousID
            // The audit entry the state was last changed by: which state admitted this batch.
            stamp["consent_seq"] = String(persisted.auditSeq)
            if !configuration.networkTracking {
                return .deliver(DeliveryBatch(events: [], consent: stamp), blocked: batch.events, reason: "kill_switch")
            }
            if persisted.gdpr.forbidsDataUsage {
                return .deliver(DeliveryBatch(events: [], consent: stamp), blocked: batch.events, reason: "gdpr_data_usage_denied")
            }
            var admitted: [StoredEvent] = []
            var refused: [StoredEvent] = []
            var skipped: [SinkSkip] = []
            var reasons = Set<String>()
            admitted.reserveCapacity(batch.events.count)
            // The no-policy path is the one every sink without a requirement or route takes.
            // The host's part of the sink's requirement is the same for every event: once a batch.
            let host = policy.map { $0.requirement(sinkConsent(persisted)) }
            for event in batch.events {
                if event.isErased {
                    refused.append(event)  // purged: nothing left to send or to report
                    continue
                }
                guard let header = try? event.header() else {
                    refused.append(event)
                    reasons.insert("unreadable")
                    continue
                }
                let category = category(of: header)
                if let reason = refusal(event, header: header, category: category, state: state) {
                    refused.append(event)
                    reasons.insert(reason)
                } else if let policy, let host {
                    var preferences: [String: Bool]?
                    let decision = policy.admit(SinkPolicyEvent(header, frame: event.frame, category: category), host: host) { name in
                        if preferences == nil {
                            preferences = SinkPolicyEvent.mayHavePreferences(header, frame: event.frame)
                                ? SinkPolicy.categoryPreferences(context: SinkPolicyEvent.context(header, frame: event.frame)) : [:]
                        }
                        return preferences?[name]
                    }
                    switch decision {
                    case .deliver: admitted.append(event)
                    case .skip(let reason): skipped.append(SinkSkip(event: event, reason: reason))
                    case .wait: return .paused
                    }
                } else {
                    admitted.append(event)
                }
            }
            return .deliver(DeliveryBatch(events: admitted, consent: stamp), blocked: refused,
                            reason: reasons.sorted().joined(separator: ","), skipped: skipped)
        }
    }

    /// Why `event` (its `header`, of category `category`) may not be sent under `state`, or
    /// `nil` if it may. (Tracking off does not stop events queued before: they keep draining.)
    private func refusal(_ event: StoredEvent, header: EventHeader, category: String?, state: State) -> String? {
        for erasure in state.erasures where event.position < erasure.upTo {
            switch erasure.scope {
            case .everything: return "purged"
            case .category(let name) where name == category: return "purged"
            case .user(let id) where header.userIDLength > 0 && header.userID(in: event.frame) == id: return "forgotten"
            default: continue
            }
        }
        guard let category else { return "unknown_category" }
        if category == ConsentCategories.consentName { return nil }
        if !state.persisted.enabledFeatures.contains(category) { return "feature_disabled" }
        switch state.persisted.consent[category] ?? configuration.defaultConsent {
        case .granted: return nil
        case .denied: return "consent_denied"
        case .undetermined:
            // Only allow-listed types reach the log while undetermined (the rest are held).
            return configuration.undetermined.allowTypes.contains(header.type) ? nil : "consent_undetermined"
        }
    }

    // MARK: Changes (commit thread only)

    /// Replaces the persisted state (after it was written to disk).
    func apply(_ persisted: PersistedConsent) {
        state.withLock { $0.persisted = persisted }
    }

    /// Sets the anonymous id (a new one when persistence consent is withdrawn).
    func setAnonymousID(_ id: String) { state.withLock { $0.anonymousID = id } }

    /// Starts delivery.
    func startDelivery() { state.withLock { $0.deliveryStarted = true } }

    /// Records an erasure for the send-time gate.
    func recordErasure(_ erasure: Erasure) {
        state.withLock { state in
            state.erasures.append(erasure)
            // Human-triggered and rare; bound it anyway.
            if state.erasures.count > 1024 { state.erasures.removeFirst(state.erasures.count - 1024) }
        }
    }

    /// Sets the held-area count.
    func setHeldEvents(_ count: Int) { state.withLock { $0.heldEvents = count } }

    /// Adds to the held-area count.
    func addHeldEvents(_ count: Int) { state.withLock { $0.heldEvents += count } }
}
