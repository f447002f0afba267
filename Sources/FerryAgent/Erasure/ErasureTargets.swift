import FerryProtocol
import FerryStorage

/// Who may have received a user's events, and so which sinks an erasure (`ferry forget --user`)
/// is carried to and what `ferry recipients --user` reports: one decision, from the positions of
/// the user's events still in the log, each sink's cursor, its route and consent requirement and
/// how long they and the host's consent have been as they are (docs/CONSENT.md, "Which sinks").
/// Pure: ``RecipientInputs`` gathers the inputs.
///
/// A sink gets the request when it may have delivered one of the user's events:
///
/// 1. one of them lies before its cursor (delivered);
/// 2. delivery has started, and one lies within the first `batch.maxBytes` after its cursor (it
///    may be in the batch on the wire as the erasure happens: the send-time gate stops batches
///    still in memory, not one already sent; before `ferry start` nothing is ever on the wire);
/// 3. the log no longer tells whose events the sink was sent — segments were deleted (every sink
///    had passed them) or dropped by the retention cap, and the sink has delivered anything at
///    all; or a record before its cursor was erased by an earlier purge (an erased record keeps its
///    id, not its user): whether those records held the user's events is unknowable, so the answer
///    is yes.
///
/// An event counts for none of these when the sink provably never took it (``never(_:at:knowing:)``):
/// it was written after the sink's current policy took effect, and that policy's route excludes it,
/// its own `categoryPreferences` refuse a required category, or a required category has not been
/// granted at any moment since before it was written. A sink that delivered nothing at all never
/// gets one.
package enum ErasureTargets {
    /// What the rule reads of one sink.
    package struct Sink: Sendable, Hashable {
        /// The sink's name.
        package var name: String
        /// Where its delivery resumes (everything before was delivered, skipped or dead-lettered).
        package var cursor: LogPosition
        /// Its `batch.maxBytes`: how far after the cursor a batch on the wire can reach.
        package var batchMaxBytes: Int
        /// Its route and consent requirement (`nil`: none, it takes what the host's consent lets out).
        package var policy: SinkPolicy?
        /// The log's end when ``policy`` took effect (this agent's start, or the reload that
        /// changed it): every event from there on was judged by this policy alone. `nil`: unknown,
        /// the policy proves nothing.
        package var policyFrom: LogPosition?

        /// Creates the view of a sink.
        package init(name: String, cursor: LogPosition, batchMaxBytes: Int, policy: SinkPolicy? = nil, policyFrom: LogPosition? = nil) {
            self.name = name
            self.cursor = cursor
            self.batchMaxBytes = batchMaxBytes
            self.policy = policy
            self.policyFrom = policyFrom
        }
    }

    /// One of the user's events in the log, as the rule reads it.
    package struct UserEvent: Sendable {
        /// Its record's position.
        package var position: LogPosition
        /// When the agent accepted it, Unix ms.
        package var acceptedAt: UInt64
        /// What a route matches (type, name, category, source).
        package var facts: SinkPolicyEvent
        /// Its `context.consent.categoryPreferences`.
        package var preferences: [String: Bool]

        /// An event.
        package init(position: LogPosition, acceptedAt: UInt64, facts: SinkPolicyEvent, preferences: [String: Bool] = [:]) {
            self.position = position
            self.acceptedAt = acceptedAt
            self.facts = facts
            self.preferences = preferences
        }
    }

    /// Since when a consent category has not been granted (denied, undetermined or its feature
    /// disabled) without a break.
    package struct NotGranted: Sendable, Hashable {
        /// The log's end at that moment: events from there on were never sent while it was granted.
        package var position: LogPosition
        /// The moment, Unix ms.
        package var at: UInt64
        /// A mark.
        package init(position: LogPosition, at: UInt64) {
            self.position = position
            self.at = at
        }
    }

    /// What the agent knows of the log and the host's consent.
    package struct Knowledge: Sendable {
        /// The index of the log's oldest segment (segments start at 1: a larger index means older
        /// ones are gone).
        package var firstSegment: UInt64
        /// Whether any batch can have been sent (false before `ferry start` with `autoStart: false`).
        package var deliveryStarted: Bool
        /// The position of the log's first erased record, if any.
        package var firstErased: LogPosition?
        /// The categories not granted, each since when (``NotGranted``); a category missing may
        /// have been granted at any time.
        package var notGranted: [String: NotGranted]

        /// The knowledge.
        package init(firstSegment: UInt64, deliveryStarted: Bool = true, firstErased: LogPosition? = nil,
                     notGranted: [String: NotGranted] = [:]) {
            self.firstSegment = firstSegment
            self.deliveryStarted = deliveryStarted
            self.firstErased = firstErased
            self.notGranted = notGranted
        }
    }

    /// Why a sink provably never took an event.
    package enum Never: Sendable, Hashable {
        /// No event of the user is in the log, and none was lost.
        case noEvents
        /// The sink's route excludes it.
        case route
        /// Its own `categoryPreferences` says `false` for this required category.
        case categoryPreferences(String)
        /// This required category has not been granted since `since` (Unix ms), before it was written.
        case consent(String, since: UInt64)
    }

    /// Whether a sink received the user's events.
    package enum Verdict: Sendable, Hashable {
        /// Some lie before its cursor; `first` and `last`: when the agent accepted the first and
        /// the last of them, Unix ms.
        case delivered(first: UInt64, last: UInt64, events: Int)
        /// One may be in the batch on the wire.
        case onTheWire
        /// The log no longer tells (segments gone, or records erased before its cursor).
        case historyUnknown
        /// Some wait after its cursor (refused so far or not), none sent yet (`ferry forget`
        /// erases them here).
        case notYet(events: Int)
        /// It never took any, and none waits: why, per reason found (each of the user's events
        /// it passed by was refused by its policy).
        case never([Never])

        /// Whether `ferry forget` sends the sink an erasure.
        package var receivesErasure: Bool {
            switch self {
            case .delivered, .onTheWire, .historyUnknown: true
            case .notYet, .never: false
            }
        }
    }

    /// The names of the sinks of `sinks` to send the erasure to, in their order: those whose
    /// ``verdicts(_:events:knowing:)`` say they may have received the user's events.
    package static func sinks(_ sinks: [Sink], events: [UserEvent], knowing knowledge: Knowledge) -> [String] {
        zip(sinks, verdicts(sinks, events: events, knowing: knowledge)).filter { $0.1.receivesErasure }.map(\.0.name)
    }

    /// Each sink's verdict on the user's `events` (those still in the log, not erased), in order.
    package static func verdicts(_ sinks: [Sink], events: [UserEvent], knowing knowledge: Knowledge) -> [Verdict] {
        sinks.map { verdict($0, events: events, knowing: knowledge) }
    }

    /// One sink's verdict.
    package static func verdict(_ sink: Sink, events: [UserEvent], knowing knowledge: Knowledge) -> Verdict {
        let start = LogPosition(segment: max(1, knowledge.firstSegment), offset: SegmentedLog.segmentHeaderSize)
        if knowledge.firstSegment > 1 && sink.cursor > start { return .historyUnknown }
        if let firstErased = knowledge.firstErased, firstErased < sink.cursor { return .historyUnknown }
        var delivered: (first: UInt64, last: UInt64, events: Int)?
        var wire = false, pending = 0
        var reasons: [Never] = []
        for event in events {
            let refused = never(sink, at: event, knowing: knowledge)
            if event.position < sink.cursor {
                // Passed by: settled, delivered unless the policy provably skipped it.
                if let refused {
                    if !reasons.contains(refused) { reasons.append(refused) }
                } else {
                    let first = min(delivered?.first ?? .max, event.acceptedAt), last = max(delivered?.last ?? 0, event.acceptedAt)
                    delivered = (first, last, (delivered?.events ?? 0) + 1)
                }
            } else if refused == nil && knowledge.deliveryStarted && onTheWire(event.position, after: sink.cursor, bytes: sink.batchMaxBytes) {
                wire = true
            } else {
                // Not reached yet (a refused one cannot be on the wire, but a grant or a reload
                // before the sink reaches it may still let it go).
                pending += 1
            }
        }
        if let delivered { return .delivered(first: delivered.first, last: delivered.last, events: delivered.events) }
        if wire { return .onTheWire }
        if pending > 0 { return .notYet(events: pending) }
        return .never(events.isEmpty ? [.noEvents] : reasons)
    }

    /// Why `sink` provably never took `event`, or `nil` when it may have (or will). Only an event
    /// written after the sink's policy took effect is judged by it; an earlier one may have met
    /// another policy (an earlier run, a reload).
    package static func never(_ sink: Sink, at event: UserEvent, knowing knowledge: Knowledge) -> Never? {
        guard let policy = sink.policy, let from = sink.policyFrom, event.position >= from else { return nil }
        if !policy.routes(event.facts) { return .route }
        guard event.facts.category != ConsentCategories.consentName else { return nil }
        for category in policy.requiresConsent {
            if event.preferences[category] == false { return .categoryPreferences(category) }
            if let mark = knowledge.notGranted[category], mark.position <= event.position { return .consent(category, since: mark.at) }
        }
        return nil
    }

    /// Whether `position` (at or after `cursor`) lies within `bytes` of it: in the batch a sink
    /// may have on the wire (a batch reads at most `bytes`, possibly across one segment boundary).
    static func onTheWire(_ position: LogPosition, after cursor: LogPosition, bytes: Int) -> Bool {
        guard position >= cursor else { return false }
        if position.segment == cursor.segment { return position.offset - cursor.offset < Int64(bytes) }
        return position.segment == cursor.segment + 1 && position.offset < Int64(bytes)
    }
}

extension ErasureTargets.Verdict {
    /// The verdict as the `recipients` reply gives it for sink `name`.
    package func status(sink name: String) -> RecipientStatus {
        switch self {
        case .delivered(let first, let last, let events):
            return RecipientStatus(sink: name, verdict: .delivered, events: events, firstAt: first, lastAt: last)
        case .onTheWire: return RecipientStatus(sink: name, verdict: .mayHaveDelivered, reason: "on_the_wire")
        case .historyUnknown: return RecipientStatus(sink: name, verdict: .mayHaveDelivered, reason: "history_unknown")
        case .notYet(let events): return RecipientStatus(sink: name, verdict: .notYet, events: events)
        case .never(let reasons):
            var since: UInt64?
            let words = reasons.map { reason -> String in
                switch reason {
                case .noEvents: return "no_events"
                case .route: return "route"
                case .categoryPreferences(let category): return "category_preferences " + category
                case .consent(let category, let at):
                    since = min(since ?? .max, at)
                    return "consent " + category
                }
            }
            return RecipientStatus(sink: name, verdict: .never, reason: words.joined(separator: "; "), since: since)
        }
    }
}
