import CoreMetrics
import FerryProtocol
import FerryStorage
import FerryThreads
import Logging
import Synchronization

/// One ingest message after validation, on its way to the commit thread.
struct IngestBatch: Sendable {
    /// Where the batch's answer goes: its ingest source's destination.
    var replyTo: any AckDestination
    /// How that source finds the sender again (opaque to the commit pipeline).
    var route: AckRoute
    /// The sender's origin as encoded record metadata (empty when unknown), stored with each event.
    var origin: [UInt8] = []
    /// The sender's uid (the kernel's word), for its share of the queue; nil when unknown.
    var uid: UInt32?
    /// The frames of the message, in order, each admitted or refused.
    let items: [Item]
    /// When the socket thread received the message (``MonotonicClock`` ns), for the ack latency.
    var receivedAt: UInt64 = 0
    /// What the batch weighs against the commit backlog's byte bound: each frame's bytes plus a
    /// fixed overhead (``itemOverhead``). Counted once, where the frames are read: the commit
    /// stage adds and subtracts it without walking the items (a walk copies each item's payload).
    let weight: Int

    /// The bytes an item weighs besides its frame's.
    static let itemOverhead = 64

    /// A batch; `weight` as the path counted it while reading the frames (nil: counted here).
    init(replyTo: any AckDestination, route: AckRoute, origin: [UInt8] = [], uid: UInt32? = nil, items: [Item],
         receivedAt: UInt64 = 0, weight: Int? = nil) {
        self.replyTo = replyTo
        self.route = route
        self.origin = origin
        self.uid = uid
        self.items = items
        self.receivedAt = receivedAt
        self.weight = weight ?? items.reduce(0) { total, item in
            switch item {
            case .event(_, let frame), .refused(_, let frame, _), .quarantine(_, let frame, _): total + frame.count + Self.itemOverhead
            }
        }
    }

    enum Item: Sendable {
        /// A well-formed event (its validated fixed header and frame).
        case event(EventHeader, frame: [UInt8])
        /// An event refused before the commit stage (validation, or a consent decision the
        /// ingest path made), with its ack entry and, for a consent refusal, its bus note.
        case refused(AckEntry, frame: [UInt8], note: CommittedBatch.Note? = nil)
        /// An event that breaks the tracking plan under the `quarantine` action (its judged,
        /// redacted frame and the violations as a JSON array): kept in the quarantine area
        /// unless consent refuses it or the log already holds it (docs/QUALITY.md). Boxed: the
        /// case is rare, and unboxed its payload made every item larger than the size Swift
        /// moves inline, so each move of an item became a `memcpy` call (+175 instructions per
        /// ingested event, `scripts/callgrind-ingest`).
        indirect case quarantine(EventHeader, frame: [UInt8], violations: String)
    }
}

/// A batch after the commit: the ack entries in the order of the original frames.
package struct CommittedBatch: Sendable {
    /// The batch's ``IngestBatch/replyTo``.
    var replyTo: any AckDestination
    /// The batch's ``IngestBatch/route``.
    package var route: AckRoute
    /// The sender's origin (encoded record metadata), for the bus.
    var origin: [UInt8] = []
    /// The ack entries, one per frame of the batch, in order.
    package var entries: [AckEntry] = []
    /// The frames, for bus publications (same order as `entries`).
    var frames: [[UInt8]] = []
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

    /// An empty answer to `batch`, accepted at `acceptedAt`.
    init(answering batch: IngestBatch, acceptedAt: UInt64) {
        replyTo = batch.replyTo
        route = batch.route
        origin = batch.origin
        self.acceptedAt = acceptedAt
        receivedAt = batch.receivedAt
        entries.reserveCapacity(batch.items.count)
        frames.reserveCapacity(batch.items.count)
    }

    /// Adds the answer for the next frame.
    @inline(__always)
    mutating func append(_ entry: AckEntry, frame: [UInt8], note: Note? = nil) {
        if let note { notes[entries.count] = note }
        entries.append(entry)
        frames.append(frame)
    }
}

/// Work for the commit thread, in arrival order.
enum CommitWork: Sendable {
    /// Events to judge, store and ack.
    case events(IngestBatch)
    /// A consent change, applied between two groups; `reply` is called on the commit thread.
    case consent(ConsentCommand, ConsentActor, reply: @Sendable (Result<ConsentOutcome, AgentError>) -> Void)
}

