import FerryProtocol
import FerryStorage

/// What the commit stage's decision reads of the state committed before the group, and where a
/// group's bookkeeping goes once its writes are settled: the session table, the id window, the
/// once-key marks, the consent state, the log's per-uid usage and fill, the held area's size.
///
/// The commit thread's is ``CommitPipeline/Book``; the decision tests give an in-memory one.
protocol CommitBook {
    /// Whether the session table knows `sequence` of `session` stored (false when it cannot tell:
    /// the id window judges then).
    func isStored(session: EventID, sequence: UInt64) -> Bool
    /// Whether the id window holds `id`.
    func isRecent(_ id: EventID) -> Bool
    /// Whether a once-key's mark was recorded.
    func isMarked(_ mark: OnceKeyStore.Mark) -> Bool
    /// The consent gate's verdict on events of `key`.
    func consent(_ key: ConsentKey) -> IngestDecision
    /// Bytes the committed log holds for sender `uid`.
    func bytes(ofUID uid: UInt32) -> Int64
    /// Bytes of the log, segment headers included (what the retention cap bounds).
    var logBytes: Int64 { get }
    /// Bytes of the held area (bounded by the retention cap too).
    var heldBytes: Int64 { get }

    /// Adds `id` to the id window, seen at `at` (agent ms).
    mutating func remember(_ id: EventID, at: UInt64)
    /// Adds `sequence` of `session` to the session table.
    mutating func remember(session: EventID, sequence: UInt64, source: String, at: UInt64)
    /// Records a once-key's mark.
    mutating func mark(_ mark: OnceKeyStore.Mark)
}

extension CommitPipeline {
    /// The commit stage's verdict on each event of a group, apart from any I/O (as
    /// async-http-client's `Transaction.StateMachine`): ``judge(_:in:)`` takes an event and the
    /// committed state and returns an ``Action``; the pipeline performs it (append, hold, answer)
    /// and reports a successful write with ``wrote(to:segment:)``.
    ///
    /// What the group decides — ids, session sequences and once-keys — stays in the machine (the
    /// group's *overlay*), consulted for the group's later events, and reaches the ``CommitBook``
    /// only in ``settle(failed:at:into:)``, after the group's writes, and only for events whose
    /// write succeeded. So a failed write leaves no trace, the snapshots written while a group is
    /// pending (``CommitPipeline/makeRoom(for:writer:dedup:)``) hold committed state only, and
    /// nothing is undone by hand.
    ///
    /// One machine lives on the commit thread and is reused group after group (its buffers keep
    /// their capacity: no allocation per group once warm).
    struct StateMachine {
        /// The figures the decision compares against.
        struct Limits: Equatable, Sendable {
            /// The most bytes one sender uid's events may hold, or nil without a limit.
            var uidShareBytes: Int64?
            /// The retention cap (``LogConfiguration/retentionMaxBytes``): the log's, and the
            /// held area's.
            var retentionMaxBytes: Int64
            /// What a full log does (``LogConfiguration/fullPolicy``).
            var fullPolicy: LogConfiguration.FullPolicy
        }

        /// One event as the decision reads it: its fixed fields and sizes.
        struct Event: Sendable {
            var id: EventID
            var session: EventID?
            var sequence: UInt64
            /// What the consent gate reads of it.
            var consent: ConsentKey
            /// Its once-key's mark, nil without a once-key.
            var onceKey: OnceKeyStore.Mark?
            /// The session's source name, for the session table's loss reports ("" without a
            /// session).
            var source: String = ""
            /// Bytes of its log record (frame and origin metadata).
            var recordBytes: Int64
            /// What it counts against the held area's cap (its frame's record, without metadata).
            var heldBytes: Int64
            /// The sender's uid, for its share of the queue; nil when unknown.
            var uid: UInt32?
            /// Whether its bytes count in the uid's usage (the batch carries an origin).
            var countsUsage: Bool
        }

