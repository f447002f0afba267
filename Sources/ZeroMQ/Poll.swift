import CZeroMQ

/// What to wait for in ``ZMQPoller/poll(_:timeout:)``.
public struct ZMQPollEvents: OptionSet, Sendable {
    public let rawValue: Int16
    public init(rawValue: Int16) { self.rawValue = rawValue }
    /// A message (or, for a file descriptor, data) can be read without blocking.
    public static let readable = ZMQPollEvents(rawValue: Int16(ZMQ_POLLIN))
    /// A message can be sent without blocking.
    public static let writable = ZMQPollEvents(rawValue: Int16(ZMQ_POLLOUT))
}

/// One entry of a poll set: a socket or a plain file descriptor (a wake-up pipe, say).
public enum ZMQPollItem {
    case socket(ZMQSocket, ZMQPollEvents)
    case fileDescriptor(CInt, ZMQPollEvents)
}

/// `zmq_poll` over sockets and descriptors owned by the calling thread.
public enum ZMQPoller {
    /// Waits until one of `items` is ready or `timeout` passes (`nil` = forever).
    ///
    /// Returns the ready events per item, in order. The timeout is converted to the
    /// milliseconds `zmq_poll` expects (rounded up, so a short timeout never becomes a busy spin).
    public static func poll(_ items: [ZMQPollItem], timeout: Duration?) throws(ZMQError) -> [ZMQPollEvents] {
        var raw: [zmq_pollitem_t] = items.map { item in
            switch item {
            case .socket(let socket, let events):
                zmq_pollitem_t(socket: socket.pollHandle, fd: -1, events: events.rawValue, revents: 0)
            case .fileDescriptor(let fd, let events):
                zmq_pollitem_t(socket: nil, fd: fd, events: events.rawValue, revents: 0)
            }
        }
        let milliseconds: Int
        if let timeout {
            let (seconds, attoseconds) = timeout.components
            let ms = Double(seconds) * 1000 + Double(attoseconds) / 1e15
            milliseconds = max(0, Int(ms.rounded(.up)))
        } else {
            milliseconds = -1
        }
        let count = CInt(raw.count)
        _ = try zmqCall("zmq_poll") { zmq_poll(&raw, count, milliseconds) }
        return raw.map { ZMQPollEvents(rawValue: $0.revents) }
    }
}
