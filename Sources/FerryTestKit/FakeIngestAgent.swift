import Foundation
import FerryProtocol
import FerryThreads
import Synchronization
import ZeroMQ

/// A scripted stand-in for the agent's ingest socket: a ROUTER bound at
/// `ipc://<runtime dir>/ingest` that answers each message as a test says. Use it to drive the
/// client library through replies a real agent only gives in rare moments (an error reply while
/// shutting down, a lost ack, …).
///
/// ```swift
/// let fake = try FakeIngestAgent(runtimeDirectory: dir.appending("rt")) { index, header, events in
///     index == 0 ? FakeIngestAgent.error(header, .shuttingDown) : FakeIngestAgent.ack(header, events)
/// }
/// defer { fake.stop() }
/// ```
public final class FakeIngestAgent: Sendable {
    /// Decides the reply to message number `index` (from 0): the reply frames (header, body), or
    /// `nil` to stay silent.
    public typealias Script = @Sendable (_ index: Int, _ header: MessageHeader, _ events: [[UInt8]]) -> [[UInt8]]?

    private final class Shared: Sendable {
        let received = Mutex<[(header: MessageHeader, events: [[UInt8]])]>([])
    }
    private let shared = Shared()
    private let socketThread: ScriptedSocketThread

    /// Binds the ROUTER (creating `runtimeDirectory` if needed) and starts answering.
    public init(runtimeDirectory: String, script: @escaping Script) throws {
        let shared = self.shared
        socketThread = try ScriptedSocketThread(
            name: "ferry-fake-agent", standIn: "fake agent", type: .router,
            endpoint: FerryPaths.ingestEndpoint(runtimeDirectory), runtimeDirectory: runtimeDirectory
        ) { socket in
            while let message = try? socket.receive(dontWait: true) {
                guard message.count >= 2, let header = try? MessageHeader(decoding: message[1]) else { continue }
                let events = Array(message.dropFirst(2))
                // The message's number: how many came before it (only this thread appends).
                let index = shared.received.withLock { $0.append((header, events)); return $0.count - 1 }
                if let reply = script(index, header, events) { _ = try? socket.send([message[0]] + reply, dontWait: true) }
            }
        }
    }

    /// How many messages arrived so far.
    public var messageCount: Int { shared.received.withLock { $0.count } }

    /// The ids of the events of every message so far, per message.
    public var receivedIDs: [[EventID]] {
        shared.received.withLock { $0.map { $0.events.map { EventID(bytes: $0) } } }
    }

    /// Stops answering and unbinds. Idempotent.
    public func stop() { socketThread.stop() }

    /// An ack giving every event `status`.
    public static func ack(_ header: MessageHeader, _ events: [[UInt8]], status: EventStatus = .accepted,
                           reason: RejectReason = .none) -> [[UInt8]] {
        let entries = events.map { AckEntry(id: EventID(bytes: $0), status: status, reason: reason) }
        return [MessageHeader(version: header.version, kind: .ack, requestID: header.requestID).encoded(), AckCodec.encode(entries)]
    }

    /// An error reply with `code`.
    public static func error(_ header: MessageHeader, _ code: ErrorCode, _ message: String = "scripted error") -> [[UInt8]] {
        [MessageHeader(version: header.version, kind: .error, requestID: header.requestID).encoded(), ErrorReply(code: code, message: message).encoded()]
    }
}
