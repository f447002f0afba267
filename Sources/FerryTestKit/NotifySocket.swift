#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

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

    /// Binds a datagram socket at `path` (at most ~100 bytes).
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
    }

    /// The next datagram as text, waiting at most `timeout` (off the Swift concurrency pool).
    public func next(timeout: Duration) async throws -> String {
        let fd = self.fd, path = self.path
        let milliseconds = Int32(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        return try await runOffPool {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, milliseconds) == 1 else {
                throw FerryTestKitError("no notification on \(path) within \(timeout)")
            }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = recv(fd, &buffer, buffer.count, 0)
            guard count >= 0 else { throw FerryTestKitError("recv \(path): \(String(cString: strerror(errno)))") }
            return String(decoding: buffer[0..<count], as: UTF8.self)
        }
    }

    /// Waits for a datagram whose lines include `line`, returning every datagram seen up to it.
    public func waitFor(_ line: String, timeout: Duration) async throws -> [String] {
        let deadline = ContinuousClock.now + timeout
        var seen: [String] = []
        while true {
            let left = deadline - ContinuousClock.now
            guard left > .zero else { throw FerryTestKitError("no \(line) within \(timeout); saw \(seen)") }
            let message = try await next(timeout: left)
            seen.append(message)
            if message.split(separator: "\n").contains(Substring(line)) { return seen }
        }
    }

    /// Closes the socket and removes its file.
    public func close() {
        Glibc.close(fd)
        unlink(path)
    }
}
