import FerryProtocol
import FerryStorage
import Logging
import Synchronization
import ZeroMQ

/// An ingest path other than the ZeroMQ socket (the local HTTP API of `FerryHTTPIngest`): the
/// extension point through which a module with its own I/O (SwiftNIO) feeds the agent, so the
/// agent core never imports it.
///
/// The agent owns the listener's life: ``start(_:)`` once the commit pipeline runs (and the
/// ZeroMQ sockets are bound), ``stopIntake()`` when shutdown begins (the listener refuses new
/// requests from then on, retryably), ``stop()`` after the pipeline has committed and answered
/// everything it was given. `ferryd` (FerryDaemon) builds the listeners its configuration asks for
/// and hands them to ``FerryAgent/init(configuration:sinks:listeners:metrics:logger:)``.
package protocol IngestListener: Sendable {
    /// The ingest path's name, for logs, metrics and status (`http_unix`, `http_tcp`).
    var name: String { get }
    /// Binds and starts serving, submitting through `gateway`. Throws if it cannot bind.
    func start(_ gateway: IngestGateway) async throws
    /// Stops taking new work: requests from now on are answered retryably (the agent is stopping).
    func stopIntake()
    /// Closes the listener; called after the commit pipeline stopped, so every answer was delivered.
    func stop() async
}

