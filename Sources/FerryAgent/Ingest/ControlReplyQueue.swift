import FerryThreads

/// Control replies on their way to the control socket: the control thread answers, the socket
/// thread sends.
final class ControlReplyQueue: Sendable {
    /// One reply: the requester's routing envelope and the reply body.
    struct Reply: Sendable {
        var envelope: [[UInt8]]
        var body: [UInt8]
    }

    private let queue: SocketQueue<Reply>

    init(wakeup: SocketWakeup) {
        queue = SocketQueue(wakeup: wakeup)
    }

    /// Queues a control reply for the requester behind `envelope` (any thread).
    func reply(to envelope: [[UInt8]], _ body: [UInt8]) {
        queue.post(Reply(envelope: envelope, body: body))
    }

    /// Takes the replies queued (on the socket thread).
    func take() -> [Reply] { queue.take() }
}
