import FerryProtocol

/// A set of event ids for the commit thread's dedup window: open addressing with linear probing
/// over one array, deletion by backward shift (no tombstones), at most half full.
///
/// `Set<EventID>` hashes each id with SipHash through `Hasher`; with three lookups per event
/// (contains, insert, eviction) that was the largest share of the commit thread's work per
/// event. Ids are mostly random bits already, so a keyed multiply-xorshift mix spreads them; the
/// key is random per process, so a client cannot pick ids that pile onto one probe run.
package struct EventIDSet {
    /// `EventID.zero` marks an empty slot; the zero id itself is tracked by `hasZero`.
    private var slots: [EventID]
    private var mask: Int
    private var hasZero = false
    private let key: (UInt64, UInt64)
    /// The ids held.
    package private(set) var count = 0

    /// A set with room for `capacity` ids before it first grows.
    package init(capacity: Int = 16) {
        var size = 16
        while size < capacity * 2 { size <<= 1 }
        slots = Array(repeating: .zero, count: size)
        mask = size - 1
        var random = SystemRandomNumberGenerator()
        key = (random.next(), random.next() | 1)
    }

    @inline(__always)
    private static func home(_ id: EventID, _ key: (UInt64, UInt64), _ mask: Int) -> Int {
        var x = (id.high ^ key.0) &* 0x9E37_79B9_7F4A_7C15
        x ^= (id.low ^ key.1)
        x = (x ^ (x >> 31)) &* 0xBF58_476D_1CE4_E5B9
        x = (x ^ (x >> 27)) &* 0x94D0_49BB_1331_11EB
        return Int(truncatingIfNeeded: x ^ (x >> 31)) & mask
    }

    /// Whether `id` is in the set.
    package func contains(_ id: EventID) -> Bool {
        if id == .zero { return hasZero }
        let mask = self.mask
        return slots.withUnsafeBufferPointer { slots in
            var index = Self.home(id, key, mask)
            while true {
                let slot = slots[index]
                if slot == id { return true }
                if slot == .zero { return false }
                index = (index + 1) & mask
            }
        }
    }

    /// Adds `id`; false if it was already there.
    @discardableResult
    package mutating func insert(_ id: EventID) -> Bool {
        if id == .zero {
            defer { hasZero = true }
            if !hasZero { count += 1 }
            return !hasZero
        }
        if (count + 1) * 2 > slots.count { grow() }
        let mask = self.mask, start = Self.home(id, key, mask)
        let inserted = slots.withUnsafeMutableBufferPointer { slots in
            var index = start
            while true {
                let slot = slots[index]
                if slot == id { return false }
                if slot == .zero {
                    slots[index] = id
                    return true
                }
                index = (index + 1) & mask
            }
        }
        if inserted { count += 1 }
        return inserted
    }

    /// Removes `id`; false if it was not there.
    @discardableResult
    package mutating func remove(_ id: EventID) -> Bool {
        if id == .zero {
            defer { hasZero = false }
            if hasZero { count -= 1 }
            return hasZero
        }
        let mask = self.mask, key = self.key
        let removed = slots.withUnsafeMutableBufferPointer { slots -> Bool in
            var hole = Self.home(id, key, mask)
            while slots[hole] != id {
                if slots[hole] == .zero { return false }
                hole = (hole + 1) & mask
            }
            // Backward shift: move each later entry of the probe run into the hole unless its
            // home lies cyclically in (hole, index], where it would no longer be found.
            var index = hole
            while true {
                index = (index + 1) & mask
                let slot = slots[index]
                if slot == .zero { break }
                let home = Self.home(slot, key, mask)
                let stays = hole < index ? (home > hole && home <= index) : (home > hole || home <= index)
                if !stays {
                    slots[hole] = slot
                    hole = index
                }
            }
            slots[hole] = .zero
            return true
        }
        if removed { count -= 1 }
        return removed
    }

    /// Slots in the table (at least twice the ids it holds).
    package var slotCount: Int { slots.count }

    /// Removes every id, keeping the table's size: one pass clearing every slot, cheaper than
    /// ``remove(_:)`` per id once the ids fill more than a small share of the slots.
    package mutating func removeAll() {
        slots.withUnsafeMutableBufferPointer { $0.update(repeating: .zero) }
        hasZero = false
        count = 0
    }

    private mutating func grow() {
        let old = slots
        slots = Array(repeating: .zero, count: old.count * 2)
        mask = slots.count - 1
        let zero = hasZero
        count = 0
        hasZero = false
        for id in old where id != .zero { insert(id) }
        if zero { insert(.zero) }
    }
}
