import FerryProtocol
import FerryStorage
import FerryThreads
import Logging
import Synchronization

/// One ingest message after validation, on its way to the commit thread.
struct IngestBatch: Sendable {
    /// ZeroMQ routing id of the client connection.
    var peer: [UInt8]
    var requestID: UInt32
    /// The protocol version of the message (the ack is sent in it).
    var version: UInt8 = ferryProtocolVersion
    /// The sender's origin as encoded record metadata (empty when unknown), stored with each event.
    var origin: [UInt8] = []
    /// The sender's uid (the kernel's word), for its share of the queue; nil when unknown.
    var uid: UInt32?
    var items: [Item]
    /// When the socket thread received the message (``MonotonicClock`` ns), for the ack latency.
    var receivedAt: UInt64 = 0

    enum Item: Sendable {
        /// A well-formed event (its validated fixed header and frame).
        case event(EventHeader, frame: [UInt8])
        /// An event refused during validation, with its ack entry.
        case refused(AckEntry, frame: [UInt8])
    }
}

/// A batch after the commit: the ack entries in the order of the original frames.
struct CommittedBatch: Sendable {
    var peer: [UInt8]
    var requestID: UInt32
    var version: UInt8
    /// The sender's origin (encoded record metadata), for the bus.
    var origin: [UInt8] = []
    var entries: [AckEntry]
    /// The frames, for bus publications (same order as `entries`).
    var frames: [[UInt8]]
    var acceptedAt: UInt64
    /// Consent outcomes by entry index (blocked, suppressed, held), published on their topics
    /// instead of `accepted`/`rejected`.
    var notes: [Int: Note] = [:]
    /// When the message was received (``MonotonicClock`` ns; 0 if unknown).
    var receivedAt: UInt64 = 0

    struct Note: Sendable {
        var topic: BusTopic
        var reason: String?
    }
}

/// Work for the commit thread, in arrival order.
enum CommitWork: Sendable {
    /// Events to judge, store and ack.
    case events(IngestBatch)
    /// A consent change, applied between two groups; `reply` is called on the commit thread.
    case consent(ConsentCommand, ConsentActor, reply: @Sendable (Result<ConsentOutcome, AgentError>) -> Void)
}

/// The commit thread: dedup, retention, append, one `fdatasync` per group, then acks.
///
/// Everything that arrived while the previous group was syncing forms the next group, so under
/// load many events share one sync (group commit) and with a single client latency is one sync.
/// It owns the ``LogWriter`` and the ``DedupWindow``; all file mutations happen on this thread.
final class CommitPipeline: Sendable {
    private let inbox = ThreadInbox<CommitWork>()
    private let thread: Mutex<DedicatedThread?> = Mutex(nil)
    let log: SegmentedLog
    private let counters: AgentCounters
    private let logger: Logger
    private let configuration: AgentConfiguration

    /// Where acks and bus publications go (drained by the socket thread).
    private let mailbox: SocketMailbox
    /// Signalled after each group that stored something (the delivery loops wait on them).
    private let committedSignals: [AsyncSignal]

    /// `committedSignals` are signalled after each group that stored events and after each
    /// consent change (which may unpause delivery or have queued an event).
    init(
        log: SegmentedLog, configuration: AgentConfiguration, counters: AgentCounters, mailbox: SocketMailbox,
        committedSignals: [AsyncSignal], logger: Logger
    ) {
        self.mailbox = mailbox
        self.committedSignals = committedSignals
        self.log = log
        self.configuration = configuration
        self.counters = counters
        self.logger = logger
    }

    /// Batches submitted but not yet committed (for back-pressure on the ingest socket).
    var backlog: Int { pendingBatches.load(ordering: .relaxed) }
    /// Batches in the inbox (an atomic, not the inbox's lock: the socket thread asks per message).
    private let pendingBatches = Atomic<Int>(0)

    /// Bytes of the batches submitted but not yet committed (for back-pressure on the ingest
    /// socket: a count of batches alone lets a flood of large batches grow memory).
    var backlogBytes: Int { pendingBytes.load(ordering: .relaxed) }
    private let pendingBytes = Atomic<Int>(0)

    /// One group commit takes batches until they hold this many bytes (at least one batch), so a
    /// flood of full batches cannot make a group, and every ack waiting on it, arbitrarily large.
    static let maxGroupBytes = 2 << 20

