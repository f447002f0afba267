import FerryProtocol
import FerryStorage
import Logging

extension CommitPipeline {
    /// A quarantined event of the group, waiting for its write: where its answer is.
    struct QuarantinePending {
        /// The index of its batch's answer in the group's results.
        var batch: Int
        /// The index of its entry in that answer.
        var entry: Int
        /// What is written.
        var event: QuarantinedEvent
    }

    /// Decides what becomes of an event the quality gate quarantines: consent first (a blocked or
    /// local-only event is answered as it would be without a plan: nothing is kept), then the
    /// id window (the log already holds it: `duplicate`, as a resend after a replay is); else
    /// it is answered `accepted`/`quarantined` (published on the bus `quarantined` topic) and
    /// returned to be written with the group. It is never remembered in the id window: a replay
    /// must store it.
    func judgeQuarantine(
        _ header: EventHeader, frame: [UInt8], violations: String, origin: [UInt8], book: Book, now: UInt64,
        into answer: inout CommittedBatch
    ) -> QuarantinedEvent? {
        if book.isRecent(header.id) {
            answer.append(AckEntry(id: header.id, status: .duplicate), frame: frame)
            return nil
        }
        switch book.consent(ConsentKey(header)) {
        case .blocked(let reason):
            answer.append(AckEntry(id: header.id, status: .blocked, reason: reason), frame: frame,
                          note: .init(topic: .blocked, reason: reason.description))
            return nil
        case .suppressed:
            answer.append(AckEntry(id: header.id, status: .suppressed, reason: .localOnly), frame: frame,
                          note: .init(topic: .suppressed, reason: RejectReason.localOnly.description))
            return nil
        case .store, .hold:
            guard quarantine != nil else {
                answer.append(AckEntry(id: header.id, status: .rejected, reason: .storage), frame: frame)
                return nil
            }
            answer.append(AckEntry(id: header.id, status: .accepted, reason: .quarantined), frame: frame,
                          note: .init(topic: .quarantined, reason: RejectReason.planViolation.description))
            return QuarantinedEvent(id: header.id, quarantinedAt: now, frame: frame, origin: origin, violations: violations)
        }
    }

    /// Writes the group's quarantined events durably (before any ack of the group leaves); an
    /// event whose write failed is answered `rejected` (`full` when the quarantine or the disk is
    /// full, else `storage`): retryable, nothing kept.
    func storeQuarantined(_ pending: [QuarantinePending], in results: inout [CommittedBatch]) {
        guard let quarantine else { return }
        let outcomes = quarantine.add(pending.map(\.event))
        for (item, error) in zip(pending, outcomes) {
            guard let error else { continue }
            let reason: RejectReason = error.code == .noSpace ? .full : .storage
            results[item.batch].entries[item.entry] = AckEntry(id: item.event.id, status: .rejected, reason: reason)
            results[item.batch].notes[item.entry] = nil
            logger.error("could not quarantine an event", metadata: ["id": "\(item.event.id)", "error": "\(error)"])
        }
    }
}
