#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol
import FerryStorage
import Foundation

/// A consent change and every one of its effects, written durably before any of them is carried
/// out (`<data>/consent/pending`): the write-ahead record that makes a change and its effects one
/// durable unit.
///
/// Once the journal is on disk the change has happened; until it is deleted its effects may be
/// unfinished, and ``ConsentWorker/finish(_:writer:)`` (run at start before anything is accepted
/// or delivered, before the next consent request, and about once a second) carries them out
/// again. Every step is idempotent and works from what the journal recorded, never from a search
/// of the disk by content: the exact positions and erased images of the records to erase, the
/// dead letters to rewrite, the held records to release and the log position after which released
/// events were appended, and the exact `consent_updated` event to queue.
struct ConsentJournal: Codable, Sendable {
    var version = 1
    /// The audit entry to append (nil for the agent's own hold expiry, which is not a change of
    /// the state).
    var entry: AuditEntry?
    /// The state to persist (with ``entry`` as its audit head).
    var state: PersistedConsent?
    /// The change's name, old and new values, for the bus and the logs (`hold_expired` for expiry).
    var change: String
    var old: String
    var new: String
    /// Records to erase in the queue and in the held area.
    var eraseQueued: [ErasedRecord] = []
    var eraseHeld: [ErasedRecord] = []
    /// Dead letters holding covered events, and those events' ids.
    var deadLetters: [DeadLetterErasure] = []
    /// Quarantined events the change covers (their ids), deleted from the quarantine.
    var quarantine: [String] = []
    /// Held records to move to the queue (a grant); each is appended at most once after
    /// ``queueEnd`` and then erased from the held area.
    var release: [ErasedRecord] = []
    /// The end of the queue when the journal was written: events this change appends (released
    /// ones and `consent_updated`) are looked for after it before they are appended.
    var queueEnd: LogPosition
    /// The `consent_updated` event to queue, if the upstream may receive anything.
    var consentUpdated: QueuedEvent?
    /// What the change erased, for the reply and the `purged` topic (nil: nothing to erase).
    var purged: PurgeReport?
    /// A `forget`'s upstream erasure: the request and the sinks it is for, added to the erasure
    /// outbox by the change (docs/CONSENT.md, "Erasure upstream"). It holds the user id until the
    /// journal is deleted.
    var erasure: UpstreamErasure?
    /// An upstream erasure's outcome at one sink, settled in the outbox by the change.
    var erasureOutcome: ErasureOutcome?

    /// The upstream erasure a `forget` records.
    struct UpstreamErasure: Codable, Sendable, Hashable {
        var request: SinkErasure
        var sinks: [String]
    }

    /// Dead letter `id` of `sink` and the covered events in it.
    struct DeadLetterErasure: Codable, Sendable, Hashable {
        var sink: String
        var id: String
        var events: [String]
    }

    /// An event the agent itself queues, exactly as it will be stored.
    struct QueuedEvent: Codable, Sendable, Hashable {
        var id: String
        var acceptedAt: UInt64
        var frame: [UInt8]

        private enum CodingKeys: String, CodingKey { case id, acceptedAt = "accepted_at", frame }

        init(id: String, acceptedAt: UInt64, frame: [UInt8]) {
            self.id = id
            self.acceptedAt = acceptedAt
            self.frame = frame
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            id = try container.decode(String.self, forKey: .id)
            acceptedAt = try container.decode(UInt64.self, forKey: .acceptedAt)
            guard let data = Data(base64Encoded: try container.decode(String.self, forKey: .frame)) else {
                throw DecodingError.dataCorruptedError(forKey: .frame, in: container, debugDescription: "not base64")
            }
            frame = Array(data)
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(id, forKey: .id)
            try container.encode(acceptedAt, forKey: .acceptedAt)
            try container.encode(Data(frame).base64EncodedString(), forKey: .frame)
        }
    }

    private enum CodingKeys: String, CodingKey {
        case version, entry, state, change, old, new, eraseQueued = "erase_queued", eraseHeld = "erase_held"
        case deadLetters = "dead_letters", release, queueEnd = "queue_end", consentUpdated = "consent_updated", purged
        case erasure, erasureOutcome = "erasure_outcome", quarantine
    }

