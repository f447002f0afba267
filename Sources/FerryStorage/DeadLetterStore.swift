import FerryProtocol
import Foundation

/// A batch a sink refused for good (or kept failing past its retry deadline), kept on disk so it
/// can be looked at, replayed exactly or dropped on purpose, never silently lost.
///
/// File `<data>/deadletter/<sink>/<id>.json`: a JSON object with `id`, `sink`, `created_at` (ms),
/// `reason` (`permanent`, `max_elapsed`, `rejected`), `error`, `upstream_status`, `upstream_body` (an excerpt),
/// `attempts`, `idempotency_key`, `consent`, `event_count`, `events` (the events as the file sink
/// writes them) and `frames` (`id`, `accepted_at`, `frame`: the stored event frame in base64, and
/// `metadata`: what the agent recorded with it, such as the origin, in base64, when there is any;
/// together an exact replay). A letter without `metadata` (written before it was kept) replays
/// without it: its events have no origin.
package struct DeadLetter: Sendable {
    /// The file's name without `.json`: the batch's idempotency key (its first event's UUIDv7 and
    /// its size), so ids sort by time and writing the same batch again replaces its file.
    package var id: String
    /// The sink that refused it.
    package var sink: String
    /// When it was dead-lettered (ms since the Unix epoch).
    package var createdAt: UInt64
    /// `permanent` (the sink said retrying cannot help), `max_elapsed` (retries ran out) or
    /// `rejected` (one event the sink can never deliver, taken out of its batch before sending).
    package var reason: String
    /// The last error's message.
    package var error: String
    /// The upstream's response status, if there was a response.
    package var upstreamStatus: Int?
    /// The start of the upstream's response body, if there was one.
    package var upstreamBody: String?
    /// Delivery attempts made.
    package var attempts: Int
    /// The batch's idempotency key as sent.
    package var idempotencyKey: String
    /// The consent stamp the batch carried.
    package var consent: [String: String]
    /// The events, exactly as stored.
    package var events: [StoredEvent]

    /// Longest upstream body excerpt kept.
    package static let maxBodyExcerpt = 4096

    /// Creates a dead letter.
    package init(
        id: String, sink: String, createdAt: UInt64, reason: String, error: String, upstreamStatus: Int?,
        upstreamBody: String?, attempts: Int, idempotencyKey: String, consent: [String: String], events: [StoredEvent]
    ) {
        self.id = id
        self.sink = sink
        self.createdAt = createdAt
        self.reason = reason
        self.error = error
        self.upstreamStatus = upstreamStatus
        self.upstreamBody = upstreamBody.map { String($0.prefix(Self.maxBodyExcerpt)) }
        self.attempts = attempts
        self.idempotencyKey = idempotencyKey
        self.consent = consent
        self.events = events
    }

    /// The JSON document.
    package func encoded() throws -> [UInt8] {
        var eventObjects: [Any] = []
        var frames: [Any] = []
        for event in events {
            var line: [UInt8] = []
            JSONWriter.appendLine(for: event, to: &line)
            eventObjects.append((try? JSONSerialization.jsonObject(with: Data(line))) ?? NSNull())
            var entry: [String: Any] = [
                "id": event.decodedID.description, "accepted_at": Int(event.acceptedAt),
                "frame": Data(event.frame).base64EncodedString(),
            ]
            let metadata = event.metadata.encoded
            if !metadata.isEmpty { entry["metadata"] = Data(metadata).base64EncodedString() }
            frames.append(entry)
        }
        let document: [String: Any] = [
            "id": id, "sink": sink, "created_at": Int(createdAt), "reason": reason, "error": error,
            "upstream_status": upstreamStatus ?? NSNull(), "upstream_body": upstreamBody ?? NSNull(),
            "attempts": attempts, "idempotency_key": idempotencyKey, "consent": consent,
            "event_count": events.count, "events": eventObjects, "frames": frames,
        ]
        return Array(try JSONSerialization.data(withJSONObject: document, options: [.sortedKeys, .prettyPrinted]))
    }

    /// Reads a document written by ``encoded()``; throws ``StorageError`` (`corrupt`) if it is not one.
    package init(decoding bytes: [UInt8], path: String) throws {
        func bad(_ what: String) -> StorageError { StorageError(code: .corrupt, message: "dead letter \(path): \(what)") }
        guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any] else {
            throw bad("not a JSON object")
        }
        func int(_ key: String) -> Int? { (object[key] as? NSNumber)?.intValue }
        guard let id = object["id"] as? String, let sink = object["sink"] as? String,
              let frames = object["frames"] as? [[String: Any]] else { throw bad("missing id, sink or frames") }
        self.id = id
        self.sink = sink
        createdAt = UInt64(max(0, int("created_at") ?? 0))
        reason = object["reason"] as? String ?? ""
        error = object["error"] as? String ?? ""
        upstreamStatus = int("upstream_status")
        upstreamBody = object["upstream_body"] as? String
        attempts = int("attempts") ?? 0
        idempotencyKey = object["idempotency_key"] as? String ?? id
        consent = object["consent"] as? [String: String] ?? [:]
        events = try frames.enumerated().map { index, entry in
            guard let text = entry["frame"] as? String, let data = Data(base64Encoded: text) else {
                throw bad("frames[\(index)] has no base64 frame")
            }
            let acceptedAt = UInt64(max(0, (entry["accepted_at"] as? NSNumber)?.intValue ?? 0))
            // Absent in letters written before the metadata was kept: replayed without an origin.
            var metadata: [UInt8] = []
            if let text = entry["metadata"] as? String {
                guard let decoded = Data(base64Encoded: text) else { throw bad("frames[\(index)] has a metadata that is not base64") }
                metadata = Array(decoded)
            }
            return StoredEvent(position: LogPosition(segment: 0, offset: 0),
                               size: LogRecord.framedSize(frameSize: data.count, metadataSize: metadata.count),
                               acceptedAt: acceptedAt, frame: Array(data),
                               metadata: metadata.withUnsafeBytes { RecordMetadata(decoding: $0) })
        }
    }
}

