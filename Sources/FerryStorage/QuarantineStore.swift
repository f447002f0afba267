#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol
import Synchronization

/// One event kept in the quarantine: the frame as judged (redacted, never the raw one), what it
/// broke, when, and who sent it.
package struct QuarantinedEvent: Sendable, Equatable {
    /// The event's id (the entry's name).
    package var id: EventID
    /// When it was quarantined (ms since the Unix epoch).
    package var quarantinedAt: UInt64
    /// The judged event frame (after redaction): what is stored in the log if it is released.
    package var frame: [UInt8]
    /// The sender's origin, as encoded record metadata (empty when unknown).
    package var origin: [UInt8]
    /// The violations, a JSON array of objects `{"event","rule","path","message"}`.
    package var violations: String

    /// Creates an entry.
    package init(id: EventID, quarantinedAt: UInt64, frame: [UInt8], origin: [UInt8], violations: String) {
        self.id = id
        self.quarantinedAt = quarantinedAt
        self.frame = frame
        self.origin = origin
        self.violations = violations
    }

    static let magic = Array("FERRYQ1\n".utf8)
    /// magic, quarantinedAt u64, frame u32, origin u32, violations u32.
    static let headerSize = 8 + 8 + 4 + 4 + 4

    /// The file's bytes: `FERRYQ1\n`, `quarantinedAt:u64le`, `frameLength:u32le`,
    /// `originLength:u32le`, `violationsLength:u32le`, the three blobs, then `crc32c:u32le` of
    /// everything before it.
    package func encoded() -> [UInt8] {
        var out = Self.magic
        out.reserveCapacity(Self.headerSize + frame.count + origin.count + violations.utf8.count + 4)
        appendLE(quarantinedAt, to: &out)
        appendLE(UInt32(frame.count), to: &out)
        appendLE(UInt32(origin.count), to: &out)
        appendLE(UInt32(violations.utf8.count), to: &out)
        out += frame
        out += origin
        out += Array(violations.utf8)
        appendLE(CRC32C.checksum(out), to: &out)
        return out
    }

    /// Reads a file written by ``encoded()``; throws ``StorageError`` (`corrupt`) naming `path`
    /// and what is wrong.
    package init(decoding bytes: [UInt8], path: String) throws {
        func bad(_ what: String) -> StorageError { StorageError(code: .corrupt, message: "quarantined event \(path): \(what)") }
        guard bytes.count >= Self.headerSize + 4, Array(bytes.prefix(8)) == Self.magic else { throw bad("not a quarantine entry") }
        let frameCount = Int(readLE(bytes, at: 16) as UInt32)
        let originCount = Int(readLE(bytes, at: 20) as UInt32)
        let violationsCount = Int(readLE(bytes, at: 24) as UInt32)
        let end = Self.headerSize + frameCount + originCount + violationsCount
        guard end + 4 == bytes.count else { throw bad("\(bytes.count) bytes, the header says \(end + 4)") }
        guard CRC32C.checksum(Array(bytes[..<end])) == (readLE(bytes, at: end) as UInt32) else { throw bad("checksum mismatch") }
        guard frameCount >= 16 else { throw bad("no event frame") }
        quarantinedAt = readLE(bytes, at: 8)
        frame = Array(bytes[Self.headerSize..<(Self.headerSize + frameCount)])
        origin = Array(bytes[(Self.headerSize + frameCount)..<(Self.headerSize + frameCount + originCount)])
        violations = String(decoding: bytes[(end - violationsCount)..<end], as: UTF8.self)
        id = EventID(bytes: frame)
    }
}