/// What an ingest path may do with the agent: check the access policy against the kernel's
/// credentials, learn a sender's origin, submit validated event frames to the group commit and
/// get each event's answer once the group's writes settled, publish refusals on the bus and
/// record its figures. Built by the agent for each ``IngestListener``; `Sendable`, callable from
/// any thread (never blocks but ``origin(of:)``, which reads procfs).
package final class IngestGateway: Sendable {
    /// The ingest path's name (the listener's).
    package let path: String
    /// The largest event frame stored (`maxEventBytes`).
    package let maxEventBytes: Int
    /// The consent configuration's categories by name (built-in and configured).
    package let categories: [String: UInt8]
    /// The consent configuration's category of each event type's name.
    package let typeCategories: [String: String]
    /// The figures of this path.
    package let metrics: IngestPathMetrics

    private let pipeline: CommitPipeline
    private let access: AccessControl
    private let mailbox: SocketMailbox
    private let destination: GatewayDestination
    private let counters: AgentMetrics
    private let stopping = Atomic<Bool>(false)

    init(path: String, configuration: AgentConfiguration, pipeline: CommitPipeline, access: AccessControl,
         mailbox: SocketMailbox, counters: AgentMetrics) {
        self.path = path
        maxEventBytes = configuration.maxEventBytes
        categories = configuration.consent.categories
        typeCategories = configuration.consent.typeCategories
        self.pipeline = pipeline
        self.access = access
        self.mailbox = mailbox
        self.counters = counters
        metrics = counters.ingestPath(path)
        destination = GatewayDestination()
    }

    /// Whether `peer` (the kernel's credentials of the connection; nil when it has none) may
    /// send events: the same decision as for the ZeroMQ ingest socket (`access.ingest`).
    package func allows(_ peer: PeerCredentials?) -> Bool {
        let allowed = access.allows(.ingest, peer)
        if !allowed { counters.accessDenied.increment() }
        return allowed
    }

    /// Why `peer` may not send events, naming the policy.
    package func refusal(_ peer: PeerCredentials?) -> String { access.refusal(.ingest, peer) }

    /// The encoded origin metadata of a sender with `peer` credentials (procfs is read: call it
    /// off any event loop); `pid` 0 means unknown (a TCP peer): only the uid and gid are kept.
    package static func origin(of peer: PeerCredentials) -> [UInt8] {
        guard peer.pid > 0 else { return EventOrigin(uid: peer.uid, gid: peer.gid).metadata.encoded }
        return OriginResolver.origin(of: peer).metadata.encoded
    }

    /// Whether the agent is stopping (requests are answered retryably).
    package var isStopping: Bool { stopping.load(ordering: .acquiring) }

    /// Whether the commit stage has as much waiting as the ZeroMQ socket lets in before it stops
    /// reading: a request is answered retryably instead of adding to it.
    package var isBusy: Bool {
        pipeline.backlog >= AgentSockets.maxCommitBacklog || pipeline.backlogBytes >= AgentSockets.maxCommitBacklogBytes
    }

    /// Marks the path as stopping (the agent's shutdown).
    package func stopIntake() { stopping.store(true, ordering: .releasing) }

    /// One event of a request: its encoded frame, or why it was refused before it got one.
    package enum Frame: Sendable {
        /// An encoded event frame, validated here.
        case event([UInt8])
        /// Refused by the ingest path (its own reason, e.g. malformed JSON for this message).
        case refused(EventID, RejectReason)
        /// Refused by a consent decision the ingest path made (the message's own preferences).
        case blocked(EventID, RejectReason)
    }

    /// Submits the frames of one request, sent by `uid` (nil when unknown) with encoded `origin`
    /// metadata, received at `receivedAt` (``MonotonicClock`` ns). `completion` is called once,
    /// on the commit thread, with one ``AckEntry`` per frame in order, after the group's writes
    /// settled; it must not block. Returns false (and never calls `completion`) when the agent
    /// is stopping.
    package func submit(
        _ frames: [Frame], uid: UInt32?, origin: [UInt8], receivedAt: UInt64,
        completion: @escaping @Sendable (IngestAnswer) -> Void
    ) -> Bool {
        guard !isStopping else { return false }
        var items: [IngestBatch.Item] = []
        items.reserveCapacity(frames.count)
        for frame in frames {
            switch frame {
            case .refused(let id, let reason):
                items.append(.refused(AckEntry(id: id, status: .rejected, reason: reason), frame: id.bytes))
            case .blocked(let id, let reason):
                items.append(.refused(AckEntry(id: id, status: .blocked, reason: reason), frame: id.bytes))
            case .event(let frame):
                let id = frame.count >= 16 ? EventID(bytes: frame) : .zero
                guard frame.count <= maxEventBytes else {
                    items.append(.refused(AckEntry(id: id, status: .rejected, reason: .tooLarge),
                                          frame: Array(frame.prefix(WireEvent.fixedHeaderSize))))
                    continue
                }
                do {
                    let header = try EventHeader(frame)
                    guard header.flags.isSubset(of: .known) else {
                        items.append(.refused(AckEntry(id: id, status: .rejected, reason: .unsupportedField), frame: frame))
                        continue
                    }
                    items.append(.event(header, frame: frame))
                } catch {
                    items.append(.refused(AckEntry(id: id, status: .rejected, reason: error.rejectReason), frame: frame))
                }
            }
        }
        let tag = destination.register(completion)
        let batch = IngestBatch(replyTo: destination, route: AckRoute(address: [], tag: tag), origin: origin, uid: uid,
                                items: items, receivedAt: receivedAt)
        guard pipeline.submit(batch) else {
            destination.cancel(tag)
            return false
        }
        return true
    }

    /// Publishes the outcomes of an answered request on the bus (`accepted`, `rejected` and the
    /// consent topics, as for ZeroMQ ingest), for subscribers only; call it off the commit thread.
    package func publish(_ answer: IngestAnswer) {
        let batch = answer.batch
        if batch.receivedAt > 0 {
            counters.ackLatency.recordNanoseconds(Int64(clamping: MonotonicClock.nanoseconds() &- batch.receivedAt))
        }
        let topics: [BusTopic] = [.accepted, .rejected, .blocked, .suppressed, .held]
        guard topics.contains(where: mailbox.wants) else { return }
        let origin = batch.origin.withUnsafeBytes { EventOrigin(metadata: RecordMetadata(decoding: $0)) }
        for (index, (entry, frame)) in zip(batch.entries, batch.frames).enumerated() {
            var topic: BusTopic, reason: String?
            if let note = batch.notes[index] {
                (topic, reason) = (note.topic, note.reason)
            } else if entry.status == .accepted {
                (topic, reason) = (.accepted, nil)
            } else if entry.status == .rejected {
                (topic, reason) = (.rejected, entry.reason.description)
            } else {
                continue
            }
            guard mailbox.wants(topic),
                  let json = BusMessage.event(topic: topic, frame: frame, at: batch.acceptedAt, reason: reason, origin: origin)
            else { continue }
            mailbox.publish(topic, json)
        }
    }

    /// Publishes a request refused as a whole (`{"topic":"rejected","path":…,"status":…,
    /// "code":…,"reason":…,"uid":…,"at":…}`) on the bus `rejected` topic, for subscribers only.
    package func publishRefusal(status: Int, code: String, message: String, uid: UInt32?) {
        guard mailbox.wants(.rejected) else { return }
        var json = JSONWriter()
        json.field("topic", BusTopic.rejected.rawValue)
        json.field("path", path)
        json.field("status", UInt64(status))
        json.field("code", code)
        json.field("reason", message)
        if let uid { json.field("uid", UInt64(uid)) }
        json.field("at", WallClock.unixMilliseconds())
        mailbox.publish(.rejected, json.finish())
    }
}

/// The commit stage's answer to one submitted request.
package struct IngestAnswer: Sendable {
    let batch: CommittedBatch

    /// One entry per submitted frame, in order.
    package var entries: [AckEntry] { batch.entries }
}

/// The ``AckDestination`` of an ingest path: hands each answered request to the completion its
/// submission registered (on the commit thread; completions only complete a promise).
final class GatewayDestination: AckDestination {
    private let pending = Mutex<[UInt64: @Sendable (IngestAnswer) -> Void]>([:])
    private let next = Atomic<UInt64>(1)

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
            completion(IngestAnswer(batch: answer))
        }
    }
}
