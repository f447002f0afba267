import FerryProtocol
@testable import FerryStorage
import FerryTestKit
import Testing

@Suite("SessionTable")
struct SessionTableTests {
    static let a = EventID(high: 1, low: 1)
    static let b = EventID(high: 2, low: 2)

    static func table(maxSessions: Int = 100, maxRanges: Int = 1024) -> SessionTable {
        SessionTable(idleMilliseconds: 60_000, maxSessions: maxSessions, maxRangesPerSession: maxRanges, lossGraceMilliseconds: 1000)
    }

    @Test("ranges merge in any insertion order and answer membership exactly", arguments: [1, 2, 3, 4, 5] as [UInt64])
    func ranges(seed: UInt64) {
        var generator = SeededGenerator(seed: seed)
        let present = (1...200 as ClosedRange<UInt64>).filter { _ in generator.next() % 3 != 0 }
        var table = Self.table()
        for sequence in present.shuffled(using: &generator) {
            table.insert(session: Self.a, sequence: sequence, at: 1, source: "s")
        }
        for sequence in 1...210 as ClosedRange<UInt64> {
            #expect(table.contains(session: Self.a, sequence: sequence) == present.contains(sequence), "\(sequence)")
        }
        // As few ranges as the set needs.
        let runs = present.enumerated().filter { $0.offset == 0 || present[$0.offset - 1] + 1 != $0.element }.count
        #expect(table[Self.a]?.ranges.count == runs)
        #expect(table.contains(session: Self.b, sequence: 1) == nil)
    }

    @Test("remove splits a range; a failed group's sequences are judged again")
    func remove() {
        var table = Self.table()
        for sequence in 1...10 as ClosedRange<UInt64> { table.insert(session: Self.a, sequence: sequence, at: 1, source: "s") }
        table.remove(session: Self.a, sequence: 5)
        #expect(table[Self.a]?.ranges == [1...4, 6...10])
        table.remove(session: Self.a, sequence: 1)
        table.remove(session: Self.a, sequence: 10)
        #expect(table[Self.a]?.ranges == [2...4, 6...9])
    }

    @Test("a gap is reported once, only after it has been open for the grace period, with its source")
    func losses() {
        var table = Self.table()
        for sequence: UInt64 in [1, 2, 3, 7, 8] { table.insert(session: Self.a, sequence: sequence, at: 0, source: "app") }
        #expect(table.collectLosses(now: 1_000).isEmpty) // first seen
        #expect(table.collectLosses(now: 1_500).isEmpty) // not yet a grace period
        // A gap that opens later is not reported with the first one.
        table.insert(session: Self.a, sequence: 10, at: 1_600, source: "app")
        let losses = table.collectLosses(now: 2_000)
        #expect(losses.map(\.gaps) == [[4...6]])
        #expect(losses.first?.source == "app")
        #expect(losses.first?.events == 3)
        #expect(table.collectLosses(now: 2_100).isEmpty)
        let later = table.collectLosses(now: 3_200)
        #expect(later.map(\.gaps) == [[9...9]])
        #expect(table.collectLosses(now: 9_000).isEmpty)
        // A late arrival in a reported gap is still stored (it is not a duplicate).
        #expect(table.contains(session: Self.a, sequence: 5) == false)
    }

    @Test("a gap filled within the grace period is not a loss")
    func filledGap() {
        var table = Self.table()
        for sequence: UInt64 in [1, 3] { table.insert(session: Self.a, sequence: sequence, at: 0, source: "s") }
        #expect(table.collectLosses(now: 100).isEmpty)
        table.insert(session: Self.a, sequence: 2, at: 200, source: "s")
        #expect(table.collectLosses(now: 5_000).isEmpty)
    }

    @Test("idle sessions are evicted with their gaps reported; one that comes back resumes without a false loss")
    func idleEviction() {
        var table = Self.table()
        for sequence: UInt64 in [1, 2, 5] { table.insert(session: Self.a, sequence: sequence, at: 0, source: "s") }
        table.insert(session: Self.b, sequence: 1, at: 50_000, source: "t")
        let losses = table.collectLosses(now: 70_000)
        #expect(losses.map(\.session) == [Self.a])
        #expect(losses.first?.gaps == [3...4])
        #expect(table.count == 1)
        table.insert(session: Self.a, sequence: 100, at: 70_001, source: "s")
        #expect(table.contains(session: Self.a, sequence: 99) == nil) // below the floor: the id window judges
        #expect(table.contains(session: Self.a, sequence: 100) == true)
        #expect(table.collectLosses(now: 71_000).isEmpty)
        #expect(table.collectLosses(now: 80_000).isEmpty)
    }

    @Test("memory is bounded: sessions by count (least recent first), ranges per session by a floor")
    func bounds() {
        var table = Self.table(maxSessions: 3, maxRanges: 4)
        for index in 1...5 as ClosedRange<UInt64> {
            table.insert(session: EventID(high: index, low: 0), sequence: 1, at: index, source: "s")
        }
        #expect(table.count == 3)
        #expect(table[EventID(high: 1, low: 0)] == nil && table[EventID(high: 5, low: 0)] != nil)
        for sequence: UInt64 in [1, 3, 5, 7, 9, 11] { table.insert(session: Self.a, sequence: sequence, at: 10, source: "s") }
        #expect(table[Self.a]?.ranges.count == 4)
        #expect(table[Self.a]?.floor == 3)
        #expect(table.contains(session: Self.a, sequence: 1) == nil)
        #expect(table.contains(session: Self.a, sequence: 5) == true)
    }

    @Test("the snapshot restores every session and the position it covers; damage is detected")
    func snapshot() throws {
        var table = Self.table()
        for sequence: UInt64 in [1, 2, 3, 9] { table.insert(session: Self.a, sequence: sequence, at: 5, source: "app") }
        table.insert(session: Self.b, sequence: 4, at: 6, source: "ünïcode")
        let covered = LogPosition(segment: 7, offset: 4096)
        let bytes = table.snapshot(coveringUpTo: covered)
        var restored = Self.table()
        #expect(restored.restore(snapshot: bytes) == covered)
        #expect(restored[Self.a]?.ranges == [1...3, 9...9])
        #expect(restored[Self.a]?.source == "app")
        #expect(restored[Self.b]?.source == "ünïcode")
        #expect(restored.contains(session: Self.b, sequence: 4) == true)
        for index in stride(from: 0, to: bytes.count, by: 7) {
            var damaged = bytes
            damaged[index] ^= 0x40
            var other = Self.table()
            #expect(other.restore(snapshot: damaged) == nil, "flip at \(index)")
        }
        var empty = Self.table()
        #expect(empty.restore(snapshot: Array(bytes.prefix(20))) == nil)
    }
}
