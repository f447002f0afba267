import FerryProtocol
import FerryStorage
import Synchronization

/// What the agent remembers of the past that ``ErasureTargets`` needs to prove a sink never took
/// an event: since where in the log each sink's route and consent requirement have been the ones
/// in effect, and since where each consent category has not been granted. Kept in memory only:
/// events written before this agent started are judged as if any policy and any consent could
/// have applied to them (the conservative answer).
///
/// Written by the agent at start and on reload (policies) and by the consent worker after every
/// change of state (consent, on the commit thread); read by `forget` and `recipients`.
package final class RecipientHistory: Sendable {
    /// A sink's policy and the log's end when it took effect.
    package struct PolicyEpoch: Sendable, Hashable {
        /// The policy (`nil`: none).
        package var policy: SinkPolicy?
        /// The log's end when it took effect.
        package var from: LogPosition
    }

    private struct State: Sendable {
        var policies: [String: PolicyEpoch] = [:]
        var notGranted: [String: ErasureTargets.NotGranted] = [:]
    }

    private let state = Mutex(State())

    /// An empty history (no policy known: nothing is proven).
    package init() {}

    /// Records that `sink`'s policy is `policy` from `from` on; the same policy as before keeps
    /// its older start.
    package func record(sink: String, policy: SinkPolicy?, from: LogPosition) {
        state.withLock { state in
            if let known = state.policies[sink], known.policy == policy { return }
            state.policies[sink] = PolicyEpoch(policy: policy, from: from)
        }
    }

    /// Records the host's consent as it is from `position` (the log's end) on, at `now`: a
    /// category not granted keeps the mark it had, or gets one here; a granted one loses its mark.
    package func noteConsent(_ consent: SinkPolicyConsent, categories: [String], at position: LogPosition, now: UInt64) {
        state.withLock { state in
            for category in categories {
                let granted = consent.enabledFeatures.contains(category) && (consent.consent[category] ?? consent.defaultStatus) == .granted
                if granted {
                    state.notGranted[category] = nil
                } else if state.notGranted[category] == nil {
                    state.notGranted[category] = ErasureTargets.NotGranted(position: position, at: now)
                }
            }
        }
    }

    /// The policy epoch of `sink`, if recorded.
    package func policy(of sink: String) -> PolicyEpoch? { state.withLock { $0.policies[sink] } }

    /// The not-granted marks.
    package var notGranted: [String: ErasureTargets.NotGranted] { state.withLock { $0.notGranted } }
}

/// The inputs of ``ErasureTargets`` for one user, read from the log (the I/O half of the decision).
package struct RecipientInputs: Sendable {
    /// Each sink as the rule reads it.
    package var sinks: [ErasureTargets.Sink]
    /// The user's events still in the log.
    package var events: [ErasureTargets.UserEvent]
    /// What is known of the log and the consent history.
    package var knowledge: ErasureTargets.Knowledge

    /// Reads the user's events (and the log's first erased record) in `log` and each of `sinks`'
    /// cursor and policy. `category` names an event's consent category.
    package static func gather(userID: String, log: SegmentedLog, sinks: [ErasureOutbox.SinkInfo], history: RecipientHistory,
                               deliveryStarted: Bool, category: (EventHeader) -> String?) throws -> RecipientInputs {
        var events: [ErasureTargets.UserEvent] = []
        // The first record an earlier purge erased: whose it was is no longer known.
        var firstErased: LogPosition?
        try log.forEachRecord { event in
            if event.isErased {
                if firstErased == nil { firstErased = event.position }
                return
            }
            guard let header = try? event.header(), header.userIDLength > 0, header.userID(in: event.frame) == userID else { return }
            let name = category(header)
            let preferences = SinkPolicyEvent.mayHavePreferences(header, frame: event.frame)
                ? SinkPolicy.categoryPreferences(context: SinkPolicyEvent.context(header, frame: event.frame)) : [:]
            events.append(ErasureTargets.UserEvent(position: event.position, acceptedAt: event.acceptedAt,
                                                   facts: SinkPolicyEvent(header, frame: event.frame, category: name), preferences: preferences))
        }
        let views = sinks.map { sink in
            let epoch = history.policy(of: sink.name)
            return ErasureTargets.Sink(name: sink.name, cursor: log.cursor(for: sink.name), batchMaxBytes: sink.batchMaxBytes,
                                       policy: epoch?.policy, policyFrom: epoch?.from)
        }
        return RecipientInputs(sinks: views, events: events,
                               knowledge: ErasureTargets.Knowledge(firstSegment: log.startPosition.segment, deliveryStarted: deliveryStarted,
                                                                   firstErased: firstErased, notGranted: history.notGranted))
    }

    /// The names of the sinks `ferry forget` sends the erasure to.
    package var targets: [String] { ErasureTargets.sinks(sinks, events: events, knowing: knowledge) }

    /// Each sink's verdict.
    package var verdicts: [ErasureTargets.Verdict] { ErasureTargets.verdicts(sinks, events: events, knowing: knowledge) }
}
