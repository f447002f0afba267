import FerryProtocol
import FerryStorage

extension ConsentWorker {
    /// The quarantined events an erasure covers (`matches`: the same test as the queue's), by
    /// id. An entry that cannot be read is left alone (it is reported at start; `ferry
    /// quarantine drop` removes it).
    func planQuarantineErasure(matching matches: (StoredEvent) -> Bool) throws -> [String] {
        guard let quarantine else { return [] }
        var covered: [String] = []
        for id in try quarantine.ids() {
            guard let entry = try? quarantine.load(id) else { continue }
            let event = StoredEvent(position: LogPosition(segment: 0, offset: 0),
                                    size: LogRecord.framedSize(frameSize: entry.frame.count, metadataSize: entry.origin.count),
                                    acceptedAt: entry.quarantinedAt, frame: entry.frame,
                                    metadata: entry.origin.withUnsafeBytes { RecordMetadata(decoding: $0) })
            if matches(event) { covered.append(id.description) }
        }
        return covered
    }

    /// Deletes the quarantined events `journal` covers (those already gone are skipped, so a
    /// change finished again after a crash deletes each once). Crash point `consent.quarantine`.
    func finishQuarantineErasure(_ journal: ConsentJournal) throws {
        guard let quarantine, !journal.quarantine.isEmpty else { return }
        if try quarantine.remove(journal.quarantine.compactMap(EventID.init)) > 0 {
            try CrashPoints.reach("consent.quarantine")
        }
    }
}
