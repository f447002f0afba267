import FerryStorage

/// When a sink's delivery loop sends what it has read: the decision alone, with no clock, no log
/// and no I/O (``DeliveryLoop`` gathers the inputs and applies the action).
///
/// Every delivery costs a sink the same fixed work whatever the batch holds (the file sink: a
/// write, an `fdatasync` of its file and one of its cursor; the HTTP sink: a request), so when
/// events trickle in, sending each on its own makes that fixed work the price of every event. The
/// rule:
///
/// - a **full** batch (`maxEvents` events, or `maxBytes` bytes) goes at once: a backlog drains in
///   full batches, and a busy host never waits;
/// - a **partial** batch goes once `maxWaitMilliseconds` have passed since the sink's previous
///   delivery (or since the loop started), or since its oldest event was accepted, whichever
///   comes first. So no event waits longer than `maxWaitMilliseconds` for its batch, an event
///   after a quiet spell goes at once, and a trickle is delivered at most once per
///   `maxWaitMilliseconds`, each delivery carrying everything accepted meanwhile;
/// - `maxWaitMilliseconds` 0 sends every batch at once (each commit's events on their own).
///
/// While a partial batch waits, the loop sleeps until the deadline; a commit wakes it early only
/// when ``shouldRead(committedBytesAhead:)`` says the events committed since the last read could
/// fill the batch, so a trickle costs no read (and no log I/O) per commit.
struct DeliveryPacing: Sendable, Equatable {
    /// The sink's batch settings.
    var batch: AgentConfiguration.SinkConfiguration.Batch
    /// When the sink last delivered (agent ms), or when the loop started.
    private(set) var lastDeliveryAt: UInt64

    /// What the loop has read and not yet sent.
    struct Pending: Sendable, Equatable {
        /// Events read.
        var events: Int
        /// Their bytes as stored (``StoredEvent/size``).
        var bytes: Int
        /// When the oldest of them was accepted (agent ms).
        var oldestAcceptedAt: UInt64

        /// `events` events of `bytes` bytes, the oldest accepted at `oldestAcceptedAt`.
        init(events: Int, bytes: Int, oldestAcceptedAt: UInt64) {
            self.events = events
            self.bytes = bytes
            self.oldestAcceptedAt = oldestAcceptedAt
        }

        /// What `events` add up to (`nil` when empty).
        init?(_ events: [StoredEvent]) {
            guard let first = events.first else { return nil }
            self.init(events: events.count, bytes: events.reduce(0) { $0 + $1.size }, oldestAcceptedAt: first.acceptedAt)
        }
    }

    /// What the loop does next.
    enum Action: Sendable, Equatable {
        /// Nothing read: wait for a commit.
        case idle
        /// Send the batch now.
        case deliver
        /// Wait for more events until agent ms `deadline` (then decide again), reading earlier only
        /// when a commit may have filled the batch.
        case wait(until: UInt64)
    }

    /// A pacing for `batch` whose loop started at agent ms `startedAt`.
    init(batch: AgentConfiguration.SinkConfiguration.Batch, startedAt: UInt64) {
        self.batch = batch
        lastDeliveryAt = startedAt
    }

    /// Whether `pending` is a full batch.
    func isFull(_ pending: Pending) -> Bool {
        pending.events >= batch.maxEvents || pending.bytes >= batch.maxBytes
    }

    /// The decision for `pending` (nil: nothing read) at agent ms `now`.
    func decide(_ pending: Pending?, now: UInt64) -> Action {
        guard let pending, pending.events > 0 else { return .idle }
        if isFull(pending) || batch.maxWaitMilliseconds <= 0 { return .deliver }
        let wait = UInt64(batch.maxWaitMilliseconds)
        let deadline = min(lastDeliveryAt, pending.oldestAcceptedAt) &+ wait
        return now >= deadline ? .deliver : .wait(until: deadline)
    }

    /// Whether a wait should end early to read: the bytes committed after what was read
    /// (`committedBytesAhead`, `nil` when unknown, e.g. the log moved to a new segment) could make
    /// `pending` a full batch, at the average record size read so far.
    func shouldRead(_ pending: Pending, committedBytesAhead: Int?) -> Bool {
        guard let ahead = committedBytesAhead else { return true }
        guard ahead > 0 else { return false }
        if pending.bytes + ahead >= batch.maxBytes { return true }
        let average = max(1, pending.bytes / max(1, pending.events))
        return pending.events + ahead / average >= batch.maxEvents
    }

    /// Records a delivery (or a batch dead-lettered or skipped) at agent ms `now`.
    mutating func delivered(at now: UInt64) {
        lastDeliveryAt = max(lastDeliveryAt, now)
    }
}
