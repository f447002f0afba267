import CoreMetrics
import FerryPeer
import FerryProtocol
import FerryStorage
import Logging
import Synchronization

/// An ingest path's door into the agent, the one every path goes through (the ZeroMQ socket of
/// `FerryZeroMQIngest`, the HTTP API of `FerryHTTPIngest`): the ``IngestStages`` every path
/// shares, seen from a module with its own I/O. Built by the agent for each ``IngestPath``;
/// `Sendable`, callable from any thread, never blocks.
///
/// A request crosses it once each way: a `submit` admits it (stopping, back-pressure, the access
/// policy), lets the path turn its body into event frames only then, puts each frame through the
/// stages (``IngestStage``: the limits, the quality gate) and the batch into the group commit; the
/// answer comes back once the group's writes settled — to the completion of
/// ``submit(peer:origin:receivedAt:prepare:completion:)``, its outcomes already published on the
/// bus, or to the path's own ``AckDestination`` (``submit(peer:receivedAt:version:replyTo:route:into:prepare:origin:)``),
/// which publishes them with ``answered(_:)`` once it has answered the sender.
package final class IngestGateway: Sendable {
    /// The ingest path's name (the listener's).
    package let path: String
    /// The figures of this path (nil for a path without a metric set of its own: the ZeroMQ
    /// socket, counted by the core's metrics).
    package let metrics: IngestPathMetrics?

    private let stages: IngestStages
    private let counters: AgentMetrics
    private let destination: GatewayDestination

    init(path: String, stages: IngestStages, metrics: IngestPathMetrics?, counters: AgentMetrics) {
        self.path = path
        self.stages = stages
        self.metrics = metrics
        self.counters = counters
        destination = GatewayDestination(stages: stages)
    }

    /// The consent configuration's categories by name (built-in and configured).
    package var categories: [String: UInt8] { stages.categories }
    /// The consent configuration's category of each event type's name.
    package var typeCategories: [String: String] { stages.typeCategories }

    /// The encoded origin metadata of a sender with `peer` credentials (procfs is read: call it
    /// off any event loop, once per connection); an unknown pid (a TCP peer): only the uid and
    /// gid are kept.
    package static func origin(of peer: PeerCredentials) -> [UInt8] {
        guard peer.knownPID != nil else { return EventOrigin(uid: peer.uid, gid: peer.gid).metadata.encoded }
        return OriginResolver.origin(of: peer).metadata.encoded
    }

    /// Marks the path as stopping (the agent's shutdown): every request from now on is answered
    /// ``Admission/stopping``.
    package func stopIntake() { stages.stopIntake() }

    /// One event of a request: its encoded frame, or why it was refused before it got one.
    package enum Frame: Sendable {
        /// An encoded event frame, put through the limits here.
        case event([UInt8])
        /// Refused by the ingest path (its own reason, e.g. malformed JSON for this message).
        case refused(EventID, RejectReason)
        /// Refused by a consent decision the ingest path made (the message's own preferences):
        /// acked `blocked` with `ack`, published on the bus `blocked` topic with `reason`.
        case blocked(frame: [UInt8], ack: RejectReason, reason: String)
    }

    /// What became of a submitted request.
    package enum Admission: Sendable, Equatable {
        /// In the group commit: the completion will be called once.
        case submitted
        /// The path's `prepare` refused the request itself (it answers it).
        case withdrawn
        /// The agent is stopping: retry later.
        case stopping
        /// The commit stage has as much waiting as ingest lets in: retry shortly.
        case busy
        /// The sender may not send events; the text names the policy.
        case denied(String)
    }

    /// Whether the commit stage has as much waiting as ingest lets in (back-pressure): a path that
    /// reads at its own pace (the ZeroMQ socket) stops reading while it holds.
    package var isBusy: Bool { stages.isBusy }

    /// Submits one request sent by `peer` (nil when unknown) with encoded `origin` metadata,
    /// received at `receivedAt` (``MonotonicClock`` ns). Once it is admitted (stopping,
    /// back-pressure, the access policy), `prepare` runs (on the caller's thread) and returns its
    /// event frames, or nil to refuse the request itself. `completion` is called once with one
    /// ``AckEntry`` per frame in order, after the group's writes settled and its outcomes were
    /// published; it must not block. When no commit is in flight the caller's thread commits the
    /// request itself (it blocks for the `fdatasync`: call this where blocking is allowed, never
    /// on an event loop) and `completion` runs on it before this returns; else on the commit
    /// thread. It is never called unless this
    /// returns ``Admission/submitted``.
    package func submit(
        peer: PeerCredentials?, origin: [UInt8], receivedAt: UInt64, prepare: () -> [Frame]?,
        completion: @escaping @Sendable (IngestAnswer) -> Void
    ) -> Admission {
        switch stages.admit(peer) {
        case .stopping: return .stopping
        case .busy: return .busy
        case .denied(let reason): return .denied(reason)
        case nil: break
        }
        guard let frames = prepare() else { return .withdrawn }
        var items: [IngestBatch.Item] = []
        items.reserveCapacity(frames.count)
        let chain = stages.chain
        var weight = 0
        for frame in frames {
            switch frame {
            case .event(let frame):
                weight &+= frame.count &+ IngestBatch.itemOverhead
                items.append(stages.item(frame, version: ferryProtocolVersion, chain: chain))
            case .refused(let id, let reason):
                weight &+= 16 &+ IngestBatch.itemOverhead
                items.append(.refused(AckEntry(id: id, status: .rejected, reason: reason), frame: id.bytes))
            case .blocked(let frame, let ack, let reason):
                let id = frame.count >= 16 ? EventID(bytes: frame) : .zero
                weight &+= frame.count &+ IngestBatch.itemOverhead
                items.append(.refused(AckEntry(id: id, status: .blocked, reason: ack), frame: frame,
                                      note: CommittedBatch.Note(topic: .blocked, reason: reason)))
            }
        }
        let tag = destination.register(completion)
        let batch = IngestBatch(replyTo: destination, route: AckRoute(address: [], tag: tag), origin: origin, uid: peer?.uid,
                                items: items, receivedAt: receivedAt, weight: weight)
        guard stages.submit([batch]) == 1 else {
            destination.cancel(tag)
            return .stopping
        }
        return .submitted
    }

    /// Submits one message of a path that reads at its own pace and answers on a thread of its
    /// own (the ZeroMQ socket) into the `round` it is reading: sent by `peer` (nil when unknown)
    /// in protocol `version`, received at `receivedAt` (``MonotonicClock`` ns). It is admitted
    /// unless the agent is stopping or the access policy refuses `peer` — never answered
    /// ``Admission/busy``: the path stops reading while ``isBusy`` holds instead. Then `prepare`
    /// returns the message's event frames (nil refuses the message itself: the path answers it),
    /// each goes through the stages, and `origin` gives the sender's encoded origin metadata.
    /// ``commit(_:)`` then commits the round; the answer goes to `replyTo` with `route` (on the
    /// thread that committed it; it must not block), whose path answers the sender and then calls
    /// ``answered(_:)``.
    package func submit(
        peer: PeerCredentials?, receivedAt: UInt64, version: UInt8, replyTo: any AckDestination, route: AckRoute,
        into round: inout IngestRound, prepare: () -> ArraySlice<[UInt8]>?, origin: () -> [UInt8]
    ) -> Admission {
        if stages.isStopping { return .stopping }
        if case .denied(let reason) = stages.checkAccess(peer) { return .denied(reason) }
        guard let frames = prepare() else { return .withdrawn }
        var items: [IngestBatch.Item] = []
        items.reserveCapacity(frames.count)
        let chain = stages.chain
        var weight = 0
        for frame in frames {
            weight &+= frame.count &+ IngestBatch.itemOverhead
            items.append(stages.item(frame, version: version, chain: chain))
        }
        round.append(IngestBatch(replyTo: replyTo, route: route, origin: origin(), uid: peer?.uid, items: items,
                                 receivedAt: receivedAt, weight: weight))
        return .submitted
    }

    /// Commits the messages of one read `round` as one group (``IngestRound``): on the calling
    /// thread when no commit is in flight and nothing waits for the commit thread — it blocks for
    /// the `fdatasync`, and the answers reach their ``AckDestination`` on this thread before it
    /// returns — else queued for the commit thread, which shares the next sync among everything
    /// that arrived meanwhile. Returns the routes of the messages not taken because the agent is
    /// stopping (the path answers them so).
    package func commit(_ round: consuming IngestRound) -> [AckRoute] {
        let batches = round.batches
        let taken = stages.submit(batches)
        return batches[taken...].map(\.route)
    }

    /// A batch submitted with a destination of the path's own was answered (any thread; the
    /// ZeroMQ socket calls it once the ack is sent): its ack latency is recorded and its outcomes
    /// are published on the bus.
    package func answered(_ batch: CommittedBatch) { stages.answered(batch) }

    /// Counts a message the path refused as malformed before any event of it was looked at
    /// (`ferry_messages_refused_total`).
    package func countRefusedMessage() { counters.messagesRefused.increment() }

    /// Records how many clients are connected to the path (`ferry_clients_connected`).
    package func recordClientsConnected(_ count: Int) { counters.clientsConnected.record(count) }

    /// Publishes a request refused as a whole (`{"topic":"rejected","path":…,"status":…,
    /// "code":…,"reason":…,"uid":…,"at":…}`) on the bus `rejected` topic, for subscribers only.
    package func publishRefusal(status: Int, code: String, message: String, uid: UInt32?) {
        stages.bus.publishRefusal(path: path, status: status, code: code, reason: message, uid: uid)
    }
}

