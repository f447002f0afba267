import CoreMetrics
import FerryPeer
import FerryProtocol
import FerryStorage
import Synchronization

/// The one chain of stages every ingest path hands what it received to, written once: a path
/// (the ZeroMQ socket, the local HTTP API, any registered ``IngestPathKind``) owns only its
/// protocol — reading requests, turning them into event frames, writing answers — and reaches
/// the stages through its ``IngestGateway`` alone.
///
/// 1. **Admission** (``admit(_:)``): stopping, back-pressure (the commit stage's backlog), the
///    access policy against the kernel's credentials.
/// 2. **The stages of each event** (``chain``, each an ``IngestStage``, listed once in
///    ``chain(limits:quality:)``, an ``IngestChain``): the limits (``LimitsStage``: `maxEventBytes`, a fixed header
///    that decodes, known flags), then the quality stage (``QualityStage``, when a plan or
///    redaction is configured: redaction, then the tracking plan; an event that breaks it is
///    refused, quarantined or tagged). The chain in effect is read once per batch, so a reload
///    applies from the next batch.
/// 3. **The decision**: the ``CommitPipeline`` (dedup, consent, retention, the group commit), on
///    the submitting thread when no commit is in flight, else on the commit thread.
/// 4. **The bus and the ack** (``answered(_:)``): once a batch's answer is back, its outcomes go
///    to the ``EventBus`` and its ack latency is recorded; the path's ``AckDestination`` writes
///    the answer.
///
/// `Sendable`; every stage may be called from any thread and never blocks.
final class IngestStages: Sendable {
    /// Stop admitting (the ZeroMQ socket stops reading; other paths answer "busy") while this
    /// many batches wait for the commit thread.
    static let maxCommitBacklog = 256
    /// … or while the waiting batches hold this many bytes (memory stays bounded under a flood
    /// of large batches; the clients wait in their outboxes). Two groups' worth
    /// (``CommitPipeline/maxGroupBytes``): one being written while the next gathers.
    static let maxCommitBacklogBytes = 4 << 20

    /// The limits every frame meets first (`maxEventBytes`, the fixed header, the flags).
    let limits: LimitsStage
    /// The consent configuration's categories by name (built-in and configured).
    let categories: [String: UInt8]
    /// The consent configuration's category of each event type's name.
    let typeCategories: [String: String]
    /// The bus every outcome is published on.
    let bus: EventBus

    /// The quality stage in effect (swapped by a reload).
    let qualityHolder: QualityStageHolder

    private let commit: CommitPipeline
    private let access: AccessControl
    private let metrics: AgentMetrics
    private let stopping = Atomic<Bool>(false)

    init(
        configuration: AgentConfiguration, commit: CommitPipeline, access: AccessControl, bus: EventBus, metrics: AgentMetrics,
        quality: QualityStageHolder = QualityStageHolder(nil)
    ) {
        qualityHolder = quality
        limits = LimitsStage(maxEventBytes: configuration.maxEventBytes)
        categories = configuration.consent.categories
        typeCategories = configuration.consent.typeCategories
        self.commit = commit
        self.access = access
        self.bus = bus
        self.metrics = metrics
    }

    // MARK: Admission

    /// Why a request is not admitted.
    enum Refusal: Equatable, Sendable {
        /// The agent is stopping: retry later, with the next agent.
        case stopping
        /// The commit stage has as much waiting as ingest lets in: retry shortly.
        case busy
        /// The sender may not send events (`access.ingest`); the text names the policy.
        case denied(String)
    }

    /// Whether the agent is stopping (nothing more is admitted).
    var isStopping: Bool { stopping.load(ordering: .acquiring) }

    /// Marks every path as stopping (the agent's shutdown).
    func stopIntake() { stopping.store(true, ordering: .releasing) }

    /// Whether the commit stage has as much waiting as ingest lets in (back-pressure): the ZeroMQ
    /// socket stops reading, another path answers retryably.
    var isBusy: Bool {
        commit.backlog >= Self.maxCommitBacklog || commit.backlogBytes >= Self.maxCommitBacklogBytes
    }

    /// Admits a request from `peer` (the kernel's credentials; nil when the connection has none),
    /// or says why not: stopping, then back-pressure, then the access policy (a refusal counted
    /// in `ferry_messages_denied_total`). Checked before any event is looked at.
    func admit(_ peer: PeerCredentials?) -> Refusal? {
        if isStopping { return .stopping }
        if isBusy { return .busy }
        return checkAccess(peer)
    }

    /// The access policy's part of ``admit(_:)`` alone (the ZeroMQ socket, which stops reading
    /// instead of refusing when busy or stopping).
    func checkAccess(_ peer: PeerCredentials?) -> Refusal? {
        guard access.allows(.ingest, peer) else {
            metrics.accessDenied.increment()
            return .denied(access.refusal(.ingest, peer))
        }
        return nil
    }

    // MARK: The stages of each event

    /// The stages every event goes through, in order, listed once: the limits, then the quality
    /// stage when there is one (a plan or redaction).
    static func chain(limits: LimitsStage, quality: QualityStage?) -> IngestChain {
        IngestChain(limits: limits, quality: quality)
    }

    /// The chain in effect: read it once per batch and pass it to each ``item(_:version:chain:)``
    /// (the quality stage is swapped by a reload, so a reload applies from the next batch).
    var chain: IngestChain { Self.chain(limits: limits, quality: qualityHolder.stage) }

    /// One frame of a message in protocol `version` through `chain`: stored as it came when every
    /// stage passes it (the common case returns it without a copy of its frame), else what the
    /// first stage that did not made of it (``IngestStage/check(_:metrics:)``).
    @inline(__always)
    func item(_ frame: [UInt8], version: UInt8, chain: IngestChain) -> IngestBatch.Item {
        var event = IngestEvent(frame: frame, version: version)
        // Each stage called directly (no dynamic dispatch per event): the limits, then quality.
        if let refused = chain.limits.check(event, metrics: metrics) { return refused }
        if let item = chain.quality?.check(event, metrics: metrics) {
            // A changed event goes on to the next stages (none follow today); any other outcome
            // ends the chain.
            guard case .event(let header, let changed) = item else { return item }
            event = IngestEvent(frame: changed, version: version, header: header)
        }
        guard let header = event.header else {
            // Not reached: the limits refuse a frame whose fixed header does not decode.
            let id = frame.count >= 16 ? EventID(bytes: frame) : .zero
            return .refused(AckEntry(id: id, status: .rejected, reason: event.headerRefusal), frame: event.frame)
        }
        return .event(header, frame: event.frame)
    }

    // MARK: The decision

    /// Hands admitted batches (one path's, in arrival order) to the commit stage: committed on
    /// the calling thread when no commit is in flight and nothing waits (it blocks for the sync),
    /// else queued for the commit thread (``CommitPipeline/commit(_:)``). Returns how many it
    /// took, in order (fewer once it stopped taking batches).
    func submit(_ batches: [IngestBatch]) -> Int { commit.commit(batches) }

    // MARK: The bus and the ack

    /// A batch's answer is back (any thread; the ZeroMQ socket calls it once the ack is sent):
    /// records its ack latency (per message, not per event: one clock read and one histogram
    /// record) and publishes its outcomes on the bus.
    func answered(_ batch: CommittedBatch) {
        if batch.receivedAt > 0 {
            metrics.ackLatency.recordNanoseconds(Int64(clamping: MonotonicClock.nanoseconds() &- batch.receivedAt))
        }
        bus.publishOutcomes(of: batch)
    }
}