/// The quarantine area `<data>/quarantine/`: one file `<event id>.q` per event that broke the
/// tracking plan under the `quarantine` action, written durably before the event is acked and
/// kept until it is replayed (released into the log), dropped, or erased by consent or `forget`.
///
/// A write is a temp file (`.<id>.tmp`), its `fdatasync`, a rename and one fsync of the directory
/// for the group; `kill -9` anywhere leaves either no entry (the ack was not sent: the client
/// sends again) or a whole one, and a leftover temp file is removed on ``open()``. The same event
/// quarantined twice (a resend) replaces its file. The area is bounded (``maxBytes``): beyond it
/// an add fails with ``StorageError/Code/noSpace``, answered like a full disk (retryable, nothing
/// lost). An entry that cannot be read is reported and skipped, never fatal.
///
/// `Sendable`: the agent's commit thread adds, its control thread replays and drops; each call
/// takes the lock for its file work (all of it blocking: call it off the cooperative pool).
package final class QuarantineStore: Sendable {
    /// `<data>/quarantine`.
    package let directory: String
    /// The most bytes the entries may hold together.
    package let maxBytes: Int

    private struct State {
        /// Bytes of each readable entry, by id.
        var sizes: [EventID: Int] = [:]
        var bytes = 0
    }

    private let state = Mutex(State())

    /// The store of the agent using `dataDirectory`, holding at most `maxBytes`.
    package init(dataDirectory: String, maxBytes: Int = 64 << 20) {
        directory = dataDirectory + "/quarantine"
        self.maxBytes = maxBytes
    }

    /// The file name of `id`'s entry.
    package static func fileName(_ id: EventID) -> String { id.description + ".q" }

    /// The path of `id`'s entry.
    package func path(_ id: EventID) -> String { directory + "/" + Self.fileName(id) }

    /// Checks the directory if there is one (made on the first quarantined event), removes temp
    /// files a crash left behind and counts the entries. Returns the problems found (unreadable
    /// entries: reported and skipped).
    @discardableResult
    package func open() throws -> [String] {
        try PathSafety.checkDirectory(directory)
        try PathSafety.checkContents(of: directory)
        var problems: [String] = []
        var sizes: [EventID: Int] = [:]
        var removedTemp = false
        for name in try FileIO.listDirectory(directory) {
            if name.hasPrefix("."), name.hasSuffix(".tmp") {
                try FileIO.unlink(directory + "/" + name)
                removedTemp = true
                continue
            }
            guard name.hasSuffix(".q"), let id = EventID(String(name.dropLast(2))) else { continue }
            do {
                guard let bytes = try FileIO.readFile(directory + "/" + name) else { continue }
                _ = try QuarantinedEvent(decoding: bytes, path: directory + "/" + name)
                sizes[id] = bytes.count
            } catch {
                problems.append("\(error)")
            }
        }
        if removedTemp { try FileIO.syncDirectory(directory) }
        state.withLock {
            $0.sizes = sizes
            $0.bytes = sizes.values.reduce(0, +)
        }
        return problems
    }

    /// How many readable entries the area holds.
    package var count: Int { state.withLock { $0.sizes.count } }

    /// The bytes they hold.
    package var bytes: Int { state.withLock { $0.bytes } }

    /// Stores `events` durably (replacing an entry of the same id). Returns one result per event,
    /// in order: nil when stored, else the error (``StorageError/Code/noSpace`` when the area is
    /// full or the disk is). Crash points: `quarantine.temp_synced` (a temp file is durable, not
    /// renamed), `quarantine.renamed` (renamed, the directory not synced yet).
    package func add(_ events: [QuarantinedEvent]) -> [StorageError?] {
        state.withLock { state in
            var results: [StorageError?] = Array(repeating: nil, count: events.count)
            var renamed: [(Int, Int)] = []
            do {
                try PathSafety.prepareDirectory(directory, mode: 0o700)
            } catch {
                let failure = error as? StorageError ?? StorageError(code: .io, message: "\(error)")
                return results.map { _ in failure }
            }
            for (index, event) in events.enumerated() {
                let bytes = event.encoded()
                let previous = state.sizes[event.id] ?? 0
                guard state.bytes - previous + bytes.count <= maxBytes else {
                    results[index] = StorageError(code: .noSpace, message: "the quarantine is full (\(state.bytes) of \(maxBytes) bytes)")
                    continue
                }
                do {
                    try write(bytes, id: event.id)
                    state.bytes += bytes.count - previous
                    state.sizes[event.id] = bytes.count
                    renamed.append((index, bytes.count))
                } catch {
                    results[index] = error as? StorageError ?? StorageError(code: .io, message: "\(error)")
                }
            }
            guard !renamed.isEmpty else { return results }
            do {
                try FileIO.syncDirectory(directory)
            } catch {
                let failure = error as? StorageError ?? StorageError(code: .io, message: "\(error)")
                for (index, _) in renamed { results[index] = failure }
            }
            return results
        }
    }

    private func write(_ bytes: [UInt8], id: EventID) throws {
        let final = path(id)
        let temporary = directory + "/." + Self.fileName(id) + ".tmp"
        if let refusal = PathSafety.symlinkRefusal(final) { throw refusal }
        let fd = try FileIO.open(temporary, O_WRONLY | O_CREAT | O_TRUNC)
        do {
            try bytes.withUnsafeBytes { try FileIO.pwriteAll(fd, $0, at: 0, path: temporary) }
            try FileIO.fdatasync(fd, path: temporary)
        } catch {
            Glibc.close(fd)
            try? FileIO.unlink(temporary)
            throw error
        }
        Glibc.close(fd)
        try CrashPoints.reach("quarantine.temp_synced")
        _ = try FileIO.call("rename", final) { rename(temporary, final) }
        try CrashPoints.reach("quarantine.renamed")
    }

    /// The ids of the entries on disk, oldest first (UUIDv7 ids sort by time), unreadable ones
    /// included.
    package func ids() throws -> [EventID] {
        try FileIO.listDirectory(directory).compactMap { name in
            guard name.hasSuffix(".q"), !name.hasPrefix(".") else { return nil }
            return EventID(String(name.dropLast(2)))
        }.sorted()
    }

    /// Reads `id`'s entry; nil when there is none; throws ``StorageError`` (`corrupt`) for one
    /// that cannot be read.
    package func load(_ id: EventID) throws -> QuarantinedEvent? {
        guard let bytes = try FileIO.readFile(path(id)) else { return nil }
        return try QuarantinedEvent(decoding: bytes, path: path(id))
    }

    /// Deletes `id`'s entry durably; false when there was none.
    @discardableResult
    package func remove(_ id: EventID) throws -> Bool {
        try remove([id]) > 0
    }

    /// Deletes the entries of `ids` durably (one directory fsync); returns how many existed.
    @discardableResult
    package func remove(_ ids: [EventID]) throws -> Int {
        try state.withLock { state in
            var removed = 0
            for id in ids {
                let path = self.path(id)
                var st = stat()
                guard lstat(path, &st) == 0 else { continue }
                try FileIO.unlink(path)
                removed += 1
                state.bytes -= state.sizes.removeValue(forKey: id) ?? 0
            }
            if removed > 0 { try FileIO.syncDirectory(directory) }
            return removed
        }
    }

    // MARK: The replay marker

    /// What a replay in progress handed to the log: the log's end before it, and the events.
    /// Written durably before a replay's events are submitted and deleted once their entries are
    /// removed, so a replay cut short between the log's commit and the removal finds, in the log
    /// after `from`, the events it already stored, however long ago that was.
    package struct ReplayMarker: Sendable, Equatable {
        /// The log's end position before the events were submitted.
        package var from: LogPosition
        /// The events submitted.
        package var ids: [EventID]

        /// A marker.
        package init(from: LogPosition, ids: [EventID]) {
            self.from = from
            self.ids = ids
        }
    }

    /// `<quarantine>/.replay`.
    package var markerPath: String { directory + "/.replay" }

    /// Writes `marker` durably (temp file, fsync, rename, directory fsync).
    package func writeMarker(_ marker: ReplayMarker) throws {
        let text = "\(marker.from.segment) \(marker.from.offset)\n" + marker.ids.map { $0.description + "\n" }.joined()
        try FileIO.writeAtomically(Array(text.utf8), to: markerPath)
    }

    /// The marker a replay left, if any (one that cannot be read is treated as none: it only
    /// ever narrows what a replay stores again).
    package func loadMarker() throws -> ReplayMarker? {
        guard let bytes = try FileIO.readFile(markerPath) else { return nil }
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n")
        guard let first = lines.first?.split(separator: " "), first.count == 2,
              let segment = UInt64(first[0]), let offset = Int64(first[1]) else { return nil }
        return ReplayMarker(from: LogPosition(segment: segment, offset: offset), ids: lines.dropFirst().compactMap { EventID(String($0)) })
    }

    /// Deletes the marker durably.
    package func clearMarker() throws {
        var st = stat()
        guard lstat(markerPath, &st) == 0 else { return }
        try FileIO.unlink(markerPath)
        try FileIO.syncDirectory(directory)
    }

    /// Erases every entry for which `matches` is true (consent revoked, `forget`): readable
    /// entries are decoded and tested; returns how many were removed. Running it again after a
    /// crash removes what is left, so it is safe to repeat.
    package func erase(where matches: (QuarantinedEvent) -> Bool) throws -> Int {
        var doomed: [EventID] = []
        for id in try ids() {
            guard let event = try? load(id), matches(event) else { continue }
            doomed.append(id)
        }
        return try remove(doomed)
    }
}
