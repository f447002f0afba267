#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Synchronization

/// Settings shared by the fault-injection tests: how hard to push (CI or soak) and which random
/// seed to use, so a failing run can be repeated exactly.
///
/// - `FERRY_SOAK=1` selects the long soak figures (``scale(ci:soak:)``); `scripts/soak` sets it.
/// - `FERRY_FAULT_SEED=<n>` (decimal or `0x` hex) fixes the seed; otherwise each test draws one
///   and prints it.
public enum FaultSettings {
    /// Whether the soak figures were asked for (`FERRY_SOAK=1`).
    public static var isSoak: Bool { ProcessInfo.processInfo.environment["FERRY_SOAK"] == "1" }

    /// `ci` normally, `soak` under `FERRY_SOAK=1`.
    public static func scale<T>(ci: T, soak: T) -> T { isSoak ? soak : ci }

    /// The seed from `FERRY_FAULT_SEED`, or a fresh random one.
    public static func seed() -> UInt64 {
        if let text = ProcessInfo.processInfo.environment["FERRY_FAULT_SEED"], !text.isEmpty {
            let parsed = text.hasPrefix("0x") ? UInt64(text.dropFirst(2), radix: 16) : UInt64(text)
            if let parsed { return parsed }
            print("[fault] FERRY_FAULT_SEED=\(text) is not a number; drawing a random seed")
        }
        var system = SystemRandomNumberGenerator()
        return system.next()
    }

    /// A generator for the test `name`, printing its seed and how to repeat the run.
    public static func generator(for name: String) -> SeededGenerator {
        let seed = seed()
        print("[fault] \(name): seed 0x\(String(seed, radix: 16)) (repeat with FERRY_FAULT_SEED=0x\(String(seed, radix: 16))\(isSoak ? " FERRY_SOAK=1" : ""))")
        return SeededGenerator(seed: seed)
    }
}

/// A small, fast, seedable random number generator (SplitMix64): the same seed gives the same
/// sequence on every platform, so a fault run can be replayed.
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64
    /// The seed it started from.
    public let seed: UInt64

    /// A generator starting at `seed`.
    public init(seed: UInt64) {
        self.seed = seed
        state = seed
    }

    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
