import FerryProtocol
import Testing

@Suite("EventID")
struct EventIDTests {
    static let sample = EventID(high: 0x0102_0304_0506_0708, low: 0x090A_0B0C_0D0E_0F10)

    @Test("bytes are the two halves in big-endian order (UUID byte order)")
    func byteOrder() {
        #expect(Self.sample.bytes == Array(1...16))
        var out: [UInt8] = [0xAA]
        Self.sample.append(to: &out)
        #expect(out == [0xAA] + Array(1...16))
        #expect(EventID(bytes: Array(1...16)) == Self.sample)
        #expect(EventID(bytes: [0xEE, 0xEE, 0xEE] + Array(1...16) + [0xEE], at: 3) == Self.sample)
        let fromRaw = ([0xEE] + Array(1...16) as [UInt8]).withUnsafeBytes { EventID(bytes: $0, at: 1) }
        #expect(fromRaw == Self.sample)
    }

    @Test("canonical text is lower-case 8-4-4-4-12 hex of the bytes")
    func text() {
        #expect(Self.sample.description == "01020304-0506-0708-090a-0b0c0d0e0f10")
        #expect(EventID.zero.description == "00000000-0000-0000-0000-000000000000")
        #expect(EventID(high: .max, low: .max).description == "ffffffff-ffff-ffff-ffff-ffffffffffff")
        // `description` and `appendText(to:)` write the same text.
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<100 {
            let id = EventID(high: generator.next(), low: generator.next())
            var text: [UInt8] = []
            id.appendText(to: &text)
            #expect(Array(id.description.utf8) == text)
        }
    }

    @Test("text round trip", arguments: [
        "0190f5c2-7a3b-7c4d-8e5f-0123456789ab",
        "00000000-0000-0000-0000-000000000000",
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
        "01020304-0506-0708-090a-0b0c0d0e0f10",
    ])
    func textRoundTrip(text: String) throws {
        let id = try #require(EventID(text))
        #expect(id.description == text)
        #expect(EventID(text.uppercased()) == id)
        #expect(EventID(String(text.filter { $0 != "-" })) == id)
    }

    @Test("random ids round-trip through text and bytes")
    func randomRoundTrip() throws {
        let generator = EventIDGenerator()
        for _ in 0..<1000 {
            let id = generator.next()
            #expect(try #require(EventID(id.description)) == id)
            #expect(EventID(bytes: id.bytes) == id)
        }
    }

    @Test("malformed text is refused", arguments: [
        "",
        "0190f5c2-7a3b-7c4d-8e5f-0123456789a",     // 31 digits
        "0190f5c2-7a3b-7c4d-8e5f-0123456789abc",   // 33 digits
        "0190f5c2-7a3b-7c4d-8e5f-0123456789ag",    // not hex
        "+190f5c2-7a3b-7c4d-8e5f-0123456789ab",    // a sign where a digit belongs
        "0190f5c2-7a3b-7c4d-+e5f-0123456789ab",    // a sign starting the low half
        "0190f5c2 7a3b 7c4d 8e5f 0123456789ab",
    ])
    func malformedText(text: String) {
        #expect(EventID(text) == nil)
    }

    @Test("ordering is the unsigned order of the 16 bytes")
    func ordering() {
        let generator = EventIDGenerator()
        let ids = (0..<200).map { index in
            // Mix the generator's ids with arbitrary ones so both halves matter.
            index.isMultiple(of: 2)
                ? generator.next(unixMilliseconds: UInt64(index * 7919 % 1000))
                : EventID(bytes: pseudoRandomBytes(16, seed: UInt64(index)))
        }
        for a in ids.prefix(50) {
            for b in ids {
                #expect((a < b) == a.bytes.lexicographicallyPrecedes(b.bytes))
            }
        }
        #expect(EventID(high: 1, low: 0) > EventID(high: 0, low: .max))
    }

    @Test("the timestamp is the top 48 bits")
    func unixMilliseconds() {
        let id = EventID("0190f5c2-7a3b-7c4d-8e5f-0123456789ab")!
        #expect(id.unixMilliseconds == 0x0190_F5C2_7A3B)
        #expect(EventIDGenerator().next(unixMilliseconds: 1_700_000_000_000).unixMilliseconds == 1_700_000_000_000)
    }
}

@Suite("EventIDGenerator")
struct EventIDGeneratorTests {
    static func checkVersionAndVariant(_ id: EventID, sourceLocation: SourceLocation = #_sourceLocation) {
        let bytes = id.bytes
        #expect(bytes[6] >> 4 == 7, "version nibble of \(id)", sourceLocation: sourceLocation)
        #expect(bytes[8] >> 6 == 0b10, "variant bits of \(id)", sourceLocation: sourceLocation)
    }