    /// What a batch weighs for ``backlogBytes`` and ``maxGroupBytes``: its frames plus a fixed
    /// cost per item (the per-event work does not depend on size alone).
    static func weight(of work: CommitWork) -> Int {
        switch work {
        case .events(let batch): weight(of: batch)
        case .consent: 64
        }
    }

    static func weight(of batch: IngestBatch) -> Int {
        batch.items.reduce(0) { total, item in
            switch item {
            case .event(_, let frame), .refused(_, let frame): total + frame.count + 64
            }
        }
    }

    var dedupSnapshotPath: String { configuration.dataDirectory + "/dedup.snapshot" }
    var sessionsSnapshotPath: String { configuration.dataDirectory + "/" + Self.sessionsSnapshotName }
    /// The session table's snapshot file in the data directory.
    static let sessionsSnapshotName = "sessions.snapshot"

    /// The commit thread's duplicate detection: the session table and the id window.
    struct Dedup {
        var window: DedupWindow
        var sessions: SessionTable
        /// The segment the last sessions snapshot was taken in (a new one is taken at rotation).
        var snapshotSegment: UInt64 = 0
    }

    /// Starts the thread, which becomes the only owner of the log writer, the dedup window and
    /// the consent worker.
    func start(dedup window: DedupWindow, sessions: SessionTable, consent: ConsentWorker) throws {
        let writer = try LogWriter(log: log)
        let dedup = Dedup(window: window, sessions: sessions, snapshotSegment: writer.activeIndex)
        let state = UncheckedBox((writer, dedup, consent))
        let thread = DedicatedThread(name: "ferry-commit") { [self] in
            var (writer, dedup, consent) = state.take()
            run(writer: writer, dedup: &dedup, consent: consent)
        }
        self.thread.withLock { $0 = thread }
    }

    /// Queues a batch. Returns false once the pipeline is stopping.
    func submit(_ batch: IngestBatch) -> Bool {
        let weight = Self.weight(of: batch)
        pendingBytes.add(weight, ordering: .relaxed)
        pendingBatches.add(1, ordering: .relaxed)
        guard inbox.put(.events(batch)) else {
            pendingBytes.subtract(weight, ordering: .relaxed)
            pendingBatches.subtract(1, ordering: .relaxed)
            return false
        }
        return true
    }

    /// Queues a consent command. Returns false once the pipeline is stopping.
    func submit(
        _ command: ConsentCommand, by actor: ConsentActor,
        reply: @escaping @Sendable (Result<ConsentOutcome, AgentError>) -> Void
    ) -> Bool {
        inbox.put(.consent(command, actor, reply: reply))
    }

    /// Stops taking batches, commits what was submitted and waits for the thread to end.
    func stop() async {
        inbox.close()
        if let thread = thread.withLock({ $0 }) { await thread.joinAsync() }
    }

    private func committedEvents() {
        for signal in committedSignals { signal.signal() }
    }

    private func run(writer: LogWriter, dedup: inout Dedup, consent: ConsentWorker) {
        var lastLossCheck: UInt64 = 0
        while let work = inbox.take(timeout: .milliseconds(500), budget: Self.maxGroupBytes, weight: Self.weight(of:)) {
            let taken = work.count { if case .events = $0 { true } else { false } }
            if taken > 0 { pendingBatches.subtract(taken, ordering: .relaxed) }
            let now = WallClock.unixMilliseconds()
            dedup.window.expire(now: now)
            if now >= lastLossCheck + 1000 {
                lastLossCheck = now
                reportLosses(dedup.sessions.collectLosses(now: now), at: now)
            }
            // An unfinished consent change looks for what it appended after a recorded position:
            // keep every segment until it is done.
            if consent.pending == nil { deleteDeliveredSegments(writer: writer, dedup: dedup) }
            consent.tick(now: now, writer: writer)
            // Keep arrival order: a consent change applies after the events that came before it
            // and before those that came after it.
            var batches: [IngestBatch] = []
            func flush() {
                guard !batches.isEmpty else { return }
                var acked = false
                let results = commit(batches, writer: writer, dedup: &dedup, consent: consent,
                                     now: WallClock.unixMilliseconds(), acked: &acked)
                snapshotSessionsAfterRotation(writer: writer, dedup: &dedup)
                pendingBytes.subtract(batches.reduce(0) { $0 + Self.weight(of: $1) }, ordering: .relaxed)
                batches.removeAll()
                if !acked { mailbox.deliverAcks(results) }
                if results.contains(where: { $0.entries.contains { $0.status == .accepted } }) { committedEvents() }
            }
            for item in work {
                switch item {
                case .events(let batch):
                    batches.append(batch)
                case .consent(let command, let actor, let reply):
                    flush()
                    do {
                        reply(.success(try consent.apply(command, by: actor, writer: writer)))
                    } catch let error as AgentError {
                        reply(.failure(error))
                    } catch {
                        reply(.failure(AgentError(code: .io, message: "\(error)")))
                    }
                    // The change may unpause delivery or have queued a consent_updated event.
                    committedEvents()
                }
            }
            flush()
        }
        if consent.pending == nil { deleteDeliveredSegments(writer: writer, dedup: dedup) }
        // Both snapshots cover the whole log now: the next start reads no record for them.
        do {
            try persistSessions(dedup.sessions, pending: [:], covering: writer.committedEnd)
            try persistDedup(dedup.window, excluding: [], covering: writer.committedEnd)
        } catch {
            logger.error("could not persist the session table and dedup window", metadata: ["error": "\(error)"])
        }
    }