/// The messages a path that reads at its own pace admitted in one read round, in arrival order,
/// committed together by ``IngestGateway/commit(_:)`` (one group, one sync).
package struct IngestRound: ~Copyable {
    fileprivate(set) var batches: [IngestBatch] = []
    /// What its batches weigh (``IngestBatch/weight``).
    private(set) var weight = 0

    /// An empty round.
    package init() {}

    /// Whether no message was admitted into it.
    package var isEmpty: Bool { batches.isEmpty }

    /// Whether it holds as much as one group commit takes (``CommitPipeline/maxGroupBytes``): the
    /// path stops reading and commits it (memory stays bounded, and so does the sync every ack
    /// of the round waits on).
    package var isFull: Bool { weight >= CommitPipeline.maxGroupBytes }

    fileprivate mutating func append(_ batch: IngestBatch) {
        weight += batch.weight
        batches.append(batch)
    }
}

/// The commit stage's answer to one submitted request.
package struct IngestAnswer: Sendable {
    let batch: CommittedBatch

    /// One entry per submitted frame, in order.
    package var entries: [AckEntry] { batch.entries }
}

/// The ``AckDestination`` of an ingest path: puts each answered request through the ack stage
/// (``IngestStages/answered(_:)``: the bus, the ack latency) and hands it to the completion its
/// submission registered (on the commit thread; completions only complete a promise).
final class GatewayDestination: AckDestination {
    private let stages: IngestStages
    private let pending = Mutex<[UInt64: @Sendable (IngestAnswer) -> Void]>([:])
    private let next = Atomic<UInt64>(1)

    init(stages: IngestStages) {
        self.stages = stages
    }

    /// Registers `completion` under a new route tag.
    func register(_ completion: @escaping @Sendable (IngestAnswer) -> Void) -> UInt64 {
        let tag = next.wrappingAdd(1, ordering: .relaxed).oldValue
        pending.withLock { $0[tag] = completion }
        return tag
    }

    /// Forgets the completion of a submission the pipeline refused.
    func cancel(_ tag: UInt64) { _ = pending.withLock { $0.removeValue(forKey: tag) } }

    func deliver(_ answers: [CommittedBatch]) {
        for answer in answers {
            guard let completion = pending.withLock({ $0.removeValue(forKey: answer.route.tag) }) else { continue }
            stages.answered(answer)
            completion(IngestAnswer(batch: answer))
        }
    }
}
