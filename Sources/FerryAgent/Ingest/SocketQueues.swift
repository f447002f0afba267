import FerryProtocol
import FerryThreads
import Synchronization

/// The socket thread's wake-up: one pipe it polls, made readable by whoever queues it work (the
/// ``AckQueue``, the ``EventBus``, the ``ControlReplyQueue``, shutdown). Built before anything
/// that queues, so every part gets its queue at construction.
final class SocketWakeup: Sendable {
    /// The pipe the socket thread polls.
    let pipe: WakePipe
    /// Set when the pipe is closed; a late sender checks it under the lock so it never writes to
    /// a closed (maybe reused) descriptor.
    private let closed = Mutex(false)

    init() throws {
        pipe = try WakePipe()
    }

    /// Wakes the socket thread (nothing once closed).
    func wake() {
        closed.withLock { closed in if !closed { pipe.wake() } }
    }

    /// Closes the pipe once the socket thread has ended (again: nothing).
    func close() {
        closed.withLock { closed in
            guard !closed else { return }
            closed = true
            pipe.close()
        }
    }
}

/// Items handed to the socket thread by other threads, of one role; the socket thread takes them
/// all whenever its ``SocketWakeup`` fires.
final class SocketQueue<Item: Sendable>: Sendable {
    private let items = Mutex<[Item]>([])
    /// The socket thread's wake-up, fired on every post.
    let wakeup: SocketWakeup

    init(wakeup: SocketWakeup) {
        self.wakeup = wakeup
    }

    /// Queues `item` and wakes the socket thread (any thread).
    func post(_ item: Item) {
        items.withLock { $0.append(item) }
        wakeup.wake()
    }

    /// Takes everything queued (on the socket thread).
    func take() -> [Item] {
        items.withLock { items in
            defer { items.removeAll(keepingCapacity: true) }
            return items
        }
    }
}

/// The ZeroMQ ingest socket's ``AckDestination``: the commit thread queues each group's answers
/// here, and the socket thread sends each to the peer and request its ``AckRoute`` names.
final class AckQueue: AckDestination {
    private let queue: SocketQueue<[CommittedBatch]>

    init(wakeup: SocketWakeup) {
        queue = SocketQueue(wakeup: wakeup)
    }

    /// Queues the answers of one group (called on the commit thread).
    func deliver(_ answers: [CommittedBatch]) {
        queue.post(answers)
    }

    /// Takes the answers queued (on the socket thread), oldest group first.
    func take() -> [[CommittedBatch]] { queue.take() }
}

/// Control replies on their way to the control socket: the control thread answers, the socket
/// thread sends.
final class ControlReplyQueue: Sendable {
    /// One reply: the requester's routing envelope and the reply body.
    struct Reply: Sendable {
        var envelope: [[UInt8]]
        var body: [UInt8]
    }

    private let queue: SocketQueue<Reply>

    init(wakeup: SocketWakeup) {
        queue = SocketQueue(wakeup: wakeup)
    }

    /// Queues a control reply for the requester behind `envelope` (any thread).
    func reply(to envelope: [[UInt8]], _ body: [UInt8]) {
        queue.post(Reply(envelope: envelope, body: body))
    }

    /// Takes the replies queued (on the socket thread).
    func take() -> [Reply] { queue.take() }
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
