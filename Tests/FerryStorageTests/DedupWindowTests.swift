@testable import FerryStorage
import FerryTestKit
import FerryProtocol
import Testing

@Suite("Dedup window")
struct DedupWindowTests {
    static func ids(_ count: Int) -> [EventID] { (0..<count).map { _ in Events.ids.next() } }

    @Test("insert answers whether the id is new; a re-sent id is a duplicate")
    func insertAndContains() {
        var window = DedupWindow(maxEntries: 10, maxAgeMilliseconds: 60_000)
        let ids = Self.ids(3)
        let first = window.insert(ids[0], at: 1)
        let second = window.insert(ids[1], at: 2)
        let again = window.insert(ids[0], at: 3)
        #expect(first && second)
        #expect(!again, "a re-sent id is not inserted again")
        #expect(window.contains(ids[0]) && window.contains(ids[1]))
        #expect(!window.contains(ids[2]))
        #expect(window.count == 2)
        #expect(window.entries.map(\.at) == [1, 2], "the duplicate did not refresh the entry")
    }

    @Test("bounded by count: the oldest ids are evicted first", arguments: [1, 3, 100])
    func boundedByCount(maxEntries: Int) {
        var window = DedupWindow(maxEntries: maxEntries, maxAgeMilliseconds: .max / 2)
        let ids = Self.ids(maxEntries + 5)
        for (i, id) in ids.enumerated() { window.insert(id, at: UInt64(i)) }
        #expect(window.count == maxEntries)
        #expect(ids.prefix(5).allSatisfy { !window.contains($0) })
        #expect(ids.suffix(maxEntries).allSatisfy { window.contains($0) })
        #expect(window.entries.map(\.id) == Array(ids.suffix(maxEntries)))
        // An evicted id is new again.
        let reinserted = window.insert(ids[0], at: 1_000)
        #expect(reinserted)
        #expect(!window.contains(ids[5]), "inserting evicted the next oldest")
    }

    @Test("bounded by age: entries older than the window are expired, the boundary is kept")
    func boundedByAge() {
        var window = DedupWindow(maxEntries: 100, maxAgeMilliseconds: 1_000)
        let ids = Self.ids(4)
        window.insert(ids[0], at: 10_000)
        window.insert(ids[1], at: 10_500)
        window.insert(ids[2], at: 11_000)
        window.insert(ids[3], at: 12_000)
        window.expire(now: 11_000)
        #expect(window.count == 4, "nothing is older than 1 s yet (10 000 + 1 000 is not < 11 000)")
        window.expire(now: 11_600)
        #expect(!window.contains(ids[0]) && !window.contains(ids[1]))
        #expect(window.contains(ids[2]) && window.contains(ids[3]))
        #expect(window.count == 2)
        window.expire(now: 100_000)
        #expect(window.count == 0)
        let reinserted = window.insert(ids[0], at: 100_000)
        #expect(reinserted, "an expired id is accepted again")
    }

    @Test("remove forgets ids (a failed group commit)")
    func remove() {
        var window = DedupWindow(maxEntries: 100, maxAgeMilliseconds: 60_000)
        let ids = Self.ids(5)
        for id in ids { window.insert(id, at: 1) }
        window.remove([ids[1], ids[3]])
        #expect(window.count == 3)
        #expect(window.entries.map(\.id) == [ids[0], ids[2], ids[4]])
        let reinserted = window.insert(ids[1], at: 2)
        #expect(reinserted)
    }

