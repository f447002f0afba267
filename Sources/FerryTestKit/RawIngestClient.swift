import FerryProtocol
import ZeroMQ

/// A reply from the agent's ingest socket, as a raw client sees it.
public enum IngestReply: Sendable, Hashable, CustomStringConvertible {
    /// Per-event statuses for the message with this request id.
    case ack(requestID: UInt32, entries: [AckEntry])
    /// The whole message was refused.
    case error(requestID: UInt32, ErrorReply)
    /// Something this client cannot decode (reported as is).
    case unreadable([[UInt8]])

    /// The request id echoed by the agent, if the reply is readable.
    public var requestID: UInt32? {
        switch self {
        case .ack(let id, _), .error(let id, _): id
        case .unreadable: nil
        }
    }

    /// The per-event entries of an ack, `nil` for any other reply.
    public var entries: [AckEntry]? {
        if case .ack(_, let entries) = self { return entries }
        return nil
    }

    public var description: String {
        switch self {
        case .ack(let id, let entries):
            "ack #\(id) [" + entries.map { "\($0.id) \($0.status)\($0.reason == .none ? "" : "(\($0.reason))")" }.joined(separator: ", ") + "]"
        case .error(let id, let reply): "error #\(id) \(reply.code): \(reply.message)"
        case .unreadable(let frames): "unreadable reply: \(frames.map(\.count)) bytes per frame"
        }
    }
}

/// A bare DEALER on the agent's ingest socket, for sending hand-made (often broken) messages.
///
/// ``exchange(runtimeDirectory:messages:timeout:)`` uses one connection for all the messages,
/// sends them one at a time and waits for each reply, so a test can show that the agent keeps
/// serving a client after refusing its garbage. The socket lives and dies on one dedicated
/// thread (ZeroMQ sockets are not thread-safe).
public enum RawIngestClient {
    /// Sends each message (a list of frames: header, then event frames) and collects one reply
    /// per message, in order. Throws if a reply takes longer than `timeout`.
    public static func exchange(
        runtimeDirectory: String, messages: [[[UInt8]]], timeout: Duration = .seconds(10)
    ) async throws -> [IngestReply] {
        try await runOffPool {
            let context = try ZMQContext()
            defer { context.terminate() }
            let socket = try ZMQSocket(context: context, type: .dealer)
            defer { socket.close() }
            try socket.connect(FerryPaths.ingestEndpoint(runtimeDirectory))
            var replies: [IngestReply] = []
            for (index, message) in messages.enumerated() {
                let writable = try ZMQPoller.poll([.socket(socket, .writable)], timeout: timeout)
                guard writable[0].contains(.writable), try socket.send(message, dontWait: true) else {
                    throw FerryTestKitError("could not send message \(index) to \(runtimeDirectory)/ingest within \(timeout)")
                }
                let readable = try ZMQPoller.poll([.socket(socket, .readable)], timeout: timeout)
                guard readable[0].contains(.readable), let reply = try socket.receive(dontWait: true) else {
                    throw FerryTestKitError("no reply to message \(index) within \(timeout); replies so far: \(replies)")
                }
                replies.append(decode(reply))
            }
            return replies
        }
    }

    /// Decodes a reply message (`[header][body]`).
    public static func decode(_ frames: [[UInt8]]) -> IngestReply {
        guard frames.count == 2, let header = try? MessageHeader(decoding: frames[0]) else { return .unreadable(frames) }
        switch header.kind {
        case .ack:
            guard let entries = try? AckCodec.decode(frames[1]) else { return .unreadable(frames) }
            return .ack(requestID: header.requestID, entries: entries)
        case .error:
            guard let reply = try? ErrorReply(decoding: frames[1]) else { return .unreadable(frames) }
            return .error(requestID: header.requestID, reply)
        case .events:
            return .unreadable(frames)
        }
    }
}

/// Builders for test events and input.
public enum TestEvents {
    private static let ids = EventIDGenerator()

    /// A valid wire event with a fresh id; `propertyBytes` pads the properties object to about
    /// that many bytes.
    public static func wireEvent(
        name: String, source: String, sequence: UInt64, propertyBytes: Int = 0, pid: UInt32 = 4242
    ) -> WireEvent {
        var properties: [UInt8] = []
        if propertyBytes > 0 {
            properties = Array(#"{"pad":""#.utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: propertyBytes) + Array(#""}"#.utf8)
        }
        return WireEvent(id: ids.next(), timestamp: WallClock.unixMilliseconds(), sequence: sequence, pid: pid,
                         type: .track, source: source, name: name, properties: properties)
    }

    /// An `events` message header frame.
    public static func header(requestID: UInt32, version: UInt8 = ferryProtocolVersion, kind: MessageKind = .events) -> [UInt8] {
        MessageHeader(version: version, kind: kind, requestID: requestID).encoded()
    }

    /// `count` JSON lines for `ferry emit --stdin`: `{"name":"<prefix>-<i>","properties":{"i":i}}`,
    /// `i` from `first`. `padding` adds a string property of that many bytes.
    public static func jsonLines(count: Int, namePrefix: String, first: Int = 1, padding: Int = 0) -> String {
        let pad = padding > 0 ? #","pad":""# + String(repeating: "x", count: padding) + #"""# : ""
        var text = ""
        text.reserveCapacity(count * (40 + namePrefix.utf8.count + padding))
        for i in first..<(first + count) {
            text += #"{"name":"\#(namePrefix)-\#(i)","properties":{"i":\#(i)\#(pad)}}"# + "\n"
        }
        return text
    }
}
