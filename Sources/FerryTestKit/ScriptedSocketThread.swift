import Foundation
import FerryThreads
import Synchronization
import ZeroMQ

/// One ZeroMQ socket bound on a thread of its own, which owns it: each time the socket is
/// readable the thread hands it to `serve`, until `stop()`. The common part of the scripted
/// stand-ins for the agent's sockets (FakeIngestAgent, FakeControlAgent).
final class ScriptedSocketThread: Sendable {
    private final class Stopping: Sendable {
        let flag = Atomic<Bool>(false)
    }
    private let stopping = Stopping()
    private let thread: DedicatedThread

    /// Creates `runtimeDirectory` if needed, binds a `type` socket at `endpoint` on a thread named
    /// `name` and returns once it is bound; throws what binding threw, naming `stand-in`.
    init(name: String, standIn: String, type: ZMQSocketType, endpoint: String, runtimeDirectory: String,
         serve: @escaping @Sendable (ZMQSocket) -> Void) throws {
        try FileManager.default.createDirectory(atPath: runtimeDirectory, withIntermediateDirectories: true)
        let bound = ThreadInbox<Result<Void, FerryTestKitError>>()
        let stopping = self.stopping
        thread = DedicatedThread(name: name) {
            let context: ZMQContext
            let socket: ZMQSocket
            do {
                context = try ZMQContext()
                socket = try ZMQSocket(context: context, type: type)
                try socket.bind(endpoint)
            } catch {
                _ = bound.put(.failure(FerryTestKitError("\(standIn) cannot bind in \(runtimeDirectory): \(error)")))
                return
            }
            _ = bound.put(.success(()))
            while !stopping.flag.load(ordering: .acquiring) {
                guard let ready = try? ZMQPoller.poll([.socket(socket, .readable)], timeout: .milliseconds(20)),
                      ready[0].contains(.readable) else { continue }
                serve(socket)
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

    /// Stops serving and unbinds. Idempotent.
    func stop() {
        guard !stopping.flag.exchange(true, ordering: .acquiringAndReleasing) else { return }
        thread.join()
    }

    deinit { stop() }
}
