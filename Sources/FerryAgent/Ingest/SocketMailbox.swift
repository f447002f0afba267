import FerryProtocol
import FerryThreads
import Synchronization

/// What other threads hand to the socket thread: the commit thread's acks (it is the ZeroMQ ingest
/// socket's ``AckDestination``), bus publications from
/// any thread, and control replies. It is built before anything that publishes, so the commit
/// pipeline, the delivery loops and the consent worker get it at construction; the socket thread
/// (``AgentSockets``) drains it whenever its wake-up pipe fires.
///
/// It also knows the bus subscriptions the socket thread has seen, so nothing is serialised for a
/// topic nobody listens to.
final class SocketMailbox: Sendable {
    enum Item: Sendable {
        case committed([CommittedBatch])
        case publish(BusTopic, [UInt8])
        /// A control reply: the requester's routing envelope and the reply body.
        case controlReply([[UInt8]], [UInt8])
    }

    private let items = Mutex<[Item]>([])
    private let subscriptions = Mutex<Set<[UInt8]>>([])
    /// The topics some subscription matches, one bit per ``BusTopic``, recomputed when a
    /// subscription changes: the socket thread asks per message.
    private let wanted = Atomic<UInt64>(0)
    /// Made readable when items arrive; the socket thread polls its read end.
    let wake: WakePipe
    /// Set when the wake pipe is closed; a late sender checks it under the lock so it never
    /// writes to a closed (maybe reused) descriptor.
    private let wakeClosed = Mutex(false)

    init() throws {
        wake = try WakePipe()
    }

    /// Publishes a bus message from any thread (dropped by the socket if nobody subscribes).
    func publish(_ topic: BusTopic, _ json: [UInt8]) {
        post(.publish(topic, json))
    }

    /// Queues a control reply for the requester behind `envelope`.
    func reply(to envelope: [[UInt8]], _ body: [UInt8]) {
        post(.controlReply(envelope, body))
    }

    /// Whether any subscriber would receive `topic`.
    func wants(_ topic: BusTopic) -> Bool {
        wanted.load(ordering: .acquiring) & Self.bit(topic) != 0
    }

    /// Records a subscription (`subscribe` true) or its end, as the XPUB socket reported it.
    func updateSubscription(_ prefix: [UInt8], subscribe: Bool) {
        subscriptions.withLock { subs in
            if subscribe { subs.insert(prefix) } else { subs.remove(prefix) }
            var bits: UInt64 = 0
            for topic in BusTopic.allCases {
                let name = Array(topic.rawValue.utf8)
                if subs.contains(where: { name.starts(with: $0) }) { bits |= Self.bit(topic) }
            }
            wanted.store(bits, ordering: .releasing)
        }
    }

    private static func bit(_ topic: BusTopic) -> UInt64 {
        let index: UInt64 = switch topic {
        case .accepted: 0
        case .delivered: 1
        case .dropped: 2
        case .rejected: 3
        case .blocked: 4
        case .suppressed: 5
        case .held: 6
        case .purged: 7
        case .consent: 8
        case .circuit: 9
        case .lost: 10
        }
        return 1 << index
    }

    /// Takes everything queued (on the socket thread).
    func take() -> [Item] {
        items.withLock { items in
            defer { items.removeAll(keepingCapacity: true) }
            return items
        }
    }

    /// Closes the wake-up pipe once the socket thread has ended (again: nothing).
    func close() {
        wakeClosed.withLock { closed in
            guard !closed else { return }
            closed = true
            wake.close()
        }
    }

    private func post(_ item: Item) {
        items.withLock { $0.append(item) }
        wakeClosed.withLock { closed in if !closed { wake.wake() } }
    }
}

/// The ZeroMQ ingest socket's ack destination: the socket thread sends each answer to the peer
/// and request its ``AckRoute`` names.
extension SocketMailbox: AckDestination {
    /// Queues the answers of one group (called on the commit thread).
    func deliver(_ answers: [CommittedBatch]) {
        post(.committed(answers))
    }
}

/// What a ZeroMQ ingest message's route holds: the connection's routing id as the address; the
/// request id (low 32 bits) and the protocol version the ack is sent in (bits 32–39) as the tag.
extension AckRoute {
    /// The route back to request `requestID` of the ZeroMQ connection `peer` (its routing id),
    /// answered in protocol `version`.
    init(peer: [UInt8], requestID: UInt32, version: UInt8 = ferryProtocolVersion) {
        self.init(address: peer, tag: UInt64(version) << 32 | UInt64(requestID))
    }

    /// The ZeroMQ routing id of the client connection.
    var peer: [UInt8] { address }
    /// The request id the ack answers.
    var requestID: UInt32 { UInt32(truncatingIfNeeded: tag) }
    /// The protocol version of the message (the ack is sent in it).
    var version: UInt8 { UInt8(truncatingIfNeeded: tag >> 32) }
}
