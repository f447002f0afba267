#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Synchronization

/// A fresh, private directory with a short path (`/tmp/fy-<8 hex digits>`), removed with
/// everything in it by ``remove()`` or, as a safety net, when the object is released.
///
/// The path is short on purpose: a ZeroMQ `ipc://` endpoint is a Unix socket path, limited to
/// about 100 bytes, and agents put their sockets in a runtime directory inside it.
///
/// Set `FERRY_KEEP_TEST_DIRS=1` to keep the directories for post-mortem inspection.
///
/// ```swift
/// let dir = try TemporaryDirectory()
/// defer { dir.remove() }
/// let agent = try AgentProcess(in: dir)
/// ```
public final class TemporaryDirectory: Sendable, CustomStringConvertible {
    /// The absolute path of the directory.
    public let path: String
    private let removed = Atomic<Bool>(false)

    /// Creates a new, empty directory (mode 0700) under `parent` (default `/tmp`).
    public init(parent: String = "/tmp", prefix: String = "fy-") throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<100 {
            let suffix = String(generator.next() & 0xFFFF_FFFF, radix: 16)
            let candidate = "\(parent)/\(prefix)\(String(repeating: "0", count: 8 - suffix.count))\(suffix)"
            if mkdir(candidate, 0o700) == 0 {
                path = candidate
                return
            }
            if errno != EEXIST { break }
        }
        throw FerryTestKitError("cannot create a temporary directory under \(parent): \(String(cString: strerror(errno)))")
    }

    /// `path + "/" + component`.
    public func appending(_ component: String) -> String { path + "/" + component }

    /// Creates (if needed) and returns the subdirectory `component`.
    @discardableResult
    public func subdirectory(_ component: String) throws -> String {
        let sub = appending(component)
        try FileManager.default.createDirectory(atPath: sub, withIntermediateDirectories: true)
        return sub
    }

    /// Deletes the directory and its contents. Safe to call more than once.
    public func remove() {
        guard !removed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        if ProcessInfo.processInfo.environment["FERRY_KEEP_TEST_DIRS"] == "1" { return }
        try? FileManager.default.removeItem(atPath: path)
    }

    public var description: String { path }

    deinit { remove() }
}

/// An error raised by a FerryTestKit helper, with a message meant for the test log.
public struct FerryTestKitError: Error, CustomStringConvertible, Sendable {
    /// What went wrong.
    public var message: String

    /// Creates an error.
    public init(_ message: String) { self.message = message }

    public var description: String { message }
}
