#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Synchronization

/// Named places in the agent's durable work where a fault test may crash or fail it, driven by
/// the progress the agent reports rather than by the clock.
///
/// Disabled unless `ferryd` was started with one of these environment variables:
///
/// - `FERRY_PROGRESS_FILE=<path>`: every point reached appends a line `<name> <n>` (`n`: how
///   many times this process has reached it), so a test can run a change once without a fault,
///   learn every point and its count, then run it again faulting at each;
/// - `FERRY_CRASH_AT=<name>:<n>`: the process sends itself `SIGKILL` the `n`-th time it reaches
///   `<name>` (after reporting it);
/// - `FERRY_FAIL_AT=<name>:<n>`: the `n`-th time, ``reach(_:)`` throws a ``StorageError``
///   (code `io`) instead, as a failed write would.
///
/// When disabled a point costs one load and one branch.
package enum CrashPoints {
    /// Set once, at start, by ``configureFromEnvironment()`` when a variable above is present.
    nonisolated(unsafe) private static var armed = false

    /// Marks one point reached: reports it, and crashes or fails there if asked to.
    @inline(__always)
    package static func reach(_ name: StaticString) throws {
        if _slowPath(armed) { try registry?.reach(name.description) }
    }

    /// Reads the environment (once per process) and arms the points if a variable asks for it.
    /// Call it before any thread that reaches a point starts.
    package static func configureFromEnvironment() {
        // Written only when armed, and only before the threads that read it exist.
        if registry != nil && !armed { armed = true }
    }

    private static let registry: Registry? = Registry(environment: ProcessInfo.processInfo.environment)

    private final class Registry: Sendable {
        struct Target: Sendable {
            var name: String
            var count: Int
            init?(_ text: String?) {
                guard let text, let colon = text.lastIndex(of: ":"), let count = Int(text[text.index(after: colon)...]) else { return nil }
                name = String(text[..<colon])
                self.count = count
            }
        }

        let crash: Target?
        let fail: Target?
        let progress: CInt
        let counts = Mutex<[String: Int]>([:])

        init?(environment: [String: String]) {
            crash = Target(environment["FERRY_CRASH_AT"])
            fail = Target(environment["FERRY_FAIL_AT"])
            let path = environment["FERRY_PROGRESS_FILE"]
            guard crash != nil || fail != nil || path != nil else { return nil }
            progress = path.map { Glibc.open($0, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600) } ?? -1
        }

        func reach(_ name: String) throws {
            let count = counts.withLock { counts -> Int in
                counts[name, default: 0] += 1
                return counts[name]!
            }
            if progress >= 0 {
                // One write(2) per line on an O_APPEND file: lines never interleave, and the page
                // cache keeps them when the process is killed.
                let line = Array("\(name) \(count)\n".utf8)
                _ = line.withUnsafeBytes { Glibc.write(progress, $0.baseAddress, $0.count) }
            }
            if let crash, crash.name == name, crash.count == count {
                kill(getpid(), SIGKILL)
            }
            if let fail, fail.name == name, fail.count == count {
                throw StorageError(code: .io, message: "injected failure at \(name) (\(count))", errno: EIO)
            }
        }
    }
}