    private func commit(
        _ batches: [IngestBatch], writer: LogWriter, dedup: inout Dedup, consent: ConsentWorker, now: UInt64,
        acked: inout Bool
    ) -> [CommittedBatch] {
        var results: [CommittedBatch] = []
        results.reserveCapacity(batches.count)
        // This group's bytes by segment and sender uid, counted into the log once committed.
        // A list, not nested dictionaries: a group rarely holds more than one sender and segment.
        var usage: [(segment: UInt64, uid: UInt32, bytes: Int64)] = []
        func groupBytes(ofUID uid: UInt32) -> Int64 {
            usage.reduce(0) { $0 + ($1.uid == uid ? $1.bytes : 0) }
        }
        var appended: [EventID] = []
        var heldIDs: [EventID] = []
        /// (session, sequence) of the events in `appended` and `heldIDs`, to undo a failed commit.
        var sessionKeys: [EventID: (session: EventID, sequence: UInt64)] = [:]
        func remember(_ header: EventHeader, frame: [UInt8]) {
            dedup.window.insert(header.id, at: now)
            guard let session = header.session else { return }
            dedup.sessions.insert(session: session, sequence: header.sequence, at: now, source: header.source(in: frame))
            sessionKeys[header.id] = (session, header.sequence)
        }
        var onceKeys: [(id: EventID, key: String)] = []
        // The consent decision reads only an event's type, category and local-only flag, and the
        // state changes only between groups (on this thread): judge each such triple once a group.
        var decisions: [(key: UInt32, decision: IngestDecision)] = []
        func decide(_ header: EventHeader) -> IngestDecision {
            let key = UInt32(header.type.rawValue) << 16 | UInt32(header.category) << 8
                | (header.flags.contains(.localOnly) ? 1 : 0)
            for memo in decisions where memo.key == key { return memo.decision }
            let decision = consent.engine.decide(header)
            if decisions.count < 8 { decisions.append((key, decision)) }
            return decision
        }
        for batch in batches {
            var entries: [AckEntry] = []
            var frames: [[UInt8]] = []
            var notes: [Int: CommittedBatch.Note] = [:]
            entries.reserveCapacity(batch.items.count)
            frames.reserveCapacity(batch.items.count)
            // This batch's stored bytes not yet added to `usage` (one sender, so added once per
            // batch and segment, not per event).
            var unrecorded: (segment: UInt64, bytes: Int64) = (writer.activeIndex, 0)
            func recordUsage() {
                guard unrecorded.bytes > 0, let uid = batch.uid else { return }
                if let last = usage.indices.last, usage[last].segment == unrecorded.segment, usage[last].uid == uid {
                    usage[last].bytes += unrecorded.bytes
                } else {
                    usage.append((unrecorded.segment, uid, unrecorded.bytes))
                }
                unrecorded.bytes = 0
            }
            for item in batch.items {
                switch item {
                case .refused(let entry, let frame):
                    entries.append(entry)
                    frames.append(frame)
                case .event(let header, let frame):
                    let id = header.id
                    frames.append(frame)
                    // A session's stored sequences answer first; the id window covers clients
                    // without sessions and sequences the table no longer judges.
                    if let session = header.session,
                       dedup.sessions.contains(session: session, sequence: header.sequence) == true {
                        entries.append(AckEntry(id: id, status: .duplicate))
                        continue
                    }
                    if dedup.window.contains(id) {
                        entries.append(AckEntry(id: id, status: .duplicate))
                        continue
                    }
                    let decision = decide(header)
                    // The once-key mark comes before the consent gate, so a suppressed or blocked
                    // conversion still counts; in no-op mode nothing at all is written.
                    if header.onceKeyLength > 0 && decision != .blocked(.noOp) {
                        let key = header.onceKey(in: frame)
                        guard consent.onceKeys.mark(key) else {
                            entries.append(AckEntry(id: id, status: .duplicate, reason: .onceKey))
                            continue
                        }
                        onceKeys.append((id, key))
                    }
                    switch decision {
                    case .blocked(let reason):
                        notes[entries.count] = .init(topic: .blocked, reason: reason.description)
                        entries.append(AckEntry(id: id, status: .blocked, reason: reason))
                        continue
                    case .suppressed:
                        remember(header, frame: frame)
                        notes[entries.count] = .init(topic: .suppressed, reason: RejectReason.localOnly.description)
                        entries.append(AckEntry(id: id, status: .suppressed, reason: .localOnly))
                        continue
                    case .hold:
                        guard consent.heldBytes + Int64(LogRecord.framedSize(frameSize: frame.count)) <= configuration.log.retentionMaxBytes else {
                            entries.append(AckEntry(id: id, status: .rejected, reason: .full))
                            continue
                        }
                        do {
                            try consent.hold(frame: frame, acceptedAt: now, encodedMetadata: batch.origin)
                            remember(header, frame: frame)
                            heldIDs.append(id)
                            notes[entries.count] = .init(topic: .held, reason: "consent_undetermined")
                            entries.append(AckEntry(id: id, status: .accepted, reason: .held))
                        } catch {
                            entries.append(AckEntry(id: id, status: .rejected, reason: .storage))
                        }
                        continue
                    case .store:
                        break
                    }
                    let recordSize = Int64(LogRecord.framedSize(frameSize: frame.count, metadataSize: batch.origin.count))
                    if let uid = batch.uid, let share = uidShareBytes,
                       log.bytes(ofUID: uid) + groupBytes(ofUID: uid) + unrecorded.bytes + recordSize > share {
                        // This sender has its share of the queue: it alone is answered `full`.
                        entries.append(AckEntry(id: id, status: .rejected, reason: .full))
                        continue
                    }
                    if !makeRoom(for: frame.count + batch.origin.count, writer: writer, dedup: dedup, pending: appended, pendingSessions: sessionKeys) {
                        entries.append(AckEntry(id: id, status: .rejected, reason: .full))
                        continue
                    }
                    do {
                        try writer.append(frame: frame, acceptedAt: now, encodedMetadata: batch.origin)
                        remember(header, frame: frame)
                        if batch.uid != nil, !batch.origin.isEmpty {
                            if writer.activeIndex != unrecorded.segment {
                                recordUsage()
                                unrecorded.segment = writer.activeIndex
                            }
                            unrecorded.bytes += recordSize
                        }
                        appended.append(id)
                        entries.append(AckEntry(id: id, status: .accepted))
                    } catch {
                        entries.append(AckEntry(id: id, status: .rejected, reason: .storage))
                    }
                }
            }
            recordUsage()
            results.append(CommittedBatch(peer: batch.peer, requestID: batch.requestID, version: batch.version, origin: batch.origin, entries: entries,
                                          frames: frames, acceptedAt: now, notes: notes, receivedAt: batch.receivedAt))
        }
        var failed = Set<EventID>()
        var failureReason: RejectReason = .storage
        if !heldIDs.isEmpty {
            do {
                try consent.commitGroup(heldAppended: heldIDs.count)
            } catch {
                failed.formUnion(heldIDs)
                forget(heldIDs, keys: sessionKeys, from: &dedup)
                failureReason = (error as? StorageError)?.code == .noSpace ? .full : .storage
                logger.error("held-area commit failed; rejected \(heldIDs.count) events", metadata: ["error": "\(error)"])
            }
        }
        if !appended.isEmpty {
            if PlantedBug.active == .ackBeforeFdatasync {
                // Planted on purpose (docs/FAULTS.md section 8): the acks leave before the sync.
                mailbox.deliverAcks(results)
                acked = true
            }
            do {
                try writer.commit()
                counters.commitEvents.record(appended.count)
                counters.fsync.recordNanoseconds(Int64(clamping: writer.lastSyncNanoseconds))
                log.recordUsage(usage)
            } catch {
                // Nothing of the group is kept: every event of it, and any duplicate of one of
                // them, is rejected so the client knows to keep or resend it.
                failed.formUnion(appended)
                forget(appended, keys: sessionKeys, from: &dedup)
                failureReason = (error as? StorageError)?.code == .noSpace ? .full : .storage
                logger.error("group commit failed; rejected \(appended.count) events", metadata: ["error": "\(error)"])
            }
        }
        if !failed.isEmpty {
            for b in results.indices {
                for e in results[b].entries.indices where failed.contains(results[b].entries[e].id)
                    && results[b].entries[e].status != .rejected {
                    results[b].entries[e] = AckEntry(id: results[b].entries[e].id, status: .rejected, reason: failureReason)
                    results[b].notes[e] = nil
                }
            }
            // A rejected conversion did not happen: its once-key stays free.
            for (id, key) in onceKeys where failed.contains(id) { consent.onceKeys.unmark(key) }
        }
        do {
            try consent.onceKeys.commit()
        } catch {
            // The events are stored; only the marks' durability is at stake (they hold in memory
            // until a restart).
            logger.error("could not persist once-key marks", metadata: ["error": "\(error)"])
        }
        // Tallied in locals, added once per group: no shared write per event.
        var tally = AgentCounters.GroupTally()
        tally.rejected = Array(repeating: 0, count: RejectReason.allCases.count)
        for result in results {
            for entry in result.entries {
                switch entry.status {
                case .accepted: tally.accepted += 1
                case .duplicate: tally.duplicate += 1
                case .blocked: tally.blocked += 1
                case .suppressed: tally.suppressed += 1
                default: tally.rejected[Int(min(entry.reason.rawValue, UInt8(tally.rejected.count - 1)))] += 1
                }
            }
            if !result.notes.isEmpty { tally.held += result.notes.values.count { $0.topic == .held } }
        }
        counters.record(tally)
        return results
    }

