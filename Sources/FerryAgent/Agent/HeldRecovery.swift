import FerryProtocol
import FerryStorage
import Logging

/// Start-up completion of a release of held events that a crash cut short.
///
/// A grant saves the consent state, then appends the category's held events to the queue
/// (committed), then erases them from the held area. A crash (or power cut) after the state was
/// saved and before the release finished left events in the held area whose category is granted:
/// nothing would ever release them again, and events acked `accepted` were never delivered (the
/// power-cut explorer found it: docs/FAULTS.md section 7). At start, before anything is accepted,
/// every held event the consent state would now store is appended to the queue — unless the queue
/// already holds it (the crash came after the queue commit, before the held erasure) — and then
/// erased from the held area.
enum HeldRecovery {
    /// Returns how many events were queued and how many were already in the queue.
    static func finishRelease(
        held: SegmentedLog, queue: SegmentedLog, queuedIDs: Set<EventID>, engine: ConsentEngine
    ) throws -> (queued: Int, alreadyQueued: Int) {
        var release: [StoredEvent] = []
        var position = held.startPosition
        while true {
            let (batch, next) = try held.read(from: position, maxEvents: 4096, maxBytes: 4 << 20)
            for event in batch where !event.isErased {
                guard let header = try? event.header(), engine.decide(header) == .store else { continue }
                release.append(event)
            }
            if batch.isEmpty || next == position { break }
            position = next
        }
        guard !release.isEmpty else { return (0, 0) }
        let missing = release.filter { !queuedIDs.contains($0.decodedID) }
        if !missing.isEmpty {
            let writer = try LogWriter(log: queue)
            for event in missing { try writer.append(frame: event.frame, acceptedAt: event.acceptedAt) }
            try writer.commit()
        }
        let ids = Set(release.map(\.decodedID))
        _ = try held.erase(from: held.startPosition) { ids.contains($0.decodedID) }
        return (missing.count, release.count - missing.count)
    }
}
