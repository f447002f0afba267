/// Sizes and policies of the durable log.
public struct LogConfiguration: Sendable, Hashable {
    /// A segment is closed and a new one started once it would grow past this size.
    public var segmentMaxBytes: Int64
    /// The most bytes the log may hold on disk (delivered segments are deleted).
    public var retentionMaxBytes: Int64
    /// What happens to new events once ``retentionMaxBytes`` is reached.
    public var fullPolicy: FullPolicy
    /// The most of ``retentionMaxBytes``, in percent, the events of one sender uid may hold, so
    /// one user's flood cannot fill the queue for everyone (answered `full` for that uid alone).
    /// `nil`: the agent's mode decides (50 for a system agent, 100 — no limit — per user).
    public var uidSharePercent: Int?
    /// The longest the commit thread waits for more batches before it syncs a group, in µs, and
    /// only while at least ``commitSiblings`` other senders are active (PostgreSQL's
    /// `commit_delay`); 0 never waits. docs/ARCHITECTURE.md, "Commit thread".
    public var commitDelayMicroseconds: Int
    /// The fewest other active senders for the commit thread to wait (PostgreSQL's
    /// `commit_siblings`); at least 1, so a lone client is never delayed.
    public var commitSiblings: Int
    /// The default ``commitDelayMicroseconds``: off, as PostgreSQL's `commit_delay` — measured at
    /// 100, 1 000 and 10 000 events/s it saved no CPU (docs/bench/HISTORY.md, "Round 4 work in
    /// progress"); a host with many concurrent clients may turn it on.
    public static let defaultCommitDelayMicroseconds = 0
    /// The default ``commitSiblings``.
    public static let defaultCommitSiblings = 1
    /// The largest ``commitDelayMicroseconds`` accepted.
    public static let maxCommitDelayMicroseconds = 100_000

    /// What to do when the queue is full.
    public enum FullPolicy: String, Sendable, Hashable, Codable, CaseIterable {
        /// Reject new events with status `rejected`, reason `full` (nothing already accepted is lost).
        case reject
        /// Delete the oldest undelivered segment to make room (counted as `dropped`).
        case dropOldest = "drop-oldest"
    }

    /// Creates a configuration; the defaults suit a desktop or small server.
    public init(segmentMaxBytes: Int64 = 16 << 20, retentionMaxBytes: Int64 = 1 << 30, fullPolicy: FullPolicy = .reject,
                uidSharePercent: Int? = nil, commitDelayMicroseconds: Int = LogConfiguration.defaultCommitDelayMicroseconds,
                commitSiblings: Int = LogConfiguration.defaultCommitSiblings) {
        self.segmentMaxBytes = segmentMaxBytes
        self.retentionMaxBytes = retentionMaxBytes
        self.fullPolicy = fullPolicy
        self.uidSharePercent = uidSharePercent
        self.commitDelayMicroseconds = commitDelayMicroseconds
        self.commitSiblings = commitSiblings
    }
}

/// What recovery found when the log was opened.
public struct RecoveryReport: Sendable, Hashable {
    /// Segment files found.
    public var segments = 0
    /// Valid records found.
    public var records = 0
    /// Damaged regions skipped by resynchronising to the next valid record.
    public var corruptRegions = 0
    /// Bytes in the skipped regions.
    public var corruptBytes: Int64 = 0
    /// Bytes cut from the end of the last segment (a write torn by a crash).
    public var truncatedBytes: Int64 = 0

    /// An empty report.
    public init() {}

    /// Whether anything was damaged.
    public var isClean: Bool { corruptRegions == 0 && truncatedBytes == 0 }

    /// Adds what one segment's scan found.
    package mutating func add(_ scan: SegmentScanner.Result) {
        records += scan.records.count
        corruptRegions += scan.corruptRegions
        corruptBytes += scan.corruptBytes
        truncatedBytes += scan.truncatedBytes
    }

    /// Adds a later report (sealed segments verified after start); `segments` stays as counted.
    public mutating func merge(_ other: RecoveryReport) {
        records += other.records
        corruptRegions += other.corruptRegions
        corruptBytes += other.corruptBytes
        truncatedBytes += other.truncatedBytes
    }
}