    /// The most bytes one sender uid's events may hold (``LogConfiguration/uidSharePercent`` of
    /// the retention cap), or nil without a limit.
    private var uidShareBytes: Int64? {
        let percent = configuration.effectiveUIDSharePercent
        guard percent < 100 else { return nil }
        return configuration.log.retentionMaxBytes / 100 * Int64(percent)
    }

    /// Undoes ``commit``'s dedup entries for events whose group failed.
    private func forget(_ ids: [EventID], keys: [EventID: (session: EventID, sequence: UInt64)], from dedup: inout Dedup) {
        dedup.window.remove(ids)
        for id in ids {
            if let key = keys[id] { dedup.sessions.remove(session: key.session, sequence: key.sequence) }
        }
    }

    /// Publishes and counts the client events the session table found lost.
    private func reportLosses(_ losses: [SessionTable.Loss], at now: UInt64) {
        for loss in losses {
            let events = Int(clamping: loss.events)
            counters.recordLost(events, source: loss.source)
            logger.warning("client events lost", metadata: [
                "source": "\(loss.source)", "session": "\(loss.session)", "events": "\(events)",
            ])
            if mailbox.wants(.lost) {
                mailbox.publish(.lost, BusMessage.lost(loss, at: now))
            }
        }
    }

    /// After a group that moved the log to a new segment, persists the session table, so a
    /// restart scans at most the newest segments to rebuild it.
    private func snapshotSessionsAfterRotation(writer: LogWriter, dedup: inout Dedup) {
        guard writer.activeIndex != dedup.snapshotSegment else { return }
        do {
            try persistSessions(dedup.sessions, pending: [:], covering: writer.committedEnd)
            dedup.snapshotSegment = writer.activeIndex
        } catch {
            logger.error("could not persist the session table", metadata: ["error": "\(error)"])
        }
    }

