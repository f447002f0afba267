import Synchronization

/// A 128-bit, time-ordered event identifier in the UUIDv7 layout (RFC 9562).
///
/// The first 48 bits are milliseconds since the Unix epoch, so ids sort by creation time. The
/// agent uses the id to drop re-sent events; upstream sinks use it as the idempotency key.
public struct EventID: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The most significant 64 bits (timestamp, version, counter).
    public var high: UInt64
    /// The least significant 64 bits (variant and random bits).
    public var low: UInt64

    /// Creates an id from its two halves.
    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// The all-zero id, used in acks for frames too short to carry an id.
    public static let zero = EventID(high: 0, low: 0)

    /// Reads an id from 16 big-endian bytes (the UUID byte order) at `offset`.
    public init(bytes: UnsafeRawBufferPointer, at offset: Int = 0) {
        high = UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        low = UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self))
    }

    /// Reads an id from 16 bytes of `bytes` starting at `offset`.
    public init(bytes: [UInt8], at offset: Int = 0) {
        self = bytes.withUnsafeBytes { EventID(bytes: $0, at: offset) }
    }

    /// Parses the canonical text form `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    public init?(_ text: String) {
        let hex = text.filter { $0 != "-" }
        // `UInt64(_:radix:)` accepts a leading sign, so check for hex digits first.
        guard hex.count == 32, hex.allSatisfy({ $0.isASCII && $0.isHexDigit }),
              let high = UInt64(hex.prefix(16), radix: 16),
              let low = UInt64(hex.suffix(16), radix: 16) else { return nil }
        self.init(high: high, low: low)
    }

    /// Appends the 16 big-endian bytes of the id.
    public func append(to bytes: inout [UInt8]) {
        withUnsafeBytes(of: high.bigEndian) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: low.bigEndian) { bytes.append(contentsOf: $0) }
    }

    /// The 16 big-endian bytes of the id.
    public var bytes: [UInt8] {
        var result: [UInt8] = []
        result.reserveCapacity(16)
        append(to: &result)
        return result
    }

    /// Milliseconds since the Unix epoch embedded in a UUIDv7.
    public var unixMilliseconds: Int64 { Int64(high >> 16) }

    public static func < (lhs: EventID, rhs: EventID) -> Bool {
        (lhs.high, lhs.low) < (rhs.high, rhs.low)
    }

    /// The canonical UUID text is this many bytes.
    private static let textLength = 36

    /// Writes the lower-case canonical UUID text into the first 36 bytes of `buffer`.
    package func writeText(into buffer: UnsafeMutableBufferPointer<UInt8>) {
        precondition(buffer.count >= Self.textLength)
        let out = buffer.baseAddress!
        let digits = ("0123456789abcdef" as StaticString).utf8Start
        // The low `count` hex digits of `value`, most significant first, at `position`.
        func hex(_ value: UInt64, _ count: Int, at position: Int) {
            var rest = value
            var at = position + count
            while at > position {
                at -= 1
                out[at] = digits[Int(rest & 0xF)]
                rest >>= 4
            }
        }
        // 8-4-4-4-12 digits.
        hex(high >> 32, 8, at: 0)
        out[8] = UInt8(ascii: "-")
        hex(high >> 16, 4, at: 9)
        out[13] = UInt8(ascii: "-")
        hex(high, 4, at: 14)
        out[18] = UInt8(ascii: "-")
        hex(low >> 48, 4, at: 19)
        out[23] = UInt8(ascii: "-")
        hex(low, 12, at: 24)
    }

    /// Appends the lower-case canonical UUID text (``description``) to `out`, in place.
    package func appendText(to out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: Self.textLength))
        out.withUnsafeMutableBufferPointer { writeText(into: UnsafeMutableBufferPointer(rebasing: $0[start...])) }
    }

    /// Lower-case canonical UUID text.
    public var description: String {
        // Written straight into the string's storage: one allocation (the JetStream sink makes
        // one per delivered event for `Nats-Msg-Id`).
        String(unsafeUninitializedCapacity: Self.textLength) { buffer in
            writeText(into: buffer)
            return Self.textLength
        }
    }
}

/// Makes UUIDv7 ids that are strictly increasing within one generator, even within a millisecond
/// (RFC 9562 §6.2 method 1: the 12-bit `rand_a` field is a counter seeded randomly each
/// millisecond; on overflow the timestamp is advanced by one).
public final class EventIDGenerator: Sendable {
    private struct State {
        var lastMilliseconds: UInt64 = 0
        var counter: UInt64 = 0
        var random: Xoshiro256
    }
    private let state: Mutex<State>

    /// Creates a generator seeded from the system's random source.
    public init() {
        var system = SystemRandomNumberGenerator()
        state = Mutex(State(random: Xoshiro256(seed: (system.next(), system.next(), system.next(), system.next()))))
    }

    /// The next id, stamped with `unixMilliseconds` (the current time by default).
    public func next(unixMilliseconds: UInt64 = WallClock.unixMilliseconds()) -> EventID {
        state.withLock { state in
            var ms = unixMilliseconds
            if ms <= state.lastMilliseconds {
                ms = state.lastMilliseconds
                state.counter += 1
                if state.counter > 0xFFF {
                    ms += 1
                    state.counter = state.random.next() & 0x3FF
                }
            } else {
                // Leave headroom above the seed so a burst within one millisecond rarely overflows.
                state.counter = state.random.next() & 0x3FF
            }
            state.lastMilliseconds = ms
            let high = (ms << 16) | 0x7000 | state.counter
            let low = (state.random.next() & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
            return EventID(high: high, low: low)
        }
    }
}

/// xoshiro256** — fast, non-cryptographic; ids need uniqueness, not secrecy.
struct Xoshiro256: RandomNumberGenerator, Sendable {
    private var s: (UInt64, UInt64, UInt64, UInt64)

    init(seed: (UInt64, UInt64, UInt64, UInt64)) {
        s = seed
        if s == (0, 0, 0, 0) { s.0 = 0x9E37_79B9_7F4A_7C15 }
    }

    mutating func next() -> UInt64 {
        let result = rotl(s.1 &* 5, 7) &* 9
        let t = s.1 << 17
        s.2 ^= s.0
        s.3 ^= s.1
        s.1 ^= s.2
        s.0 ^= s.3
        s.2 ^= t
        s.3 = rotl(s.3, 45)
        return result
    }

    private func rotl(_ x: UInt64, _ k: UInt64) -> UInt64 { (x << k) | (x >> (64 - k)) }
}
