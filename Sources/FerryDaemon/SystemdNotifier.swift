#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// The service manager's notification protocol (`sd_notify(3)`) without libsystemd: one datagram
/// per message to the `AF_UNIX` socket named by `NOTIFY_SOCKET` (a path, or `@name` for the
/// abstract namespace). Without `NOTIFY_SOCKET` every call does nothing.
///
/// `ferryd` sends `READY=1` once the agent has recovered and bound its ingest socket,
/// `STOPPING=1` when it begins to shut down, `RELOADING=1`/`READY=1` around a reload, and
/// `WATCHDOG=1` every half ``watchdogInterval`` when the unit sets `WatchdogSec=`.
package struct SystemdNotifier: Sendable {
    /// State messages waiting for room in the manager's queue: watchdog pings hold back meanwhile,
    /// so they never take the room a READY=1 or STOPPING=1 waits for.
    private let waitingStates = WaitingStates()

    private final class WaitingStates: Sendable {
        let count = Atomic<Int>(0)
    }

    /// The socket path (`@` first for the abstract namespace), or `nil` when not supervised.
    package let socketPath: String?
    /// The watchdog period from `WATCHDOG_USEC` (when `WATCHDOG_PID`, if set, is this process).
    package let watchdogInterval: Duration?

    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` from `environment`.
    package init(environment: [String: String]) {
        let path = environment["NOTIFY_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
        socketPath = path.flatMap { $0.hasPrefix("/") || $0.hasPrefix("@") ? $0 : nil }
        if let text = environment["WATCHDOG_USEC"], let usec = UInt64(text), usec > 0,
           environment["WATCHDOG_PID"].map({ $0 == String(getpid()) }) ?? true {
            watchdogInterval = .microseconds(Int64(clamping: usec))
        } else {
            watchdogInterval = nil
        }
    }

    /// Whether a service manager listens.
    package var isEnabled: Bool { socketPath != nil }

    /// Sends `state` (newline-separated `KEY=VALUE` lines) in one datagram. Never blocks a thread:
    /// while the manager's queue is full, a state change is retried every 10 ms for up to 30 s
    /// (watchdog pings wait meanwhile) and a watchdog ping (`WATCHDOG=1`, sent again soon
    /// anyway) is dropped. Returns false if it was not sent; the protocol has no reply, so
    /// failures are only worth a log line.
    @discardableResult
    package func notify(_ state: String) async -> Bool {
        guard isEnabled else { return true }
        let isPing = state == "WATCHDOG=1"
        if isPing {
            guard waitingStates.count.load(ordering: .relaxed) == 0 else { return false }
            return send(state) == .sent
        }
        waitingStates.count.add(1, ordering: .relaxed)
        defer { waitingStates.count.subtract(1, ordering: .relaxed) }
        let deadline = ContinuousClock.now + .seconds(30)
        while true {
            switch send(state) {
            case .sent: return true
            case .failed: return false
            case .full:
                if ContinuousClock.now >= deadline { return false }
                try? await Task.sleep(for: .milliseconds(10))
            }
        }
    }

    private enum Outcome { case sent, full, failed }

    private func send(_ state: String) -> Outcome {
        guard let socketPath else { return .sent }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return .failed }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(socketPath.utf8)
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else { return .failed }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (bytes.first == 0 ? 0 : 1))
        let message = Array(state.utf8)
        // errno is read right after sendto, before anything else can change it.
        let (sent, error) = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { addr in
                message.withUnsafeBytes { bytes -> (Int, Int32) in
                    let sent = sendto(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT), addr, length)
                    return (sent, sent < 0 ? errno : 0)
                }
            }
        }
        if sent == message.count { return .sent }
        return error == EAGAIN || error == EWOULDBLOCK ? .full : .failed
    }
}
