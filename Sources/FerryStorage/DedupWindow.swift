import DequeModule
import FerryProtocol

/// The recently seen event ids, bounded by count and by age.
///
/// Used only by the commit thread. Entries are kept in arrival order so the oldest are evicted
/// first; a set answers membership (``EventIDSet``, cheaper per id than `Set`). It is rebuilt
/// on start from the persisted snapshot (ids of
/// segments already deleted) and from the segments still on disk, so it survives restarts.
package struct DedupWindow {
    private var order: Deque<(id: EventID, at: UInt64)> = []
    private var members: EventIDSet
    package let maxEntries: Int
    package let maxAgeMilliseconds: UInt64

    package init(maxEntries: Int, maxAgeMilliseconds: UInt64) {
        self.maxEntries = maxEntries
        self.maxAgeMilliseconds = maxAgeMilliseconds
        // Sized for a full window up front (up to 131 072 ids: 4 MiB of set, 3 MiB of order):
        // growing by doubling would hold the old and the new tables at once when it fills.
        let presized = min(maxEntries, Self.presizedEntries)
        members = EventIDSet(capacity: presized)
        order.reserveCapacity(presized + 1)
    }

    /// The most entries the window is sized for at creation (a larger one grows as it fills).
    static let presizedEntries = 1 << 17

    package var count: Int { members.count }

    package func contains(_ id: EventID) -> Bool { members.contains(id) }

    /// Adds `id` seen at `at` (agent ms). Returns false if it was already present.
    @discardableResult
    package mutating func insert(_ id: EventID, at: UInt64) -> Bool {
        guard members.insert(id) else { return false }
        order.append((id, at))
        while order.count > maxEntries { members.remove(order.removeFirst().id) }
        return true
    }

    /// Removes the newest entries for `ids` (used when a group commit fails).
    package mutating func remove(_ ids: some Sequence<EventID>) {
        let drop = Set(ids)
        guard !drop.isEmpty else { return }
        for id in drop { members.remove(id) }
        order.removeAll { drop.contains($0.id) }
    }

    /// Evicts entries older than the window's age relative to `now`.
    package mutating func expire(now: UInt64) {
        while let first = order.first, first.at + maxAgeMilliseconds < now {
            members.remove(first.id)
            order.removeFirst()
        }
    }

    /// The entries, oldest first, for the snapshot file.
    package var entries: some Sequence<(id: EventID, at: UInt64)> { order }

    // MARK: Snapshot file: "FDDP" count:u32 then (id:16, at:u64) entries, then crc32c:u32; or
    // "FDD2" segment:u64 offset:i64 (the log position it covers) then the same.

    package static let snapshotMagic = Array("FDDP".utf8)
    /// The magic of a snapshot that records the log position it covers.
    package static let coveringSnapshotMagic = Array("FDD2".utf8)

    /// The snapshot file's bytes. With `covered`, the snapshot says the window holds what it
    /// would after seeing every record before that position, so a start needs to read only the
    /// records after it.
    package func snapshot(excluding: Set<EventID> = [], coveringUpTo covered: LogPosition? = nil) -> [UInt8] {
        var out = covered == nil ? Self.snapshotMagic : Self.coveringSnapshotMagic
        if let covered {
            appendLE(covered.segment, to: &out)
            appendLE(covered.offset, to: &out)
        }
        out.reserveCapacity(out.count + 8 + order.count * 24)
        let kept = excluding.isEmpty ? Array(order) : order.filter { !excluding.contains($0.id) }
        appendLE(UInt32(kept.count), to: &out)
        for entry in kept {
            entry.id.append(to: &out)
            appendLE(entry.at, to: &out)
        }
        appendLE(CRC32C.checksum(out), to: &out)
        return out
    }

    /// Inserts the entries of `snapshot` straight from its bytes (no intermediate array). Returns
    /// `nil` for a damaged snapshot (nothing inserted), else the log position it covers, if any.
    package mutating func load(snapshot bytes: [UInt8]) -> LogPosition?? {
        guard let (head, count, covered) = Self.snapshotLayout(bytes) else { return nil }
        for i in 0..<count {
            let base = head + 4 + i * 24
            insert(EventID(bytes: bytes, at: base), at: readLE(bytes, at: base + 16, as: UInt64.self))
        }
        return .some(covered)
    }

    /// Where a valid snapshot's entries start, how many there are and the position it covers.
    private static func snapshotLayout(_ bytes: [UInt8]) -> (head: Int, count: Int, covered: LogPosition?)? {
        guard bytes.count >= 12 else { return nil }
        var head = 4
        var covered: LogPosition?
        if bytes.starts(with: coveringSnapshotMagic) {
            guard bytes.count >= 28 else { return nil }
            covered = LogPosition(segment: readLE(bytes, at: 4), offset: readLE(bytes, at: 12))
            head = 20
        } else if !bytes.starts(with: snapshotMagic) {
            return nil
        }
        let count = Int(readLE(bytes, at: head, as: UInt32.self))
        guard bytes.count == head + 8 + count * 24 else { return nil }
        let stored: UInt32 = readLE(bytes, at: bytes.count - 4)
        let computed = bytes.withUnsafeBytes { CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[..<(bytes.count - 4)])) }
        guard computed == stored else { return nil }
        return (head, count, covered)
    }

    /// Parses a snapshot; returns `nil` for a damaged one (the caller logs and starts without it).
    package static func parseSnapshot(_ bytes: [UInt8]) -> [(id: EventID, at: UInt64)]? {
        parseSnapshotCoverage(bytes)?.entries
    }

    /// Parses a snapshot and the log position it covers (`nil` for a snapshot that records none);
    /// returns `nil` for a damaged one.
    package static func parseSnapshotCoverage(_ bytes: [UInt8]) -> (entries: [(id: EventID, at: UInt64)], covered: LogPosition?)? {
        guard let (head, count, covered) = snapshotLayout(bytes) else { return nil }
        let entries = (0..<count).map { i in
            let base = head + 4 + i * 24
            return (id: EventID(bytes: bytes, at: base), at: readLE(bytes, at: base + 16, as: UInt64.self))
        }
        return (entries, covered)
    }
}
