/// Whether the commit thread waits a moment for more batches before it syncs a group: PostgreSQL's
/// `commit_delay` and `commit_siblings`, as a pure decision (the clock is an argument; the commit
/// thread gathers the inputs and does the waiting, ``CommitPipeline``).
///
/// Group commit already shares one `fdatasync` among everything that arrived while the previous
/// one ran; at low rates that is one event, so each event pays a sync (about 37 µs of kernel CPU
/// here, docs/bench/HISTORY.md). Waiting helps only when another sender is likely to send within the
/// wait, and costs every event of the group that wait in ack latency; so, as in PostgreSQL, the
/// thread waits only while at least `siblings` *other* senders are active — a sender (an ingest
/// connection: ``AckRoute/address``) whose last batch arrived within ``activeWindowFactor`` ×
/// the delay — and never longer than the delay from when it took the group. It stops early once
/// every active sender has a batch in the group (nobody else is expected) or the group is full.
/// A lone client, however fast, is never delayed.
struct CommitDelay: Sendable {
    /// The longest wait, in nanoseconds (0: never wait).
    let delayNanoseconds: UInt64
    /// The fewest other active senders for a wait.
    let siblings: Int
    /// A sender is active while its last batch is at most this many delays old.
    static let activeWindowFactor: UInt64 = 8
    /// When each sender's last batch arrived (ns), pruned to the active window.
    private(set) var lastSeen: [[UInt8]: UInt64] = [:]

    /// A decision for `delayMicroseconds` and `siblings` (`log.commitDelayMicroseconds`,
    /// `log.commitSiblings`).
    init(delayMicroseconds: Int, siblings: Int) {
        delayNanoseconds = UInt64(max(0, delayMicroseconds)) * 1000
        self.siblings = max(1, siblings)
    }

    /// How long a sender stays active after its last batch.
    var activeWindow: UInt64 { delayNanoseconds * Self.activeWindowFactor }

    /// Notes a batch from `sender` arriving at `now` (ns).
    mutating func arrived(_ sender: [UInt8], at now: UInt64) {
        guard delayNanoseconds > 0 else { return }
        lastSeen[sender] = now
    }

    /// Forgets senders no longer active at `now` (once per group: the table stays as small as the
    /// set of active senders).
    mutating func prune(now: UInt64) {
        guard !lastSeen.isEmpty else { return }
        let window = activeWindow
        lastSeen = lastSeen.filter { now &- $0.value <= window }
    }

    /// The other senders active at `now`: those not in `group`.
    func activeOthers(excluding group: Set<[UInt8]>, now: UInt64) -> Int {
        let window = activeWindow
        return lastSeen.count { now &- $0.value <= window && !group.contains($0.key) }
    }

    /// For a group from the senders `group`, taken at `takenAt` (ns): the time (ns) to wait until
    /// for more batches, or `nil` to sync now.
    func waitUntil(group: Set<[UInt8]>, takenAt: UInt64, now: UInt64) -> UInt64? {
        guard delayNanoseconds > 0 else { return nil }
        let deadline = takenAt &+ delayNanoseconds
        guard now < deadline, activeOthers(excluding: group, now: now) >= siblings else { return nil }
        return deadline
    }

    /// During a wait until `deadline`, after more batches joined (the group's senders now
    /// `group`): whether to go on waiting — the deadline is ahead and some active sender has not
    /// sent yet.
    func keepWaiting(group: Set<[UInt8]>, deadline: UInt64, now: UInt64) -> Bool {
        now < deadline && activeOthers(excluding: group, now: now) > 0
    }
}