        /// What the pipeline does with an event.
        enum Action: Equatable, Sendable {
            /// Append it to the log; with `makingRoom`, drop the oldest segments first (the cap is
            /// reached under drop-oldest). Then report ``wrote(to:segment:)`` `.log`.
            case store(makingRoom: Bool)
            /// Append it to the held area, then report ``wrote(to:segment:)`` `.held`.
            case hold
            /// Answer `suppressed` (`local_only`); nothing is stored.
            case suppress
            /// Answer `blocked` with a consent reason (10–17).
            case block(RejectReason)
            /// Answer `duplicate`: `none` (session or id seen), `onceKey` (once-key seen).
            case duplicate(RejectReason)
            /// Answer `rejected` (`full`).
            case reject(RejectReason)
        }

        /// The two durable writes of a group.
        struct Writes: OptionSet, Sendable {
            let rawValue: UInt8
            init(rawValue: UInt8) { self.rawValue = rawValue }
            /// The log's group commit.
            static let log = Writes(rawValue: 1)
            /// The held area's group commit.
            static let held = Writes(rawValue: 2)
        }

        /// What one event of the group leaves in the committed state, and which write it waits on.
        /// Trivial (no reference fields): appending and reading one copies bytes, no retains.
        struct Entry: Sendable {
            var id: EventID
            var session: EventID?
            var sequence: UInt64
            /// Where the session's source name is in ``StateMachine/sources`` (with a session only).
            var source: Int
            /// The once-key taken at the gate (kept even if the event is then refused, unless it
            /// was written and its write failed).
            var onceKey: OnceKeyStore.Mark?
            /// Whether the id and session sequence count as seen (suppressed or written).
            var seen: Bool
            /// The write the entry waits on (none: kept whatever the writes do).
            var write: Writes
        }

        /// What ``wrote(to:segment:)`` needs of the event judged `store` or `hold` (its entry is
        /// the last one): trivial, so judging an event copies no `Event`.
        private struct Awaiting {
            var uid: UInt32?
            var countsUsage: Bool
            var recordBytes: Int64
        }

        /// A (session, sequence) pair decided in this group.
        private struct SessionSequence: Hashable {
            var session: EventID
            var sequence: UInt64
        }

        let limits: Limits
        /// This group's entries, in arrival order.
        private(set) var entries: [Entry] = []
        /// The source names of the entries with a session (``Entry/source``).
        private var sources: [String] = []
        /// Ids seen in this group (``Entry/seen``), and the id of the event being judged or
        /// awaiting its write (taken in ``judge(_:in:)`` with the one probe that also finds a
        /// duplicate, given back if the event turns out not seen). Sized for a group of a few
        /// hundred events and kept at the largest size a group needed: ``reset()`` clears every
        /// slot, so a table much larger than the groups costs more than it saves.
        private var ids = EventIDSet(capacity: 256)
        /// Session sequences seen in this group (only events with a session touch it).
        private var sequences: Set<SessionSequence> = []
        /// Once-keys taken in this group.
        private var marks: Set<OnceKeyStore.Mark> = []
        /// Consent verdicts of this group by key: the state changes only between groups, and a
        /// group rarely holds more than a few kinds of event.
        private var verdicts: [(key: ConsentKey, decision: IngestDecision)] = []
        /// This group's logged bytes by segment and sender uid, for ``SegmentedLog/recordUsage(_:)``
        /// once committed (a list: a group rarely holds more than one sender and segment).
        private(set) var usage: [(segment: UInt64, uid: UInt32, bytes: Int64)] = []
        /// Events written to the log and to the held area in this group.
        private(set) var written: (log: Int, held: Int) = (0, 0)
        /// The event judged `store` or `hold` whose write is not reported yet.
        private var awaiting: Awaiting?

        init(limits: Limits) {
            self.limits = limits
            entries.reserveCapacity(1024)
        }

