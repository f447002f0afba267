import Foundation

extension Targets {
    /// `4.delivery.jetstream_batched`: the JetStream sink with 100 events per message (one node,
    /// the same pre-written queue as the other delivery rows) ÷ the run's maximum ingest at 256 B.
    func batchedDeliveryRow() -> [String: Any] {
        let ingest = summary["ingest"] as? [[String: Any]] ?? []
        let maxIngest = ingest.filter { $0["size"] as? Int == 256 }.compactMap { d($0["ferry_median"]) }.max()
        let delivery = summary["delivery"] as? [String: Any] ?? [:]
        let rate = d((delivery["jetstream_batched"] as? [String: Any])?["median"])
        return row("4.delivery.jetstream_batched", "JetStream sink, 100 events/message ÷ max ingest (256 B)",
                   measured: "\(n(rate)) vs \(n(maxIngest)) events/s", ratio: rate.flatMap { r in maxIngest.map { r / $0 } }, .atLeast(1))
    }
}
