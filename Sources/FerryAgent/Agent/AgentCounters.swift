import Synchronization

/// Counters shared by the agent's threads and reported by `ferry status`.
public final class AgentCounters: Sendable {
    /// Events stored and acked.
    public let accepted = Atomic<Int>(0)
    /// Events answered `duplicate`.
    public let duplicate = Atomic<Int>(0)
    /// Events rejected (any reason).
    public let rejected = Atomic<Int>(0)
    /// Of those, events rejected because the queue was full (`full` policy or no disk space).
    public let rejectedFull = Atomic<Int>(0)
    /// Undelivered events deleted by the drop-oldest policy.
    public let dropped = Atomic<Int>(0)
    /// Events delivered, summed over the sinks (an event delivered to two sinks counts twice).
    public let delivered = Atomic<Int>(0)
    /// Failed delivery attempts (all sinks).
    public let deliveryFailures = Atomic<Int>(0)
    /// Failed attempts that were retried (all sinks).
    public let retried = Atomic<Int>(0)
    /// Events written to a dead-letter directory (all sinks).
    public let deadLettered = Atomic<Int>(0)
    /// Whole messages refused with an error reply.
    public let malformedMessages = Atomic<Int>(0)
    /// Group commits (fsyncs) performed.
    public let commits = Atomic<Int>(0)
    /// Events answered `blocked` by the consent state at ingest.
    public let blocked = Atomic<Int>(0)
    /// Local-only events answered `suppressed`.
    public let suppressed = Atomic<Int>(0)
    /// Events put in the held area.
    public let held = Atomic<Int>(0)
    /// Queued events refused by the consent state at send time.
    public let blockedAtSend = Atomic<Int>(0)

    /// Messages refused because the sender may not send events (access policy).
    public let accessDenied = Atomic<Int>(0)
    /// Client events known lost: gaps in a session's sequence numbers (protocol 2 clients).
    public let clientEventsLost = Atomic<Int>(0)
    /// ``clientEventsLost`` by the client's source name (at most ``maxLossSources`` names; the
    /// rest are counted under `""`).
    private let lostBySource = Mutex<[String: Int]>([:])
    /// Most source names ``lostBySource`` tracks.
    static let maxLossSources = 1024

    /// Creates zeroed counters.
    public init() {}

    /// Counts `events` lost by the client `source`.
    func recordLost(_ events: Int, source: String) {
        clientEventsLost.add(events, ordering: .relaxed)
        lostBySource.withLock { counts in
            let key = counts[source] != nil || counts.count < Self.maxLossSources ? source : ""
            counts[key, default: 0] += events
        }
    }

    /// Client events lost, by source name.
    public var clientEventsLostBySource: [String: Int] { lostBySource.withLock { $0 } }

    /// A plain snapshot, for status output.
    public var snapshot: [String: Int] {
        [
            "accepted": accepted.load(ordering: .relaxed),
            "duplicate": duplicate.load(ordering: .relaxed),
            "rejected": rejected.load(ordering: .relaxed),
            "rejected_full": rejectedFull.load(ordering: .relaxed),
            "dropped": dropped.load(ordering: .relaxed),
            "delivered": delivered.load(ordering: .relaxed),
            "delivery_failures": deliveryFailures.load(ordering: .relaxed),
            "retried": retried.load(ordering: .relaxed),
            "dead_lettered": deadLettered.load(ordering: .relaxed),
            "malformed_messages": malformedMessages.load(ordering: .relaxed),
            "commits": commits.load(ordering: .relaxed),
            "blocked": blocked.load(ordering: .relaxed),
            "suppressed": suppressed.load(ordering: .relaxed),
            "held": held.load(ordering: .relaxed),
            "blocked_at_send": blockedAtSend.load(ordering: .relaxed),
            "client_events_lost": clientEventsLost.load(ordering: .relaxed),
            "access_denied": accessDenied.load(ordering: .relaxed),
        ]
    }
}