    @Test("snapshot round trip keeps ids, times and order; excluding leaves ids out")
    func snapshotRoundTrip() throws {
        var window = DedupWindow(maxEntries: 100, maxAgeMilliseconds: 60_000)
        let ids = Self.ids(7)
        for (i, id) in ids.enumerated() { window.insert(id, at: 1_700_000_000_000 + UInt64(i) * 17) }
        let parsed = try #require(DedupWindow.parseSnapshot(window.snapshot()))
        #expect(parsed.map(\.id) == ids)
        #expect(parsed.map(\.at) == (0..<7).map { 1_700_000_000_000 + UInt64($0) * 17 })

        let partial = try #require(DedupWindow.parseSnapshot(window.snapshot(excluding: [ids[0], ids[6]])))
        #expect(partial.map(\.id) == Array(ids[1...5]))

        let empty = DedupWindow(maxEntries: 5, maxAgeMilliseconds: 5)
        #expect(DedupWindow.parseSnapshot(empty.snapshot())?.isEmpty == true)
    }

    @Test("a snapshot records the log position it covers; one without it parses with none")
    func snapshotCoverage() throws {
        var window = DedupWindow(maxEntries: 100, maxAgeMilliseconds: 60_000)
        let ids = Self.ids(5)
        for (i, id) in ids.enumerated() { window.insert(id, at: 1_000 + UInt64(i)) }
        let position = LogPosition(segment: 7, offset: 123_456)
        let covering = try #require(DedupWindow.parseSnapshotCoverage(window.snapshot(excluding: [ids[4]], coveringUpTo: position)))
        #expect(covering.covered == position)
        #expect(covering.entries.map(\.id) == Array(ids.prefix(4)))
        #expect(DedupWindow.parseSnapshot(window.snapshot(coveringUpTo: position))?.map(\.id) == ids)
        let plain = try #require(DedupWindow.parseSnapshotCoverage(window.snapshot()))
        #expect(plain.covered == nil)
        #expect(plain.entries.map(\.id) == ids)
        var damaged = window.snapshot(coveringUpTo: position)
        damaged[10] ^= 1
        #expect(DedupWindow.parseSnapshotCoverage(damaged) == nil)

        // Loading straight into a window: the same entries, the same position; nothing from a damaged one.
        var loaded = DedupWindow(maxEntries: 100, maxAgeMilliseconds: 60_000)
        #expect(loaded.load(snapshot: window.snapshot(coveringUpTo: position)) == .some(position))
        #expect(loaded.entries.map(\.id) == ids && loaded.entries.map(\.at) == (0..<5).map { 1_000 + UInt64($0) })
        var plainLoaded = DedupWindow(maxEntries: 100, maxAgeMilliseconds: 60_000)
        #expect(plainLoaded.load(snapshot: window.snapshot()) == .some(nil))
        var none = DedupWindow(maxEntries: 100, maxAgeMilliseconds: 60_000)
        #expect(none.load(snapshot: damaged) == nil)
        #expect(none.count == 0)
    }

    @Test("a damaged snapshot parses to nil")
    func damagedSnapshot() {
        var window = DedupWindow(maxEntries: 100, maxAgeMilliseconds: 60_000)
        for (i, id) in Self.ids(3).enumerated() { window.insert(id, at: UInt64(i)) }
        let good = window.snapshot()
        #expect(DedupWindow.parseSnapshot(good) != nil)
        // Every single flipped byte is caught (magic, count, entries, checksum).
        var missed: [Int] = []
        for index in good.indices {
            var bad = good
            bad[index] ^= 0x01
            if DedupWindow.parseSnapshot(bad) != nil { missed.append(index) }
        }
        #expect(missed.isEmpty, "flipped bytes not detected at \(missed)")
        #expect(DedupWindow.parseSnapshot(Array(good.dropLast())) == nil)
        #expect(DedupWindow.parseSnapshot(good + [0]) == nil)
        #expect(DedupWindow.parseSnapshot([]) == nil)
        #expect(DedupWindow.parseSnapshot(Array("FDDP".utf8)) == nil)
        // A count claiming more entries than there are bytes.
        var huge = good
        huge[4] = 0xFF; huge[5] = 0xFF; huge[6] = 0xFF; huge[7] = 0x7F
        #expect(DedupWindow.parseSnapshot(huge) == nil)
    }
}
