import FerryProtocol
import ZeroMQ

/// A misbehaving client on the agent's ingest socket, for fault tests: it sends as fast as the
/// socket takes messages and reads its replies only if told to (a client that never reads its
/// acks makes the agent's reply queue for it fill up).
///
/// The socket lives and dies on one dedicated thread.
public enum HostilePeer {
    /// What a run did.
    public struct Result: Sendable, CustomStringConvertible {
        /// Messages handed to the socket.
        public var messages = 0
        /// Event frames in them.
        public var events = 0
        /// Bytes in them.
        public var bytes = 0
        /// Replies read (0 for a peer that does not read).
        public var replies = 0

        public var description: String { "\(messages) messages, \(events) events, \(bytes >> 20) MiB sent, \(replies) replies read" }
    }

    /// Sends `count` messages made by `message(i)` (frames: header, then events), as fast as the
    /// socket accepts them. Reads (and discards) replies only if `readsReplies`. Stops early once
    /// `deadline` passes. Returns once everything sent has reached the agent's socket.
    public static func flood(
        runtimeDirectory: String, count: Int, readsReplies: Bool, deadline: ContinuousClock.Instant,
        message: @escaping @Sendable (Int) -> [[UInt8]]
    ) async throws -> Result {
        try await runOffPool {
            let context = try ZMQContext()
            defer { context.terminate() }
            let socket = try ZMQSocket(context: context, type: .dealer)
            // Closing waits (up to 60 s) until everything queued reached the agent, so the run
            // ends when the agent has been sent all of it, not when it is queued locally.
            try socket.setOption(.linger, 60_000)
            defer { socket.close() }
            try socket.connect(FerryPaths.ingestEndpoint(runtimeDirectory))
            var result = Result()
            var index = 0
            var next: [[UInt8]]? = nil
            while index < count && ContinuousClock.now < deadline {
                if next == nil { next = message(index) }
                var items: [ZMQPollItem] = [.socket(socket, .writable)]
                if readsReplies { items = [.socket(socket, [.writable, .readable])] }
                let ready = try ZMQPoller.poll(items, timeout: .milliseconds(100))
                if readsReplies && ready[0].contains(.readable) {
                    while (try socket.receive(dontWait: true)) != nil { result.replies += 1 }
                }
                if ready[0].contains(.writable), let frames = next, try socket.send(frames, dontWait: true) {
                    result.messages += 1
                    result.events += frames.count - 1
                    result.bytes += frames.reduce(0) { $0 + $1.count }
                    index += 1
                    next = nil
                }
            }
            return result
        }
    }

    /// An `events` message of `count` copies of `template` (an encoded event), each with a fresh
    /// id so the agent stores every one.
    public static func eventsMessage(requestID: UInt32, template: [UInt8], count: Int, ids: EventIDGenerator) -> [[UInt8]] {
        var frames: [[UInt8]] = [MessageHeader(kind: .events, requestID: requestID).encoded()]
        frames.reserveCapacity(count + 1)
        for _ in 0..<count {
            var frame = template
            let id = ids.next().bytes
            frame.replaceSubrange(0..<16, with: id)
            frames.append(frame)
        }
        return frames
    }
}