/// The dead-letter directory `<data>/deadletter/<sink>/`. Files are written atomically (temp
/// file, fsync, rename, directory fsync) and only removed by a successful replay or `drop`.
package struct DeadLetterStore: Sendable {
    /// `<data>/deadletter`.
    package let directory: String

    /// The store of the agent using `dataDirectory`.
    package init(dataDirectory: String) {
        directory = dataDirectory + "/deadletter"
    }

    /// Whether `id` can name a dead letter (no path separators or dot files).
    package static func isValidID(_ id: String) -> Bool {
        !id.isEmpty && id.count <= 200 && !id.hasPrefix(".")
            && id.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == ".") }
    }

    /// The file of dead letter `id` of `sink`.
    package func path(sink: String, id: String) -> String { directory + "/" + sink + "/" + id + ".json" }

    /// Writes `letter` durably.
    package func write(_ letter: DeadLetter) throws {
        let sinkDirectory = directory + "/" + letter.sink
        try FileIO.makeDirectory(sinkDirectory, mode: 0o700)
        try FileIO.writeAtomically(try letter.encoded(), to: path(sink: letter.sink, id: letter.id))
    }

    /// The sinks that have a dead-letter directory.
    package func sinks() throws -> [String] {
        try FileIO.listDirectory(directory).filter { CursorStore.isValidSinkName($0) }.sorted()
    }

    /// The ids of `sink`'s dead letters, oldest first.
    package func ids(sink: String) throws -> [String] {
        try FileIO.listDirectory(directory + "/" + sink)
            .filter { $0.hasSuffix(".json") && !$0.hasPrefix(".") }
            .map { String($0.dropLast(5)) }.sorted()
    }

    /// The sinks holding a dead letter `id` (normally one).
    package func sinks(holding id: String) throws -> [String] {
        guard Self.isValidID(id) else { return [] }
        return try sinks().filter { FileManager.default.fileExists(atPath: path(sink: $0, id: id)) }
    }

    /// Reads dead letter `id` of `sink`; `nil` if there is none.
    package func load(sink: String, id: String) throws -> DeadLetter? {
        guard Self.isValidID(id), CursorStore.isValidSinkName(sink) else { return nil }
        let path = path(sink: sink, id: id)
        guard let bytes = try FileIO.readFile(path) else { return nil }
        return try DeadLetter(decoding: bytes, path: path)
    }

    /// Every dead letter (by sink and id) holding events for which `matches` is true, with the
    /// ids of those events. A dead letter that cannot be read is skipped.
    package func letters(holding matches: (StoredEvent) -> Bool) throws -> [(sink: String, id: String, events: [EventID])] {
        var found: [(sink: String, id: String, events: [EventID])] = []
        for sink in try sinks() {
            for id in try ids(sink: sink) {
                guard let letter = try? load(sink: sink, id: id) else { continue }
                let covered = letter.events.filter(matches).map(\.decodedID)
                if !covered.isEmpty { found.append((sink, id, covered)) }
            }
        }
        return found
    }

    /// Removes the events whose ids are in `events` from dead letter `id` of `sink`: the file is
    /// rewritten atomically without them, or deleted durably if nothing else is left. Returns how
    /// many events were removed (0 when none is there any more, so calling it again is harmless).
    @discardableResult
    package func remove(events: Set<EventID>, sink: String, id: String) throws -> Int {
        guard let letter = try load(sink: sink, id: id) else { return 0 }
        var kept = letter
        kept.events.removeAll { events.contains($0.decodedID) }
        let removed = letter.events.count - kept.events.count
        guard removed > 0 else { return 0 }
        if kept.events.isEmpty {
            try remove(sink: sink, id: id)
        } else {
            try write(kept)
        }
        return removed
    }

    /// Deletes dead letter `id` of `sink` durably; false if it did not exist.
    @discardableResult
    package func remove(sink: String, id: String) throws -> Bool {
        guard Self.isValidID(id), CursorStore.isValidSinkName(sink) else { return false }
        let path = path(sink: sink, id: id)
        guard FileManager.default.fileExists(atPath: path) else { return false }
        try FileIO.unlink(path)
        try FileIO.syncDirectory(directory + "/" + sink)
        return true
    }
}
