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
        let stopping = Atomic<Bool>(false)
        let received = Mutex<[(header: MessageHeader, events: [[UInt8]])]>([])
    }
    private let shared = Shared()
    private let thread: DedicatedThread

    /// Binds the ROUTER (creating `runtimeDirectory` if needed) and starts answering.
    public init(runtimeDirectory: String, script: @escaping Script) throws {
        try FileManager.default.createDirectory(atPath: runtimeDirectory, withIntermediateDirectories: true)
        let bound = ThreadInbox<Result<Void, FerryTestKitError>>()
        let shared = self.shared
        thread = DedicatedThread(name: "ferry-fake-agent") {
            let context: ZMQContext
            let socket: ZMQSocket
            do {
                context = try ZMQContext()
                socket = try ZMQSocket(context: context, type: .router)
                try socket.bind(FerryPaths.ingestEndpoint(runtimeDirectory))
            } catch {
                _ = bound.put(.failure(FerryTestKitError("fake agent cannot bind in \(runtimeDirectory): \(error)")))
                return
            }
            _ = bound.put(.success(()))
            var index = 0
            while !shared.stopping.load(ordering: .acquiring) {
                guard let ready = try? ZMQPoller.poll([.socket(socket, .readable)], timeout: .milliseconds(20)),
                      ready[0].contains(.readable) else { continue }
                while let message = try? socket.receive(dontWait: true) {
                    guard message.count >= 2, let header = try? MessageHeader(decoding: message[1]) else { continue }
                    let events = Array(message.dropFirst(2))
                    shared.received.withLock { $0.append((header, events)) }
                    if let reply = script(index, header, events) { _ = try? socket.send([message[0]] + reply, dontWait: true) }
                    index += 1
                }
            }
            socket.close()
            context.terminate()
        }
        while true {
            if let result = bound.takeAll(timeout: .seconds(10))?.first {
                try result.get()
                return
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
    public func stop() {
        guard !shared.stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        thread.join()
    }

    deinit { stop() }

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
