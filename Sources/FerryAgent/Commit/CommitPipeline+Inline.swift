import FerryStorage
import FerryThreads
import Synchronization

extension CommitPipeline {
    /// Who commits a group that just arrived, apart from any I/O (PostgreSQL's group commit: the
    /// backend that writes the commit record flushes the WAL itself when nobody else is
    /// flushing; the others that arrive meanwhile share the next flush).
    ///
    /// The arriving thread (the ZeroMQ path's socket thread with what it read in one round, an
    /// HTTP request's thread-pool thread) commits the group itself — appends, one `fdatasync`,
    /// answers — when it got the committer token, nothing is queued for the commit thread (so it
    /// never overtakes work that came before it: a batch, a consent change) and no commit delay is
    /// configured (the delay waits for other senders on purpose: the commit thread's job), and the
    /// group is one message (one request). A round of several messages is a backlog that built up
    /// while the path was busy: the commit thread takes it, so the path goes back to reading while
    /// the sync runs (what it did before the inline commit, and what keeps a burst's groups large).
    /// Otherwise it hands the group to the commit thread, which takes it after the commit in
    /// flight together with everything else that arrived meanwhile: one sync for all of it.
    enum Placement: Equatable, Sendable {
        /// Commit on the arriving thread.
        case here
        /// Queue for the commit thread, for this reason.
        case handOff(HandOff)

        /// Why a group goes to the commit thread.
        enum HandOff: Equatable, Sendable {
            /// A commit is in flight (another thread holds the token).
            case committing
            /// Work is queued for the commit thread: it goes first.
            case queued
            /// `log.commitDelayMicroseconds` is set: the commit thread gathers siblings.
            case commitDelay
            /// The group is several messages read in one round: a backlog, so the path keeps
            /// reading while the commit thread syncs.
            case backlog
            /// The pipeline is stopping (the commit thread refuses it too).
            case stopping
            /// The planted ack-before-fdatasync bug is on (``CommitFaults/acksBeforeSync``): its
            /// acks must leave on the path's thread while another thread syncs, as they would.
            case plantedAcksBeforeSync
        }

        /// What the placement reads: whether the token was free (the arriving thread then holds
        /// it), the work queued in the inbox and whether it is closed, the commit delay and how
        /// many messages the group holds.
        struct Inputs: Equatable, Sendable {
            var tokenTaken: Bool
            var queued: Int
            var closed: Bool
            var commitDelayMicroseconds: Int
            /// The messages (requests) of the arriving group.
            var messages = 1
            /// ``CommitFaults/acksBeforeSync`` (the power-cut explorer's planted bug).
            var acksBeforeSync = false
        }

        /// The placement of an arriving group.
        static func decide(_ inputs: Inputs) -> Placement {
            if inputs.closed { return .handOff(.stopping) }
            if inputs.acksBeforeSync { return .handOff(.plantedAcksBeforeSync) }
            if inputs.commitDelayMicroseconds > 0 { return .handOff(.commitDelay) }
            if inputs.tokenTaken { return .handOff(.committing) }
            if inputs.queued > 0 { return .handOff(.queued) }
            if inputs.messages > 1 { return .handOff(.backlog) }
            return .here
        }
    }

    /// Commits `batches` (one ingest path's, in arrival order) as one group on the calling thread
    /// when ``Placement`` says so, their answers handed to their destinations on this thread
    /// before it returns; otherwise queues them for the commit thread. Returns how many were
    /// taken, in order: all of them, or those queued before the pipeline stopped (the caller
    /// answers the rest as stopping). Blocks for the group's `fdatasync`: call it on a thread
    /// that may block (never an event loop, never the cooperative pool).
    func commit(_ batches: [IngestBatch]) -> Int {
        guard !batches.isEmpty else { return 0 }
        let delay = configuration.log.commitDelayMicroseconds
        let committed: Bool? = committer.withLockIfAvailable { committer -> Bool in
            let (queued, closed) = inbox.state
            let placement = Placement.decide(.init(tokenTaken: false, queued: queued, closed: closed || committer == nil,
                                                   commitDelayMicroseconds: delay, messages: batches.count,
                                                   acksBeforeSync: faults.acksBeforeSync))
            guard placement == .here, var state = committer else { return false }
            committer = nil
            commitGroup(batches.map { .events($0) }, state: &state, points: .inline, queued: false)
            committer = consume state
            return true
        }
        if committed == true { return batches.count }
        // Not committed here: queued (before any of it is, so a test can crash at the hand-off).
        try? CrashPoints.reach("ingest.inline.handoff")
        for (index, batch) in batches.enumerated() where !submit(batch) { return index }
        return batches.count
    }
}