    /// Applies the retention cap before an append of `frameSize` bytes (the frame and its record
    /// metadata). Returns false if the event must be rejected.
    private func makeRoom(
        for frameSize: Int, writer: LogWriter, dedup: Dedup, pending: [EventID],
        pendingSessions: [EventID: (session: EventID, sequence: UInt64)]
    ) -> Bool {
        // Count a segment header too: the append may start a new segment.
        let size = Int64(LogRecord.framedSize(frameSize: frameSize)) + SegmentedLog.segmentHeaderSize
        let cap = configuration.log.retentionMaxBytes
        while writer.totalBytes + size > cap {
            guard configuration.log.fullPolicy == .dropOldest else { return false }
            do {
                // The dropped segment's ids leave the disk: persist the window first, without
                // the ids of this uncommitted group.
                try persistDedup(dedup.window, excluding: Set(pending), covering: writer.committedEnd)
                try persistSessions(dedup.sessions, pending: pendingSessions, covering: writer.committedEnd)
                let victim = writer.oldestSealedSegment
                if let victim, mailbox.wants(.dropped) {
                    // Tell the bus which events go, before their bytes do (rare path: only when
                    // the cap is hit under drop-oldest and someone listens).
                    let start = LogPosition(segment: victim.index, offset: SegmentedLog.segmentHeaderSize)
                    let cursor = log.cursor
                    if let events = try? log.read(from: max(start, cursor), maxEvents: victim.verified ? victim.records : .max, maxBytes: Int(victim.size)).events {
                        publishDropped(events.filter { $0.position.segment == victim.index })
                    }
                }
                guard let lost = try writer.dropOldestSegment() else { return false }
                counters.dropped.increment(by: lost)
                logger.warning("queue full: dropped the oldest segment", metadata: ["events": "\(lost)"])
            } catch {
                logger.error("could not drop the oldest segment", metadata: ["error": "\(error)"])
                return false
            }
        }
        return true
    }

