#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CoreMetrics
import FerryPeer
import FerryProtocol
import FerryStorage
import FerryThreads
import Logging
import Synchronization
import ZeroMQ

/// The agent's socket thread (`ferry-sockets`). It owns the agent's own ZeroMQ sockets — the
/// ingest paths own theirs (the ZeroMQ ingest socket is `FerryZeroMQIngest`'s, on its thread):
///
/// - `events` (XPUB): publishes bus messages, tracking subscriptions so nothing is serialised
///   for a topic nobody listens to;
/// - `control` (ROUTER, answering REQ clients like a REP socket): answers JSON requests through
///   the agent's handler, which may reply later (a dead-letter replay waits on a sink) without
///   holding up other requests.
///
/// Other threads talk to it through its queues — the ``EventBus``, the ``ControlReplyQueue`` —
/// and their `SocketWakeup`, never by touching a socket. Control requests are answered on the
/// agent's control thread, so a request that reads files never holds up the sockets.
final class AgentSockets: Sendable {
    private let context: ZMQContext
    private let configuration: AgentConfiguration
    private let logger: Logger
    private let wakeup: SocketWakeup
    private let bus: EventBus
    private let replies: ControlReplyQueue
    private let controlThread: BlockingExecutor
    private let stopping = Atomic<Bool>(false)
    private let thread = Mutex<DedicatedThread?>(nil)
    private let control: ControlHandler

    /// Answers one control request: the request frame, the caller's kernel credentials, and a
    /// function to call exactly once, from any thread, at once or later, with the reply.
    typealias ControlHandler = @Sendable (_ request: [UInt8], _ peer: PeerCredentials?, _ reply: @escaping @Sendable ([UInt8]) -> Void) -> Void

    /// `control` answers a request by calling its reply function once, at once or later; it is
    /// called on `controlThread`, never on the socket thread.
    init(
        context: ZMQContext, configuration: AgentConfiguration, bus: EventBus, wakeup: SocketWakeup, replies: ControlReplyQueue,
        logger: Logger, controlThread: BlockingExecutor, control: @escaping ControlHandler
    ) {
        self.context = context
        self.configuration = configuration
        self.wakeup = wakeup
        self.bus = bus
        self.replies = replies
        self.logger = logger
        self.controlThread = controlThread
        self.control = control
    }

    /// Binds the sockets on the server thread and starts serving. Throws if binding fails.
    func start() throws {
        let ready = ThreadInbox<Result<Void, AgentError>>()
        let thread = DedicatedThread(name: "ferry-sockets") { [self] in
            let sockets: Sockets
            do {
                sockets = try bind()
            } catch {
                ready.put(.failure(error as? AgentError ?? AgentError(code: .socket, message: "\(error)")))
                return
            }
            ready.put(.success(()))
            serve(sockets)
            sockets.close()
        }
        self.thread.withLock { $0 = thread }
        while true {
            if let result = ready.takeAll(timeout: .seconds(10))?.first {
                try result.get()
                return
            }
        }
    }

    /// Sends the bus messages and control replies queued and closes the sockets. Call after the
    /// ingest paths stopped (so the outcomes of their last acks are queued).
    func stop() async {
        stopping.store(true, ordering: .releasing)
        wakeup.wake()
        if let thread = thread.withLock({ $0 }) { await thread.joinAsync() }
        wakeup.close()
    }

    // MARK: The socket thread

    private struct Sockets {
        var events: ZMQSocket
        var control: ZMQSocket
        /// Waits on the wake-up pipe and the two sockets, in this order: one poll(2) on the
        /// sockets' notification descriptors, asking a socket whether it is readable only when
        /// that may have changed (zmq_poll asked each twice per turn).
        let waiter: ZMQWaiter
        func close() {
            events.close()
            control.close()
        }
    }

    private func bind() throws -> Sockets {
        let runtime = configuration.runtimeDirectory
        do {
            let events = try ZMQSocket(context: context, type: .xpub)
            try events.setSendHighWaterMark(100_000)
            try events.bind(FerryPaths.eventsEndpoint(runtime))
            let control = try ZMQSocket(context: context, type: .router)
            try control.bind(FerryPaths.controlEndpoint(runtime))
            try setSocketFileModes()
            let waiter = try ZMQWaiter([
                .fileDescriptor(wakeup.pipe.readEnd, .readable),
                .socket(events, .readable),
                .socket(control, .readable),
            ])
            return Sockets(events: events, control: control, waiter: waiter)
        } catch let error as AgentError {
            throw error
        } catch {
            throw AgentError(code: .socket, message: "cannot bind in \(runtime): \(error)", cause: error)
        }
    }