        /// Judges `event` against the committed state in `book` and this group's earlier events.
        @inline(__always)
        mutating func judge(_ event: Event, in book: some CommitBook) -> Action {
            if awaiting != nil { abandonAwaiting() }
            // A session's stored sequences answer first; the id window covers clients without
            // sessions and sequences the table no longer judges.
            if let session = event.session {
                if book.isStored(session: session, sequence: event.sequence)
                    || (!sequences.isEmpty && sequences.contains(SessionSequence(session: session, sequence: event.sequence))) {
                    return .duplicate(.none)
                }
            }
            if book.isRecent(event.id) { return .duplicate(.none) }
            // One probe finds a copy seen earlier in the group and takes the id for this event;
            // every verdict below that leaves it unseen gives it back.
            guard ids.insert(event.id) else { return .duplicate(.none) }
            let decision = consent(event.consent, in: book)
            // The once-key is taken before the consent gate, so a suppressed or blocked conversion
            // still counts; in no-op mode nothing at all is recorded.
            var entry = Entry(id: event.id, session: event.session, sequence: event.sequence, source: -1,
                              onceKey: nil, seen: false, write: [])
            if let mark = event.onceKey, decision != .blocked(.noOp) {
                if book.isMarked(mark) || marks.contains(mark) {
                    ids.remove(event.id)
                    return .duplicate(.onceKey)
                }
                marks.insert(mark)
                entry.onceKey = mark
            }
            if event.session != nil {
                entry.source = sources.count
                sources.append(event.source)
            }
            switch decision {
            case .blocked(let reason):
                record(entry)
                ids.remove(event.id)
                return .block(reason)
            case .suppressed:
                entry.seen = true
                record(entry)
                return .suppress
            case .hold:
                record(entry)
                guard book.heldBytes + event.heldBytes <= limits.retentionMaxBytes else {
                    ids.remove(event.id)
                    return .reject(.full)
                }
                awaiting = Awaiting(uid: event.uid, countsUsage: event.countsUsage, recordBytes: event.recordBytes)
                return .hold
            case .store:
                record(entry)
                if let uid = event.uid, let share = limits.uidShareBytes,
                   book.bytes(ofUID: uid) + groupBytes(ofUID: uid) + event.recordBytes > share {
                    // This sender has its share of the queue: it alone is answered `full`.
                    ids.remove(event.id)
                    return .reject(.full)
                }
                awaiting = Awaiting(uid: event.uid, countsUsage: event.countsUsage, recordBytes: event.recordBytes)
                // Count a segment header too: the append may start a new segment.
                guard book.logBytes + event.recordBytes + SegmentedLog.segmentHeaderSize > limits.retentionMaxBytes else {
                    return .store(makingRoom: false)
                }
                guard limits.fullPolicy == .dropOldest else {
                    awaiting = nil
                    ids.remove(event.id)
                    return .reject(.full)
                }
                return .store(makingRoom: true)
            }
        }

        /// Reports that the event last judged `store` (`.log`) or `hold` (`.held`) was appended;
        /// `segment` is the log segment it went to. Without this report (no room, the append
        /// threw) the event leaves only its once-key behind.
        mutating func wrote(to write: Writes, segment: UInt64) {
            guard let event = awaiting else { preconditionFailure("wrote(to:) without an event judged store or hold") }
            awaiting = nil
            let last = entries.count - 1
            entries[last].seen = true
            entries[last].write = write
            // Its id is in `ids` since judge(_:in:).
            if let session = entries[last].session { see(session: session, sequence: entries[last].sequence) }
            if write == .held {
                written.held += 1
                return
            }
            written.log += 1
            guard let uid = event.uid, event.countsUsage else { return }
            if let last = usage.indices.last, usage[last].segment == segment, usage[last].uid == uid {
                usage[last].bytes += event.recordBytes
            } else {
                usage.append((segment, uid, event.recordBytes))
            }
        }

        /// The ids of the events waiting on `failed`: with any answer carrying the same id (a
        /// later copy answered `duplicate`), they are answered `rejected`.
        func ids(waitingOn failed: Writes) -> Set<EventID> {
            Set(entries.lazy.filter { $0.seen && !$0.write.isDisjoint(with: failed) }.map(\.id))
        }

