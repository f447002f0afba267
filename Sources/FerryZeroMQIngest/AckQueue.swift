#if canImport(Glibc)
import Glibc
#endif
import FerryAgent
import FerryProtocol
import FerryThreads
import Synchronization

/// The ZeroMQ path's ``AckDestination``: the commit thread queues each group's answers here, and
/// the path's socket thread sends each to the peer and request its ``AckRoute`` names.
///
/// The socket thread commits a round itself when no commit is in flight (``IngestGateway/commit(_:)``):
/// its answers are then queued here on the socket thread, without a wake-up, and sent as soon as
/// the commit returns.
final class AckQueue: AckDestination {
    private let queue: SocketQueue<[CommittedBatch]>
    /// The socket thread (`pthread_t`; 0 until it calls ``ownedByCurrentThread()``).
    private let socketThread = Atomic<UInt>(0)

    init(wakeup: SocketWakeup) {
        queue = SocketQueue(wakeup: wakeup)
    }

    /// Records the calling thread as the socket thread (once, when it starts).
    func ownedByCurrentThread() {
        socketThread.store(UInt(pthread_self()), ordering: .releasing)
    }

    /// Queues the answers of one group (on the thread that committed it); wakes the socket thread
    /// unless it is the caller.
    func deliver(_ answers: [CommittedBatch]) {
        queue.post(answers, wake: socketThread.load(ordering: .acquiring) != UInt(pthread_self()))
    }

    /// Takes the answers queued (on the socket thread), oldest group first.
    func take() -> [[CommittedBatch]] { queue.take() }
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
