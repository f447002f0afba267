#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol
import FerryTestKit
import FerryThreads
import Foundation
import Synchronization

/// The service manager's end of the `sd_notify` protocol, for tests: a datagram socket bound at
/// a path. Start ferryd with `NOTIFY_SOCKET=<path>` and read what it says, in order.
///
/// ```swift
/// let notify = try NotifySocket(path: dir.appending("notify"))
/// defer { notify.close() }
/// // … start ferryd with ["NOTIFY_SOCKET": notify.path] …
/// let ready = try await notify.next(timeout: .seconds(30))   // "READY=1\nSTATUS=serving"
/// ```
public final class NotifySocket: Sendable {
    /// The socket's path (the value for `NOTIFY_SOCKET`).
    public let path: String
    private let fd: CInt
    /// What the reader thread received, and how much of it ``next(timeout:)`` handed out.
    private let shared = Shared()

    private final class Shared: Sendable {
        let inbox = Mutex<Inbox>(Inbox())
    }

    private struct Inbox {
        var received: [String] = []
        var consumed = 0
        var closed = false
    }

    /// Binds a datagram socket at `path` and starts reading it at once on a thread of its own, as
    /// a service manager does: the sender's queue never fills because the test is busy elsewhere.
    public init(path: String) throws {
        self.path = path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw FerryTestKitError("socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            Glibc.close(fd)
            throw FerryTestKitError("notify socket path too long: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else {
            let message = String(cString: strerror(errno))
            Glibc.close(fd)
            throw FerryTestKitError("bind \(path): \(message)")
        }
        let socketFD = fd, shared = self.shared
        _ = DedicatedThread(name: "notify-socket") {
            var buffer = [UInt8](repeating: 0, count: 4096)
            // Polls with a short timeout only to notice close(); the socket is closed here.
            while !shared.inbox.withLock({ $0.closed }) {
                var poller = pollfd(fd: socketFD, events: Int16(POLLIN), revents: 0)
                guard poll(&poller, 1, 100) == 1 else { continue }
                let count = recv(socketFD, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                guard count >= 0 else { continue }
                let message = String(decoding: buffer[0..<count], as: UTF8.self)
                shared.inbox.withLock { $0.received.append(message) }
            }
            Glibc.close(socketFD)
        }
    }

    /// The next notification in arrival order (one datagram: newline-separated `KEY=VALUE`
    /// lines), waiting at most `timeout`.
    public func next(timeout: Duration) async throws -> String {
        do {
            return try await waitForValue("a notification on \(path)", timeout: timeout, pollInterval: .milliseconds(10)) {
                shared.inbox.withLock { inbox -> String? in
                    guard inbox.consumed < inbox.received.count else { return nil }
                    defer { inbox.consumed += 1 }
                    return inbox.received[inbox.consumed]
                }
            }
        } catch is EventuallyTimeout {
            throw FerryTestKitError("no notification on \(path) within \(timeout)")
        }
    }

    /// Reads notifications until one has the line `line` (such as `READY=1`); returns every
    /// notification read, that one last. Throws after `timeout`, listing what came instead.
    public func waitFor(_ line: String, timeout: Duration) async throws -> [String] {
        let deadline = ContinuousClock.now + timeout
        var seen: [String] = []
        while true {
            let left = deadline - ContinuousClock.now
            guard left > .zero else { throw FerryTestKitError("no \(line) within \(timeout); saw \(seen)") }
            let message: String
            do {
                message = try await next(timeout: left)
            } catch {
                throw FerryTestKitError("no \(line) within \(timeout); saw \(seen)")
            }
            seen.append(message)
            if message.split(separator: "\n").contains(Substring(line)) { return seen }
        }
    }

    /// Stops reading, closes the socket (on the reader thread) and removes its file.
    public func close() {
        shared.inbox.withLock { $0.closed = true }
        unlink(path)
    }
}
