import FerryAgent
import FerryProtocol

/// The ZeroMQ path's ``AckDestination``: the commit thread queues each group's answers here, and
/// the path's socket thread sends each to the peer and request its ``AckRoute`` names.
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