    /// Gives the socket files explicit modes (not whatever the umask gave). A per-user agent's
    /// are its user's alone. A system agent's `control` is connectable by every local user — the
    /// access policy is checked per request, so a refused peer gets an error reply instead of a
    /// silent `EACCES` — and `events`, which promises no reply, is guarded by the kernel: open to
    /// all (0666) when the policy says every user, else to one group (0660). (The ingest path
    /// sets its own socket's.)
    private func setSocketFileModes() throws {
        let runtime = configuration.runtimeDirectory
        func set(_ name: String, _ mode: mode_t, group: gid_t? = nil) throws {
            let path = runtime + "/" + name
            if let group, chown(path, getuid(), group) != 0 {
                let reason = String(cString: strerror(errno))
                // Only a member may give a file to a group: the usual cause on a new host.
                let hint = errno == EPERM
                    ? "; ferryd's user (uid \(getuid())) must be a member of the group access.events names (usermod --append --groups <group> <user>, then restart)"
                    : ""
                throw AgentError(code: .socket, message: "cannot give \(path) to group \(group): \(reason)\(hint)")
            }
            if chmod(path, mode) != 0 {
                throw AgentError(code: .socket, message: "cannot set the mode of \(path): \(String(cString: strerror(errno)))")
            }
        }
        switch configuration.mode {
        case .user:
            for name in ["events", "control"] { try set(name, 0o600) }
        case .system:
            try set("control", 0o666)
            switch try AccessControl.busGroup(configuration.access.events) {
            case .everyone: try set("events", 0o666)
            case .group(let gid): try set("events", 0o660, group: gid)
            case .owner: try set("events", 0o600)
            }
        }
    }

    private func serve(_ sockets: Sockets) {
        var stoppingSeen = false
        while true {
            let ready: [ZMQPollEvents]
            do {
                ready = try sockets.waiter.wait(timeout: .milliseconds(500))
            } catch {
                if error.isContextTerminated { return }
                logger.error("poll failed", metadata: ["error": "\(error)"])
                continue
            }
            if ready[0].contains(.readable) { wakeup.pipe.drain() }
            sendOutbound(sockets)
            if ready[1].contains(.readable) { readSubscriptions(sockets.events) }
            if ready[2].contains(.readable) { answerControl(sockets.control) }
            if stopping.load(ordering: .acquiring) {
                if stoppingSeen {
                    sendOutbound(sockets)
                    return
                }
                // One more round: send whatever was posted last.
                stoppingSeen = true
            }
        }
    }

    /// Sends what other threads queued: bus messages, control replies.
    private func sendOutbound(_ sockets: Sockets) {
        bus.take { topic, json in send(sockets.events, [Array(topic.rawValue.utf8), json]) }
        for reply in replies.take() {
            send(sockets.control, reply.envelope + [reply.body])
        }
    }

    private func send(_ socket: ZMQSocket, _ frames: [[UInt8]]) {
        do {
            // Never block the socket thread on a slow peer: a subscriber that does not read hits
            // its high-water mark and loses bus messages; a control client, its reply.
            _ = try socket.send(frames, dontWait: true)
        } catch {
            logger.debug("send failed", metadata: ["error": "\(error)"])
        }
    }

    private func readSubscriptions(_ socket: ZMQSocket) {
        while let message = try? socket.receive(dontWait: true) {
            guard let frame = message.first, let flag = frame.first else { continue }
            if flag <= 1 { bus.updateSubscription(Array(frame.dropFirst()), subscribe: flag == 1) }
        }
    }

    private func answerControl(_ socket: ZMQSocket) {
        for _ in 0..<64 {
            // A REQ client's message arrives as [routing id, empty delimiter, body]; the kernel
            // tells who sent it (SO_PEERCRED on the IPC connection), for the consent audit log.
            guard let (message, peer) = try? socket.receiveWithPeer(dontWait: true) else { return }
            guard let delimiter = message.firstIndex(where: \.isEmpty), delimiter > 0 else { continue }
            let envelope = Array(message[...delimiter])
            let body = message.count == delimiter + 2 ? message[delimiter + 1] : []
            let control = self.control, replies = self.replies
            controlThread.submit {
                control(body, peer) { reply in replies.reply(to: envelope, reply) }
            }
        }
    }
}
