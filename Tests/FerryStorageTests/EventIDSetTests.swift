@testable import FerryStorage
import FerryProtocol
import Testing

@Suite("Event id set")
struct EventIDSetTests {
    /// A small deterministic generator (SplitMix64), so a failure repeats.
    struct SplitMix: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    @Test("answers as Set does through inserts, removes and growth", arguments: [
        // Random ids; ids differing in one byte only; a few ids (many repeats), with the zero id.
        "random", "sequential", "few",
    ])
    func matchesSet(kind: String) {
        var random = SplitMix(state: 42)
        func id() -> EventID {
            switch kind {
            case "random": EventID(high: random.next(), low: random.next())
            case "sequential": EventID(high: 0x0190_0000_0000_7000, low: random.next(upperBound: UInt64(5000)))
            default: random.next(upperBound: UInt64(8)) == 0 ? .zero : EventID(high: 1, low: random.next(upperBound: UInt64(40)))
            }
        }
        var set = EventIDSet(capacity: 4)
        var reference = Set<EventID>()
        var live: [EventID] = []
        for step in 0..<20_000 {
            let next = id()
            if random.next(upperBound: UInt64(3)) == 0, !live.isEmpty {
                let victim = random.next(upperBound: UInt64(2)) == 0 ? live.remove(at: Int(random.next(upperBound: UInt64(live.count)))) : next
                #expect(set.remove(victim) == (reference.remove(victim) != nil), "step \(step)")
            } else {
                let inserted = set.insert(next)
                #expect(inserted == reference.insert(next).inserted, "step \(step)")
                if inserted { live.append(next) }
            }
            #expect(set.count == reference.count)
            if step % 997 == 0 {
                for probe in live { #expect(set.contains(probe) == reference.contains(probe)) }
                #expect(set.contains(.zero) == reference.contains(.zero))
            }
        }
        for probe in reference { #expect(set.contains(probe)) }
        for _ in 0..<1000 {
            let probe = id()
            #expect(set.contains(probe) == reference.contains(probe))
        }
    }
}
