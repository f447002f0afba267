import FerryProtocol
import FerryStorage

extension DeadLetter {
    /// Creates a dead letter for `batch`, which `sink` refused with `error`.
    package init(sink: String, batch: DeliveryBatch, error: SinkError, reason: String, attempts: Int,
                createdAt: UInt64 = WallClock.unixMilliseconds()) {
        self.init(
            id: batch.idempotencyKey, sink: sink, createdAt: createdAt, reason: reason, error: error.message,
            upstreamStatus: error.upstreamStatus, upstreamBody: error.upstreamBody, attempts: attempts,
            idempotencyKey: batch.idempotencyKey, consent: batch.consent, events: batch.events)
    }

    /// The batch to hand to the sink again.
    package var batch: DeliveryBatch { DeliveryBatch(events: events, consent: consent) }
}
