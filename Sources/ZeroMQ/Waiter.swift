#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CZeroMQ

/// Waits for sockets and plain descriptors owned by the calling thread with one `poll(2)` on
/// libzmq's notification descriptors (`ZMQ_FD`), asking a socket for `ZMQ_EVENTS` only when
/// its readiness may have changed.
///
/// `zmq_poll` asks every socket's command mailbox for `ZMQ_EVENTS` before it waits and again
/// after (a `poll(2)` and a `getpid(2)` per socket each time), and polls twice when nothing is
/// ready at first: an agent thread that serves four sockets made 50 system calls per event at a
/// trickle, most of them asking idle sockets whether anything had changed. This waiter relies on
/// libzmq's notification rule instead: a socket's `ZMQ_FD` becomes readable when commands reach
/// the socket while it is not processing them, and only commands change whether it is
/// readable. So a socket's `ZMQ_EVENTS` is read before a wait only if
/// - something called into libzmq on it since its last reading (a send or a receive processes
///   commands and may take the descriptor's signal without reporting a message: ``ZMQSocket``
///   marks itself on every call), or
/// - its last reading said it was readable (the caller may not have read everything), or
/// - its descriptor signalled during the wait.
/// When a socket is known to be ready, the wait only looks at the descriptors (`poll(2)` with a
/// zero timeout) so that a busy socket never hides a ready wake-up pipe.
///
/// Not `Sendable`, like the sockets it waits on: create it, use it and drop it on their thread.
public final class ZMQWaiter {
    private let items: [ZMQPollItem]
    /// One `pollfd` per item: a socket's `ZMQ_FD` (always `POLLIN`), or the plain descriptor.
    private var descriptors: [pollfd]
    /// What each socket's last `ZMQ_EVENTS` reading reported for the events asked.
    private var lastReady: [ZMQPollEvents]
    private var result: [ZMQPollEvents]
    /// The enabled items' descriptors of the current wait, and their items' indices (kept to
    /// reuse their storage).
    private var waiting: [pollfd] = []
    private var waitingIndex: [Int] = []

    /// Prepares to wait on `items` (reads each socket's `ZMQ_FD` once).
    public init(_ items: [ZMQPollItem]) throws(ZMQError) {
        self.items = items
        var descriptors: [pollfd] = []
        descriptors.reserveCapacity(items.count)
        for item in items {
            switch item {
            case .socket(let socket, _):
                let fd = try socket.option(ZMQ_FD)
                descriptors.append(pollfd(fd: fd, events: Int16(POLLIN), revents: 0))
            case .fileDescriptor(let fd, let events):
                var wanted: Int16 = 0
                if events.contains(.readable) { wanted |= Int16(POLLIN) }
                if events.contains(.writable) { wanted |= Int16(POLLOUT) }
                descriptors.append(pollfd(fd: fd, events: wanted, revents: 0))
            }
        }
        self.descriptors = descriptors
        self.lastReady = Array(repeating: [], count: items.count)
        self.result = Array(repeating: [], count: items.count)
    }

    /// Waits until one of the items with `enabled(index)` true is ready or `timeout` passes
    /// (`nil` = forever), and returns the ready events per item, in order (none for a disabled
    /// item). A disabled socket's notifications are kept for when it is enabled again.
    public func wait(timeout: Duration?, enabled: (Int) -> Bool = { _ in true }) throws(ZMQError) -> [ZMQPollEvents] {
        var anyReady = false
        for index in items.indices {
            result[index] = []
            guard enabled(index), case .socket(let socket, let events) = items[index] else { continue }
            if socket.eventsUnread || !lastReady[index].isEmpty {
                result[index] = try readEvents(socket, index: index, wanted: events)
                if !result[index].isEmpty { anyReady = true }
            }
        }
        // Only the enabled items take part in the wait (a disabled socket's signal stays
        // pending on its descriptor for later).
        waiting.removeAll(keepingCapacity: true)
        waitingIndex.removeAll(keepingCapacity: true)
        for index in items.indices where enabled(index) {
            waiting.append(pollfd(fd: descriptors[index].fd, events: descriptors[index].events, revents: 0))
            waitingIndex.append(index)
        }
        var milliseconds: CInt = anyReady ? 0 : Self.milliseconds(timeout)
        while waiting.withUnsafeMutableBufferPointer({ poll($0.baseAddress, nfds_t($0.count), milliseconds) }) < 0 {
            if errno != EINTR { throw ZMQError(code: errno, operation: "poll") }
            milliseconds = 0  // a signal: report what is ready now rather than wait again
        }
        for (slot, index) in waitingIndex.enumerated() where waiting[slot].revents != 0 {
            switch items[index] {
            case .socket(let socket, let events):
                result[index] = try readEvents(socket, index: index, wanted: events)
            case .fileDescriptor(_, let events):
                let revents = waiting[slot].revents
                var ready: ZMQPollEvents = []
                if events.contains(.readable) && revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 { ready.insert(.readable) }
                if events.contains(.writable) && revents & Int16(POLLOUT | POLLERR) != 0 { ready.insert(.writable) }
                result[index] = ready
            }
        }
        return result
    }

    /// Reads `ZMQ_EVENTS` (which processes the socket's pending commands and re-arms its
    /// `ZMQ_FD`) and remembers the answer.
    private func readEvents(_ socket: ZMQSocket, index: Int, wanted: ZMQPollEvents) throws(ZMQError) -> ZMQPollEvents {
        guard let handle = socket.pollHandle else { throw ZMQError(code: ENOTSOCK, operation: "zmq_getsockopt(ZMQ_EVENTS)") }
        var value: Int32 = 0
        var size = MemoryLayout<Int32>.size
        _ = try zmqCall("zmq_getsockopt(ZMQ_EVENTS)") { zmq_getsockopt(handle, ZMQ_EVENTS, &value, &size) }
        let ready = ZMQPollEvents(rawValue: Int16(truncatingIfNeeded: value)).intersection(wanted)
        socket.eventsUnread = false
        lastReady[index] = ready
        return ready
    }

    private static func milliseconds(_ timeout: Duration?) -> CInt {
        guard let timeout else { return -1 }
        let (seconds, attoseconds) = timeout.components
        let ms = Double(seconds) * 1000 + Double(attoseconds) / 1e15
        // Rounded up, so a short timeout never becomes a busy spin.
        return CInt(min(Double(CInt.max), max(0, ms.rounded(.up))))
    }
}
