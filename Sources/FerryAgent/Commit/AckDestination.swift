/// Where the answers of one ingest source go.
///
/// Each ``IngestBatch`` names its source's destination (``IngestBatch/replyTo``) and carries an
/// ``AckRoute`` only that source reads; the commit pipeline hands each group's answers to the
/// destinations they came from, once per group and destination, and knows nothing of sockets or
/// request ids. An ingest path that answers on its own thread (the ZeroMQ socket of
/// `FerryZeroMQIngest`) passes a destination of its own to ``IngestGateway``; the others get the
/// gateway's (a completion per request), without touching the commit code.
package protocol AckDestination: AnyObject, Sendable {
    /// Takes the answers of one group to the batches that named this destination, in arrival
    /// order. Called on the commit thread after the group's writes settled (before them only
    /// with the planted ack-before-fdatasync bug); must not block: queue them and wake the
    /// source's own thread.
    func deliver(_ answers: [CommittedBatch])
}

/// How an ingest source finds the sender of a batch again. Opaque to the commit pipeline, which
/// only carries it from the ``IngestBatch`` to its ``CommittedBatch``; each source gives the two
/// fields its own meaning (the ZeroMQ path's: `AckRoute(peer:requestID:version:)`).
package struct AckRoute: Equatable, Sendable {
    /// Source-defined bytes (the ZeroMQ source: the client connection's routing id).
    package var address: [UInt8]
    /// A source-defined number (the ZeroMQ source: the request id and the protocol version).
    package var tag: UInt64

    /// A route of `address` and `tag`.
    package init(address: [UInt8], tag: UInt64) {
        self.address = address
        self.tag = tag
    }
}
