import Foundation
import FerryProtocol
import FerryThreads
import Synchronization
import ZeroMQ

/// A scripted stand-in for the agent's control socket: a REP bound at
/// `ipc://<runtime dir>/control` that answers each request with the JSON a test gives. Use it to
/// check what a client puts on the wire and how it renders replies the real agent gives only in
/// rare moments (a broken audit chain, a refusal with `valid`).
///
/// ```swift
/// let fake = try FakeControlAgent(runtimeDirectory: dir.appending("rt")) { op, _ in
///     op == "start" ? #"{"ok":true,"delivery_started":true}"# : #"{"ok":false,"error":"no"}"#
/// }
/// defer { fake.stop() }
/// ```
public final class FakeControlAgent: Sendable {
    /// The reply (JSON text) to one request: its `op` (empty if none) and its raw JSON text.
    public typealias Script = @Sendable (_ op: String, _ request: String) -> String

    private final class Shared: Sendable {
        let received = Mutex<[[UInt8]]>([])
    }
    private let shared = Shared()
    private let socketThread: ScriptedSocketThread

    /// Binds the REP (creating `runtimeDirectory` if needed) and starts answering.
    public init(runtimeDirectory: String, script: @escaping Script) throws {
        let shared = self.shared
        socketThread = try ScriptedSocketThread(
            name: "ferry-fake-control", standIn: "fake control agent", type: .rep,
            endpoint: FerryPaths.controlEndpoint(runtimeDirectory), runtimeDirectory: runtimeDirectory
        ) { socket in
            guard let message = try? socket.receive(dontWait: true) else { return }
            let frame = message.first ?? []
            shared.received.withLock { $0.append(frame) }
            let object = (try? JSONSerialization.jsonObject(with: Data(frame))) as? [String: Any] ?? [:]
            let reply = script(object["op"] as? String ?? "", String(decoding: frame, as: UTF8.self))
            _ = try? socket.send([Array(reply.utf8)], dontWait: true)
        }
    }

    /// Every request received so far, as raw JSON text.
    public var requests: [String] { shared.received.withLock { $0.map { String(decoding: $0, as: UTF8.self) } } }

    /// Every request received so far, decoded (an empty object for one that was not JSON).
    public var requestObjects: [[String: Any]] {
        shared.received.withLock { $0 }.map { (try? JSONSerialization.jsonObject(with: Data($0))) as? [String: Any] ?? [:] }
    }

    /// Stops answering and unbinds. Idempotent.
    public func stop() { socketThread.stop() }
}