/// The commit thread: dedup, consent, retention, append, one `fdatasync` per group, then acks.
///
/// Everything that arrived while the previous group was syncing forms the next group, so under
/// load many events share one sync (group commit) and with a single client latency is one sync.
/// It owns the ``LogWriter``, the ``DedupWindow`` and the session table; all file mutations happen
/// on this thread. Each event's verdict is the ``StateMachine``'s; this type gathers its inputs,
/// performs its actions (the appends, the holds, the writes) and hands each batch's answer to its
/// ``AckDestination``.
final class CommitPipeline: Sendable {
    let inbox = ThreadInbox<CommitWork>()
    private let thread: Mutex<DedicatedThread?> = Mutex(nil)
    /// The committer token and what it guards (nil before ``start(dedup:sessions:consent:)`` and
    /// once the commit thread has ended): one owner of the log writer at a time. The commit
    /// thread waits for it; an arriving thread only tries it (``commit(_:)``) and hands off when
    /// it is taken.
    let committer = Mutex<Committer?>(nil)
    let log: SegmentedLog
    let counters: AgentMetrics
    let logger: Logger
    let configuration: AgentConfiguration
    /// Test-only deviations (planted bugs), fixed at construction.
    let faults: CommitFaults

    /// Where bus publications (`lost`, `dropped`) go; acks go to each batch's destination.
    let bus: EventBus
    /// Signalled after each group that stored something (the delivery loops wait on them).
    private let committedSignals: [AsyncSignal]
    /// Signalled after each consent change only (the erasure senders: a change may let them go).
    private let consentSignals: [AsyncSignal]
    /// Where events the quality gate quarantines are kept (nil: none is ever quarantined).
    let quarantine: QuarantineStore?