    @Test("UUIDv7 version and variant bits, timestamp in the first 48 bits")
    func layout() {
        let generator = EventIDGenerator()
        let before = WallClock.unixMilliseconds()
        let id = generator.next()
        let after = WallClock.unixMilliseconds()
        Self.checkVersionAndVariant(id)
        #expect(UInt64(id.unixMilliseconds) >= before && UInt64(id.unixMilliseconds) <= after)
        let stamped = EventIDGenerator().next(unixMilliseconds: 0x0123_4567_89AB)
        #expect(Array(stamped.bytes.prefix(6)) == [0x01, 0x23, 0x45, 0x67, 0x89, 0xAB])
        #expect(stamped.unixMilliseconds == 0x0123_4567_89AB)
        Self.checkVersionAndVariant(stamped)
    }

    @Test("100 000 ids in one millisecond are strictly increasing; counter overflow advances the timestamp")
    func sameMillisecondBurst() {
        let generator = EventIDGenerator()
        let fixed: UInt64 = 1_700_000_000_000
        var previous = EventID.zero
        var perMillisecond: [Int64: Int] = [:]
        for index in 0..<100_000 {
            let id = generator.next(unixMilliseconds: fixed)
            #expect(id > previous, "id \(index) \(id) is not above \(previous)")
            if id <= previous { return }
            previous = id
            Self.checkVersionAndVariant(id)
            perMillisecond[id.unixMilliseconds, default: 0] += 1
        }
        // The 12-bit counter starts at most at 0x3FF each millisecond, so one millisecond holds
        // between 0x1000 - 0x3FF and 0x1000 ids before it overflows into the next.
        let stamps = perMillisecond.keys.sorted()
        #expect(stamps.first == Int64(fixed))
        #expect(stamps == Array(stamps.first!...stamps.last!), "timestamps advance one millisecond at a time")
        for stamp in stamps.dropLast() {
            #expect((0x1000 - 0x3FF...0x1000).contains(perMillisecond[stamp]!), "\(perMillisecond[stamp]!) ids at \(stamp)")
        }
        #expect(stamps.count >= 100_000 / 0x1000 + 1 && stamps.count <= 100_000 / (0x1000 - 0x3FF) + 1)
    }

    @Test("the counter of a new millisecond is seeded at most 0x3FF (headroom for bursts)")
    func counterSeed() {
        let generator = EventIDGenerator()
        var seeds: Set<UInt64> = []
        for ms in stride(from: UInt64(1_000), to: 3_000, by: 1) {
            let id = generator.next(unixMilliseconds: ms)
            #expect(id.unixMilliseconds == Int64(ms))
            let counter = id.high & 0xFFF
            #expect(counter <= 0x3FF)
            seeds.insert(counter)
        }
        #expect(seeds.count > 100, "the counter seed should be random, got \(seeds.count) distinct values")
    }

    @Test("a clock that goes backwards still yields increasing ids")
    func clockGoesBackwards() {
        let generator = EventIDGenerator()
        let stamps: [UInt64] = [5_000, 5_001, 4_000, 4_999, 5_001, 3, 5_002, 5_002, 6_000, 1]
        var previous = EventID.zero
        for stamp in stamps {
            let id = generator.next(unixMilliseconds: stamp)
            #expect(id > previous)
            // The timestamp never goes back: a stale clock reading reuses the last millisecond.
            #expect(id.unixMilliseconds == max(Int64(stamp), previous.unixMilliseconds))
            previous = id
        }
        #expect(previous.unixMilliseconds == 6_000)
    }

    @Test("mixed bursts over a few milliseconds stay strictly increasing")
    func mixedBursts() {
        let generator = EventIDGenerator()
        var previous = EventID.zero
        var ms: UInt64 = 1_700_000_000_000
        for round in 0..<50 {
            let burst = (round * 977) % 6000  // some bursts overflow the counter, some do not
            for _ in 0..<burst {
                let id = generator.next(unixMilliseconds: ms)
                #expect(id > previous)
                if id <= previous { return }
                previous = id
            }
            ms += UInt64(round % 3)  // sometimes the same millisecond again
        }
    }

    @Test("ids from one generator shared by concurrent tasks are unique")
    func concurrentUse() async {
        let generator = EventIDGenerator()
        let perTask = 20_000
        let batches = await withTaskGroup(of: [EventID].self) { group in
            for _ in 0..<8 {
                group.addTask {
                    var ids: [EventID] = []
                    ids.reserveCapacity(perTask)
                    for _ in 0..<perTask { ids.append(generator.next()) }
                    return ids
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        for ids in batches {
            #expect(zip(ids, ids.dropFirst()).allSatisfy { $0 < $1 }, "each task sees increasing ids")
        }
        #expect(Set(batches.joined()).count == 8 * perTask)
    }

    @Test("two generators in the same millisecond do not collide")
    func independentGenerators() {
        let a = EventIDGenerator(), b = EventIDGenerator()
        let ids = (0..<10_000).flatMap { _ in [a.next(unixMilliseconds: 42), b.next(unixMilliseconds: 42)] }
        #expect(Set(ids).count == ids.count)
    }
}
