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
        members = EventIDSet(capacity: min(maxEntries, 1 << 16))
    }

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

    // MARK: Snapshot file: "FDDP" count:u32 then (id:16, at:u64) entries, then crc32c:u32.

    package static let snapshotMagic = Array("FDDP".utf8)

    package func snapshot(excluding: Set<EventID> = []) -> [UInt8] {
        var out = Self.snapshotMagic
        out.reserveCapacity(12 + order.count * 24)
        let kept = excluding.isEmpty ? Array(order) : order.filter { !excluding.contains($0.id) }
        appendLE(UInt32(kept.count), to: &out)
        for entry in kept {
            entry.id.append(to: &out)
            appendLE(entry.at, to: &out)
        }
        appendLE(CRC32C.checksum(out), to: &out)
        return out
    }

    /// Parses a snapshot; returns `nil` for a damaged one (the caller logs and starts without it).
    package static func parseSnapshot(_ bytes: [UInt8]) -> [(id: EventID, at: UInt64)]? {
        guard bytes.count >= 12, Array(bytes[0..<4]) == snapshotMagic else { return nil }
        let count = Int(readLE(bytes, at: 4, as: UInt32.self))
        guard bytes.count == 12 + count * 24 else { return nil }
        let stored: UInt32 = readLE(bytes, at: bytes.count - 4)
        guard CRC32C.checksum(Array(bytes[..<(bytes.count - 4)])) == stored else { return nil }
        return (0..<count).map { i in
            let base = 8 + i * 24
            return (EventID(bytes: bytes, at: base), readLE(bytes, at: base + 16, as: UInt64.self))
        }
    }
}
