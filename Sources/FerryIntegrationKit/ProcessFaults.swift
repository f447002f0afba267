#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryTestKit
import Foundation
import Synchronization

// Faults that need the system around a test: memory figures of a process, a tmpfs of a chosen
// size (mounted with mount(8), so root only).

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