    private func publishDropped(_ events: [StoredEvent]) {
        let now = WallClock.unixMilliseconds()
        for event in events {
            if let json = BusMessage.event(topic: .dropped, frame: event.frame, at: now, reason: "retention") {
                mailbox.publish(.dropped, json)
            }
        }
    }

    private func deleteDeliveredSegments(writer: LogWriter, dedup: Dedup) {
        let done = log.deliveredSegments().filter { $0.index != writer.activeIndex }
        guard !done.isEmpty else { return }
        do {
            try persistDedup(dedup.window, excluding: [], covering: writer.committedEnd)
            try persistSessions(dedup.sessions, pending: [:], covering: writer.committedEnd)
            for segment in done { try writer.delete(segment: segment) }
            try FileIO.syncDirectory(log.directory)
        } catch {
            logger.error("could not delete delivered segments", metadata: ["error": "\(error)"])
        }
    }

    /// Writes the id window as of the last commit (without `excluding`, the ids of the group not
    /// yet committed): it covers every record before `covering`, the end of the committed log.
    private func persistDedup(_ dedup: DedupWindow, excluding: Set<EventID>, covering: LogPosition) throws {
        try FileIO.writeAtomically(dedup.snapshot(excluding: excluding, coveringUpTo: covering), to: dedupSnapshotPath)
    }

    /// Writes the session table as of the last commit (without `pending`, the sequences of the
    /// group not yet committed): it covers every record before `covering`, the end of the
    /// committed log (not ``SegmentedLog/endPosition``, which in the middle of a group that
    /// rotated names the new segment, past records of the group still to be committed).
    private func persistSessions(
        _ sessions: SessionTable, pending: [EventID: (session: EventID, sequence: UInt64)], covering: LogPosition
    ) throws {
        var committed = sessions
        for key in pending.values { committed.remove(session: key.session, sequence: key.sequence) }
        try FileIO.writeAtomically(committed.snapshot(coveringUpTo: covering), to: sessionsSnapshotPath)
    }
}

/// Moves a non-Sendable value into a thread that becomes its only owner.
final class UncheckedBox<Value>: @unchecked Sendable {
    // @unchecked: the value is taken exactly once, by the thread it was created for.
    private var value: Value?
    init(_ value: Value) { self.value = value }
    func take() -> Value {
        defer { value = nil }
        return value!
    }
}