    init(entry: AuditEntry?, state: PersistedConsent?, change: String, old: String, new: String, queueEnd: LogPosition) {
        self.entry = entry
        self.state = state
        self.change = change
        self.old = old
        self.new = new
        self.queueEnd = queueEnd
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        version = try container.decode(Int.self, forKey: .version)
        entry = try container.decodeIfPresent(AuditEntry.self, forKey: .entry)
        state = try container.decodeIfPresent(PersistedConsent.self, forKey: .state)
        change = try container.decode(String.self, forKey: .change)
        old = try container.decode(String.self, forKey: .old)
        new = try container.decode(String.self, forKey: .new)
        eraseQueued = try container.decode([ErasedRecord].self, forKey: .eraseQueued)
        eraseHeld = try container.decode([ErasedRecord].self, forKey: .eraseHeld)
        deadLetters = try container.decode([DeadLetterErasure].self, forKey: .deadLetters)
        release = try container.decode([ErasedRecord].self, forKey: .release)
        let end = try container.decode([Int64].self, forKey: .queueEnd)
        guard end.count == 2, end[0] >= 0 else {
            throw DecodingError.dataCorruptedError(forKey: .queueEnd, in: container, debugDescription: "not [segment, offset]")
        }
        queueEnd = LogPosition(segment: UInt64(end[0]), offset: end[1])
        consentUpdated = try container.decodeIfPresent(QueuedEvent.self, forKey: .consentUpdated)
        purged = try container.decodeIfPresent(PurgeReport.self, forKey: .purged)
        erasure = try container.decodeIfPresent(UpstreamErasure.self, forKey: .erasure)
        erasureOutcome = try container.decodeIfPresent(ErasureOutcome.self, forKey: .erasureOutcome)
        quarantine = try container.decodeIfPresent([String].self, forKey: .quarantine) ?? []
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(version, forKey: .version)
        try container.encodeIfPresent(entry, forKey: .entry)
        try container.encodeIfPresent(state, forKey: .state)
        try container.encode(change, forKey: .change)
        try container.encode(old, forKey: .old)
        try container.encode(new, forKey: .new)
        try container.encode(eraseQueued, forKey: .eraseQueued)
        try container.encode(eraseHeld, forKey: .eraseHeld)
        try container.encode(deadLetters, forKey: .deadLetters)
        try container.encode(release, forKey: .release)
        try container.encode([Int64(queueEnd.segment), queueEnd.offset], forKey: .queueEnd)
        try container.encodeIfPresent(consentUpdated, forKey: .consentUpdated)
        try container.encodeIfPresent(purged, forKey: .purged)
        try container.encodeIfPresent(erasure, forKey: .erasure)
        try container.encodeIfPresent(erasureOutcome, forKey: .erasureOutcome)
        if !quarantine.isEmpty { try container.encode(quarantine, forKey: .quarantine) }
    }
}

/// The journal's file, `<data>/consent/pending`.
struct ConsentJournalFile {
    let path: String

    /// The unfinished change, if one is on disk. A journal that cannot be read stops the agent
    /// (as a damaged `state.json` does): guessing could leave refused events behind. A leftover
    /// temporary file (a crash while the journal was being written: the change never happened)
    /// is removed.
    func load() throws -> ConsentJournal? {
        try FileIO.unlink(path + ".tmp")
        guard let bytes = try FileIO.readFile(path) else { return nil }
        do {
            return try JSONDecoder().decode(ConsentJournal.self, from: Data(bytes))
        } catch {
            throw AgentError(code: .corrupt, message: "unfinished consent change \(path) is unreadable: \(error)")
        }
    }

    /// Writes the journal durably: temp file, fsync, rename, fsync of the directory. The change
    /// happened exactly when the rename is durable.
    func write(_ journal: ConsentJournal) throws {
        let temporary = path + ".tmp"
        let bytes = Array(try JSONEncoder().encode(journal))
        let fd = try FileIO.open(temporary, O_WRONLY | O_CREAT | O_TRUNC)
        do {
            try bytes.withUnsafeBytes { try FileIO.pwriteAll(fd, $0, at: 0, path: temporary) }
            if PlantedBug.active == .renameBeforeFsync {
                // Planted on purpose (docs/FAULTS.md section 8), as in FileIO.writeAtomically.
                _ = try FileIO.call("rename", path) { rename(temporary, path) }
                try FileIO.syncDirectory(FileIO.parent(of: path))
            }
            try FileIO.fsync(fd, path: temporary)
        } catch {
            close(fd)
            throw error
        }
        close(fd)
        if PlantedBug.active == .renameBeforeFsync { return }
        try CrashPoints.reach("consent.intent.written")
        _ = try FileIO.call("rename", path) { rename(temporary, path) }
        try FileIO.syncDirectory(FileIO.parent(of: path))
    }

    /// Deletes the journal durably: the change and all its effects are complete.
    func delete() throws {
        try FileIO.unlink(path)
        try FileIO.syncDirectory(FileIO.parent(of: path))
    }
}
