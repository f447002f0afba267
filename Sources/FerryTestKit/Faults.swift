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

/// Memory figures of a process, from `/proc/<pid>/status`.
public struct ProcessMemory: Sendable, CustomStringConvertible {
    /// Resident set size now (`VmRSS`), bytes.
    public var residentBytes: Int
    /// Peak resident set size (`VmHWM`), bytes.
    public var peakResidentBytes: Int

    /// Reads the figures of `pid`; `nil` if the process is gone or the file lacks them (not Linux).
    public init?(pid: pid_t) {
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/status") else { return nil }
        var rss: Int?, hwm: Int?
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
            let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard parts.count >= 2, let kib = Int(parts[1]) else { continue }
            if parts[0] == "VmRSS:" { rss = kib * 1024 }
            if parts[0] == "VmHWM:" { hwm = kib * 1024 }
        }
        guard let rss, let hwm else { return nil }
        residentBytes = rss
        peakResidentBytes = hwm
    }

    public var description: String {
        "VmRSS \(residentBytes >> 20) MiB, VmHWM \(peakResidentBytes >> 20) MiB"
    }
}

/// A small tmpfs mounted by the test (root only), for disk-full tests. ``unmount()`` (also run
/// when the object is released) always unmounts and removes the mount point.
public final class TmpfsMount: Sendable {
    /// The mount point.
    public let path: String
    /// The size limit in bytes.
    public let sizeBytes: Int

    /// Mounts a tmpfs of `sizeBytes` on a new directory under `parent`. Throws with the reason if
    /// that is not possible here (not root, no `mount`, a container without `CAP_SYS_ADMIN`);
    /// tests probe first in an `.enabled(if:)` trait, so a machine that cannot mount reports a skip.
    public init(parent: String, sizeBytes: Int) async throws {
        guard geteuid() == 0 else { throw FerryTestKitError("mounting a tmpfs needs root (euid \(geteuid()))") }
        let point = parent + "/tmpfs"
        try FileManager.default.createDirectory(atPath: point, withIntermediateDirectories: true)
        let result = try await runProcess("/bin/mount", ["-t", "tmpfs", "-o", "size=\(sizeBytes),mode=0700", "tmpfs", point],
                                          timeout: .seconds(20))
        guard result.status == .exited(0) else {
            try? FileManager.default.removeItem(atPath: point)
            throw FerryTestKitError("mount -t tmpfs failed: \(result.stderr.trimmingCharacters(in: .whitespacesAndNewlines))")
        }
        path = point
        self.sizeBytes = sizeBytes
    }

    /// Free bytes on the filesystem now.
    public var freeBytes: Int {
        var stats = statvfs()
        guard statvfs(path, &stats) == 0 else { return -1 }
        return Int(stats.f_bavail) * Int(stats.f_frsize)
    }

    private let unmounted = Mutex(false)

    /// Unmounts (lazily if busy) and removes the mount point. Idempotent.
    public func unmount() {
        guard !unmounted.withLock({ done in defer { done = true }; return done }) else { return }
        #if canImport(Glibc)
        if umount2(path, 0) != 0 { _ = umount2(path, Int32(MNT_DETACH)) }
        #endif
        try? FileManager.default.removeItem(atPath: path)
    }

    deinit { unmount() }
}
