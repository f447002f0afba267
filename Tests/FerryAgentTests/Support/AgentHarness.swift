import Foundation
@testable import FerryAgent
import FerryTestKit
import FerryProtocol
import Synchronization
import ZeroMQ

/// A reply on the ingest socket as a raw client sees it.
enum Reply: Equatable, CustomStringConvertible {
    case ack(requestID: UInt32, [AckEntry])
    case error(requestID: UInt32, ErrorReply)
    case unreadable([[UInt8]])

    var entries: [AckEntry]? {
        if case .ack(_, let entries) = self { return entries }
        return nil
    }

    var description: String {
        switch self {
        case .ack(let id, let entries):
            "ack #\(id) " + entries.map { "\($0.status)/\($0.reason)" }.joined(separator: ",")
        case .error(let id, let reply): "error #\(id) \(reply.code): \(reply.message)"
        case .unreadable(let frames): "unreadable \(frames.map(\.count))"
        }
    }

    static func decode(_ frames: [[UInt8]]) -> Reply {
        guard frames.count == 2, let header = try? MessageHeader(decoding: frames[0]) else { return .unreadable(frames) }
        switch header.kind {
        case .ack:
            guard let entries = try? AckCodec.decode(frames[1]) else { return .unreadable(frames) }
            return .ack(requestID: header.requestID, entries)
        case .error:
            guard let reply = try? ErrorReply(decoding: frames[1]) else { return .unreadable(frames) }
            return .error(requestID: header.requestID, reply)
        case .events:
            return .unreadable(frames)
        }
    }
}

/// Sends `messages` (each: header frame, then event frames) over one DEALER connection to the
/// agent's ingest socket, one at a time, and returns one reply per message. The socket lives and
/// dies on one dedicated thread.
func exchange(runtimeDirectory: String, _ messages: [[[UInt8]]], timeout: Duration = .seconds(15)) async throws -> [Reply] {
    try await offPool {
        let context = try ZMQContext()
        defer { context.terminate() }
        let socket = try ZMQSocket(context: context, type: .dealer)
        defer { socket.close() }
        try socket.connect(FerryPaths.ingestEndpoint(runtimeDirectory))
        var replies: [Reply] = []
        for (index, message) in messages.enumerated() {
            let writable = try ZMQPoller.poll([.socket(socket, .writable)], timeout: timeout)
            guard writable[0].contains(.writable), try socket.send(message, dontWait: true) else {
                throw TestFailure("could not send message \(index)")
            }
            let readable = try ZMQPoller.poll([.socket(socket, .readable)], timeout: timeout)
            guard readable[0].contains(.readable), let reply = try socket.receive(dontWait: true) else {
                throw TestFailure("no reply to message \(index) within \(timeout); replies so far: \(replies)")
            }
            replies.append(Reply.decode(reply))
        }
        return replies
    }
}

func eventsHeader(_ requestID: UInt32, version: UInt8 = ferryProtocolVersion) -> [UInt8] {
    var header = MessageHeader(kind: .events, requestID: requestID).encoded()
    header[0] = version
    return header
}

/// An in-process agent running in a task.
final class RunningAgent: Sendable {
    let agent: FerryAgent
    let task: Task<Void, any Error>

    /// Starts `agent` and waits until it serves (or fails to start).
    init(_ configuration: AgentConfiguration, sink: (any Sink)? = nil, timeout: Duration = .seconds(30)) async throws {
        let agent = FerryAgent(configuration: configuration, sink: sink, logger: quietLogger)
        let task = Task { try await agent.run() }
        self.agent = agent
        self.task = task
        do {
            // waitUntilReady() throws run()'s error if start-up fails.
            try await withTimeout(timeout, "the agent to be ready") { try await agent.waitUntilReady() }
        } catch {
            task.cancel()
            throw error
        }
    }

    /// Cancels the agent and waits for run() to return.
    func stop(timeout: Duration = .seconds(30)) async throws {
        task.cancel()
        try await value(of: task, timeout: timeout, "agent run() to return after cancellation")
    }

    var counters: [String: Int] { agent.counters.snapshot }
}

/// A runtime and data directory pair for an in-process agent.
func agentConfiguration(
    _ scratch: ScratchDirectory, maxEventBytes: Int = 2048, log: LogConfiguration = LogConfiguration()
) -> AgentConfiguration {
    AgentConfiguration(
        runtimeDirectory: scratch.appending("run"), dataDirectory: scratch.appending("data"),
        maxEventBytes: maxEventBytes, log: log,
        delivery: AgentConfiguration.Delivery(retryInitialMilliseconds: 10, retryMaxMilliseconds: 200))
}

/// The file sink's lines in `directory`, parsed as JSON objects, in write order.
func sinkLines(_ directory: String) throws -> [[String: Any]] {
    let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
        .filter { $0.hasPrefix("events-") && $0.hasSuffix(".jsonl") }.sorted()
    var objects: [[String: Any]] = []
    for name in names {
        let text = String(decoding: try readBytes(directory + "/" + name), as: UTF8.self)
        // A line still being written (no newline yet) is left out.
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        lines.removeLast()
        for line in lines {
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                throw TestFailure("sink line is not a JSON object: \(line)")
            }
            objects.append(object)
        }
    }
    return objects
}