    /// `committedSignals` are signalled after each group that stored events and after each
    /// consent change (which may unpause delivery or have queued an event). `faults` are for the
    /// power-cut tests (``CommitFaults/planted``); `.none` otherwise.
    init(
        log: SegmentedLog, configuration: AgentConfiguration, counters: AgentMetrics, bus: EventBus,
        committedSignals: [AsyncSignal], consentSignals: [AsyncSignal] = [], faults: CommitFaults = .none, quarantine: QuarantineStore? = nil, logger: Logger
    ) {
        self.quarantine = quarantine
        self.bus = bus
        self.committedSignals = committedSignals
        self.consentSignals = consentSignals
        self.log = log
        self.configuration = configuration
        self.counters = counters
        self.faults = faults
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

    static func weight(of batch: IngestBatch) -> Int { batch.weight }

    /// The commit thread's duplicate detection: the session table and the id window.
    struct Dedup {
        var window: DedupWindow
        var sessions: SessionTable
        /// The segment the last sessions snapshot was taken in (a new one is taken at rotation).
        var snapshotSegment: UInt64 = 0
    }

    /// Everything a group commit touches, behind the committer token (``committer``): the log
    /// writer, the dedup state, the consent worker, the decision's machine and the commit delay's
    /// record of senders. Not `Sendable`; only the token's holder reaches it.
    struct Committer {
        var book: Book
        var machine: StateMachine
        var delay: CommitDelay
        /// When the session table was last asked for losses (agent ms).
        var lastLossCheck: UInt64 = 0
    }

    /// Starts the thread; the log writer, the dedup window and the consent worker go behind the
    /// committer token, whose holder (the commit thread, or an arriving thread committing its own
    /// group, ``commit(_:)``) is their only owner while it holds it.
    func start(dedup window: DedupWindow, sessions: SessionTable, consent: ConsentWorker) throws {
        let writer = try LogWriter(log: log)
        let book = Book(dedup: Dedup(window: window, sessions: sessions, snapshotSegment: writer.activeIndex),
                        consent: consent, log: log, writer: writer)
        let state = UncheckedBox(Committer(
            book: book, machine: StateMachine(limits: limits),
            delay: CommitDelay(delayMicroseconds: configuration.log.commitDelayMicroseconds, siblings: configuration.log.commitSiblings)))
        committer.withLock { $0 = state.take() }
        let thread = DedicatedThread(name: "ferry-commit") { [self] in run() }
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

    /// Wakes the delivery loops: something was stored, or a consent change may let them send.
    private func signalDeliveryLoops() {
        for signal in committedSignals { signal.signal() }
    }

    /// The decision's figures from the configuration.
    private var limits: StateMachine.Limits {
        StateMachine.Limits(uidShareBytes: uidShareBytes, retentionMaxBytes: configuration.log.retentionMaxBytes,
                            fullPolicy: configuration.log.fullPolicy)
    }

    /// The most bytes one sender uid's events may hold (``LogConfiguration/uidSharePercent`` of
    /// the retention cap), or nil without a limit.
    private var uidShareBytes: Int64? {
        let percent = configuration.effectiveUIDSharePercent
        guard percent < 100 else { return nil }
        return configuration.log.retentionMaxBytes / 100 * Int64(percent)
    }

    /// The commit thread: waits for work, then takes it and commits it holding the token (so an
    /// arriving thread never commits ahead of work queued before it, see ``commit(_:)``); every
    /// 500 ms without work it does the housekeeping alone. Once the inbox is closed and drained,
    /// it persists the snapshots and retires the token's state (later arrivals are refused).
    private func run() {
        while inbox.wait(timeout: .milliseconds(500)) {
            committer.withLock { committer in
                guard var state = committer else { return }
                committer = nil
                let first = inbox.take(timeout: .zero, budget: Self.maxGroupBytes, weight: Self.weight(of:)) ?? []
                let work = gatherSiblings(first, delay: &state.delay)
                let taken = work.count { if case .events = $0 { true } else { false } }
                if taken > 0 { pendingBatches.subtract(taken, ordering: .relaxed) }
                commitGroup(work, state: &state, points: .thread, queued: true)
                committer = consume state
            }
        }
        committer.withLock { committer in
            guard let state = committer else { return }
            committer = nil
            let writer = state.book.writer
            if state.book.consent.pending == nil { deleteDeliveredSegments(writer: writer, dedup: state.book.dedup) }
            // Both snapshots cover the whole log now: the next start reads no record for them.
            do {
                try persistSnapshots(state.book.dedup, covering: writer.committedEnd)
            } catch {
                logger.error("could not persist the session table and dedup window", metadata: ["error": "\(error)"])
            }
        }
    }

    /// The crash points of a group's writes, by who commits it (``CrashPoints``): the appends
    /// buffered and about to be written and synced, then synced with the answers not yet out.
    struct GroupPoints {
        var appended: StaticString
        var synced: StaticString
        /// The commit thread's.
        static let thread = GroupPoints(appended: "commit.appended", synced: "commit.synced")
        /// An arriving thread's (``commit(_:)``).
        static let inline = GroupPoints(appended: "ingest.inline.appended", synced: "ingest.inline.synced")
    }

    /// Commits one group, in arrival order, by the token's holder: the housekeeping first (the
    /// id window's expiry, loss reports, delivered segments, the consent worker's tick), then the
    /// batches (one sync for all of them) and consent changes in order, each batch's answer to
    /// its destination after the writes settled. `queued`: the batches were counted in the
    /// backlog (they came through the inbox).
    func commitGroup(_ work: [CommitWork], state: inout Committer, points: GroupPoints, queued: Bool) {
        let writer = state.book.writer, consent = state.book.consent
        let now = WallClock.unixMilliseconds()
        state.book.dedup.window.expire(now: now)
        if now >= state.lastLossCheck + 1000 {
            state.lastLossCheck = now
            reportLosses(state.book.dedup.sessions.collectLosses(now: now), at: now)
        }
        // An unfinished consent change looks for what it appended after a recorded position:
        // keep every segment until it is done.
        if consent.pending == nil { deleteDeliveredSegments(writer: writer, dedup: state.book.dedup) }
        consent.tick(now: now, writer: writer)
        // Keep arrival order: a consent change applies after the events that came before it
        // and before those that came after it.
        var batches: [IngestBatch] = []
        func flush() {
            guard !batches.isEmpty else { return }
            let (results, answered) = commit(batches, book: &state.book, machine: &state.machine,
                                             now: WallClock.unixMilliseconds(), points: points)
            snapshotSessionsAfterRotation(writer: writer, dedup: &state.book.dedup)
            if queued { pendingBytes.subtract(batches.reduce(0) { $0 + Self.weight(of: $1) }, ordering: .relaxed) }
            batches.removeAll()
            if !answered { answer(results) }
            if results.contains(where: { $0.entries.contains { $0.status == .accepted } }) { signalDeliveryLoops() }
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
                signalDeliveryLoops()
                for signal in consentSignals { signal.signal() }
            }
        }
        flush()
    }

    /// Judges, stores and writes one group and settles what it decided into `book`. Returns the
    /// answers, and whether they were already handed to their destinations (only with the planted
    /// ack-before-fdatasync bug).
    private func commit(
        _ batches: [IngestBatch], book: inout Book, machine: inout StateMachine, now: UInt64, points: GroupPoints
    ) -> (results: [CommittedBatch], answered: Bool) {
        var results: [CommittedBatch] = []
        results.reserveCapacity(batches.count)
        var quarantined: [QuarantinePending] = []
        for batch in batches {
            var answer = CommittedBatch(answering: batch, acceptedAt: now)
            for item in batch.items {
                switch item {
                case .refused(let entry, let frame, let note):
                    answer.append(entry, frame: frame, note: note)
                case .event(let header, let frame):
                    judge(header, frame: frame, origin: batch.origin, uid: batch.uid, book: &book, machine: &machine,
                          now: now, into: &answer)
                case .quarantine(let header, let frame, let violations):
                    if let pending = judgeQuarantine(header, frame: frame, violations: violations, origin: batch.origin,
                                                     book: book, now: now, into: &answer) {
                        quarantined.append(QuarantinePending(batch: results.count, entry: answer.entries.count - 1, event: pending))
                    }
                }
            }
            results.append(consume answer)
        }
        if !quarantined.isEmpty { storeQuarantined(quarantined, in: &results) }
        let (failed, reason, answered) = writeGroup(book: book, machine: machine, results: results, points: points)
        if !failed.isEmpty { Self.reject(machine.ids(waitingOn: failed), in: &results, reason: reason) }
        machine.settle(failed: failed, at: now, into: &book)
        do {
            try book.consent.commitOnceKeys()
        } catch {
            // The events are stored; only the marks' durability is at stake (they hold in memory
            // until a restart).
            logger.error("could not persist once-key marks", metadata: ["error": "\(error)"])
        }
        // Tallied in locals, added once per group: no shared write per event.
        var tally = AgentMetrics.GroupTally()
        tally.rejected = Array(repeating: 0, count: RejectReason.allCases.count)
        // By index: `for result in results` copied each whole answer.
        for b in results.indices {
            for entry in results[b].entries {
                switch entry.status {
                case .accepted where entry.reason == .quarantined: tally.quarantined += 1
                case .accepted: tally.accepted += 1
                case .duplicate: tally.duplicate += 1
                case .blocked: tally.blocked += 1
                case .suppressed: tally.suppressed += 1
                default: tally.rejected[Int(min(entry.reason.rawValue, UInt8(tally.rejected.count - 1)))] += 1
                }
            }
            if !results[b].notes.isEmpty { tally.held += results[b].notes.values.count { $0.topic == .held } }
        }
        counters.record(tally)
        return (results, answered)
    }

    /// Has the machine judge one event of a batch from `uid` with `origin` metadata, carries out
    /// its action and adds the answer to `answer`. Out of line on purpose: with the answer added
    /// in the batch loop, the compiler copied the header and frame out of the item twice per event.
    @inline(never)
    private func judge(
        _ header: EventHeader, frame: [UInt8], origin: [UInt8], uid: UInt32?, book: inout Book,
        machine: inout StateMachine, now: UInt64, into answer: inout CommittedBatch
    ) {
        let event = StateMachine.Event(header, frame: frame, origin: origin, uid: uid)
        let action = machine.judge(event, in: book)
        let (entry, note) = perform(action, on: event, frame: frame, origin: origin, book: book, machine: &machine, now: now)
        answer.append(entry, frame: frame, note: note)
    }

    /// Carries out the machine's action for one event (the append or hold, for `store` and
    /// `hold`) and returns its answer.
    @inline(__always)
    private func perform(
        _ action: StateMachine.Action, on event: StateMachine.Event, frame: [UInt8], origin: [UInt8], book: Book,
        machine: inout StateMachine, now: UInt64
    ) -> (AckEntry, CommittedBatch.Note?) {
        switch action {
        case .store(let makingRoom):
            if makingRoom, !makeRoom(for: event.recordBytes, writer: book.writer, dedup: book.dedup) {
                return (AckEntry(id: event.id, status: .rejected, reason: .full), nil)
            }
            do {
                try book.writer.append(frame: frame, acceptedAt: now, encodedMetadata: origin)
            } catch {
                return (AckEntry(id: event.id, status: .rejected, reason: .storage), nil)
            }
            machine.wrote(to: .log, segment: book.writer.activeIndex)
        case .hold:
            do {
                try book.consent.hold(frame: frame, acceptedAt: now, encodedMetadata: origin)
            } catch {
                return (AckEntry(id: event.id, status: .rejected, reason: .storage), nil)
            }
            machine.wrote(to: .held, segment: 0)
        case .suppress, .block, .duplicate, .reject:
            break
        }
        return action.answer(for: event.id)
    }

    /// Makes the group durable: the held area's write, then the log's. Returns the writes that
    /// failed, what their events are answered (`full` on ENOSPC, else `storage`), and whether
    /// `results` were already handed to their destinations.
    private func writeGroup(
        book: Book, machine: StateMachine, results: [CommittedBatch], points: GroupPoints
    ) -> (failed: StateMachine.Writes, reason: RejectReason, answered: Bool) {
        var failed: StateMachine.Writes = []
        var answered = false
        var reason = RejectReason.storage
        if machine.written.held > 0 {
            do {
                try book.consent.commitGroup(heldAppended: machine.written.held)
            } catch {
                failed.insert(.held)
                reason = Self.rejectReason(for: error)
                logger.error("held-area commit failed; rejected \(machine.written.held) events", metadata: ["error": "\(error)"])
            }
        }
        if machine.written.log > 0 {
            // Planted on purpose (docs/FAULTS.md section 8): the acks leave before the sync.
            if faults.acksBeforeSync {
                answer(results)
                answered = true
            }
            do {
                do {
                    // Appended (in the writer's buffer, maybe partly written), nothing synced.
                    try CrashPoints.reach(points.appended)
                } catch {
                    book.writer.discardGroup()
                    throw error
                }
                try book.writer.commit()
                // Synced; no answer has left yet.
                try? CrashPoints.reach(points.synced)
                counters.commitEvents.record(machine.written.log)
                counters.fsync.recordNanoseconds(Int64(clamping: book.writer.lastSyncNanoseconds))
                log.recordUsage(machine.usage)
            } catch {
                // Nothing of the group is kept: every event of it, and any duplicate of one of
                // them, is rejected so the client knows to keep or resend it.
                failed.insert(.log)
                reason = Self.rejectReason(for: error)
                logger.error("group commit failed; rejected \(machine.written.log) events", metadata: ["error": "\(error)"])
            }
        }
        return (failed, reason, answered)
    }

    /// What the events of a failed write are answered: `full` when the disk is full, else `storage`.
    private static func rejectReason(for error: any Error) -> RejectReason {
        (error as? StorageError)?.code == .noSpace ? .full : .storage
    }

    /// Answers `rejected` every entry (not already rejected) whose id is in `failed`.
    private static func reject(_ failed: Set<EventID>, in results: inout [CommittedBatch], reason: RejectReason) {
        for b in results.indices {
            for e in results[b].entries.indices where failed.contains(results[b].entries[e].id)
                && results[b].entries[e].status != .rejected {
                results[b].entries[e] = AckEntry(id: results[b].entries[e].id, status: .rejected, reason: reason)
                results[b].notes[e] = nil
            }
        }
    }

    /// Hands each answer to the destination its batch came from: one call per destination.
    private func answer(_ results: [CommittedBatch]) {
        // Read by index: `results.first?.replyTo` and `allSatisfy` copied each whole answer
        // (its arrays and dictionary retained and released) just to compare one reference.
        guard !results.isEmpty else { return }
        let first = results[0].replyTo
        var index = 1
        while index < results.count, results[index].replyTo === first { index += 1 }
        if index == results.count {
            first.deliver(results)
            return
        }
        var rest = results[...]
        while let destination = rest.first?.replyTo {
            destination.deliver(rest.filter { $0.replyTo === destination })
            rest = rest.filter { $0.replyTo !== destination }[...]
        }
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