        /// Applies to `book` what the group decided, except what waits on a write in `failed`
        /// (its id, its session sequence and its once-key stay free), then empties the overlay
        /// for the next group.
        mutating func settle(failed: Writes, at now: UInt64, into book: inout some CommitBook) {
            for entry in entries where entry.write.isDisjoint(with: failed) {
                if let mark = entry.onceKey { book.mark(mark) }
                guard entry.seen else { continue }
                book.remember(entry.id, at: now)
                if let session = entry.session {
                    book.remember(session: session, sequence: entry.sequence, source: sources[entry.source], at: now)
                }
            }
            reset()
        }

        /// Gives back the id of the event judged `store` or `hold` whose write was not reported
        /// (no room, the append threw): it was not seen.
        private mutating func abandonAwaiting() {
            awaiting = nil
            ids.remove(entries[entries.count - 1].id)
        }

        /// Empties the overlay (keeping capacity).
        private mutating func reset() {
            if awaiting != nil { abandonAwaiting() }
            if ids.count > 0 {
                // Clearing the table costs about an instruction per slot, removing ids about a
                // hundred each: clear it unless the group's ids fill only a small share of it.
                if ids.count * 64 >= ids.slotCount {
                    ids.removeAll()
                } else {
                    for entry in entries where entry.seen { ids.remove(entry.id) }
                }
            }
            entries.removeAll(keepingCapacity: true)
            if !sources.isEmpty { sources.removeAll(keepingCapacity: true) }
            if !sequences.isEmpty { sequences.removeAll(keepingCapacity: true) }
            if !marks.isEmpty { marks.removeAll(keepingCapacity: true) }
            verdicts.removeAll(keepingCapacity: true)
            usage.removeAll(keepingCapacity: true)
            written = (0, 0)
            awaiting = nil
        }

        private mutating func record(_ entry: Entry) {
            entries.append(entry)
            if entry.seen, let session = entry.session { see(session: session, sequence: entry.sequence) }
        }

        /// Adds a seen event's session sequence (its id is in `ids` since judge(_:in:)).
        private mutating func see(session: EventID, sequence: UInt64) {
            sequences.insert(SessionSequence(session: session, sequence: sequence))
        }

        private mutating func consent(_ key: ConsentKey, in book: some CommitBook) -> IngestDecision {
            for memo in verdicts where memo.key == key { return memo.decision }
            let decision = book.consent(key)
            if verdicts.count < 8 { verdicts.append((key, decision)) }
            return decision
        }

        private func groupBytes(ofUID uid: UInt32) -> Int64 {
            usage.reduce(0) { $0 + ($1.uid == uid ? $1.bytes : 0) }
        }
    }
}

extension CommitPipeline.StateMachine.Action {
    /// The answer to event `id` under this action, once carried out (`store`: appended; `hold`:
    /// held; if the append or hold fails the pipeline answers `rejected` instead), with the bus
    /// topic a consent outcome is published on instead of `accepted`/`rejected`.
    func answer(for id: EventID) -> (entry: AckEntry, note: CommittedBatch.Note?) {
        switch self {
        case .store:
            (AckEntry(id: id, status: .accepted), nil)
        case .hold:
            (AckEntry(id: id, status: .accepted, reason: .held), .init(topic: .held, reason: "consent_undetermined"))
        case .suppress:
            (AckEntry(id: id, status: .suppressed, reason: .localOnly),
             .init(topic: .suppressed, reason: RejectReason.localOnly.description))
        case .block(let reason):
            (AckEntry(id: id, status: .blocked, reason: reason), .init(topic: .blocked, reason: reason.description))
        case .duplicate(let reason):
            (AckEntry(id: id, status: .duplicate, reason: reason), nil)
        case .reject(let reason):
            (AckEntry(id: id, status: .rejected, reason: reason), nil)
        }
    }
}
