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

/// The agent's socket thread. It owns every ZeroMQ socket of the agent:
///
/// - `ingest` (ROUTER): decodes and validates event messages, hands them to the commit thread and
///   sends the acks it gets back;
/// - `events` (XPUB): publishes bus messages, tracking subscriptions so nothing is serialised
///   for a topic nobody listens to;
/// - `control` (ROUTER, answering REQ clients like a REP socket): answers JSON requests through
///   the agent's handler, which may reply later (a dead-letter replay waits on a sink) without
///   holding up other requests.
///
/// It is the ZeroMQ ingest path: it owns the protocol (frames, headers, error replies, acks) and
/// hands every message through the ``IngestStages`` every path shares (admission, limits, the
/// commit, the bus). Other threads talk to it through its queues — the ``AckQueue``, the
/// ``EventBus``, the ``ControlReplyQueue`` — and their ``SocketWakeup``, never by touching a
/// socket. Control requests are answered on the agent's control thread, so a request that reads
/// files never holds up the sockets.
final class AgentSockets: Sendable {
    /// The most event frames in one message.
    static let maxEventsPerMessage = 4096
    /// Inbound frames above this size drop the connection in libzmq (hostile-peer bound); between
    /// `maxEventBytes` and this, an event is rejected `too_large` with an ack.
    static let hardFrameLimit: Int64 = 16 << 20
    /// Unread messages libzmq queues per client connection: beyond them a client's batches wait
    /// in the kernel's socket buffer and its own outbox, not in agent memory. (libzmq holds a
    /// little more than this: the message being decoded, and reads acknowledged in steps.) Not 1:
    /// libzmq's reader then hands its I/O thread a command after every message read (its
    /// low-water mark is half the high one), which halved the one-event-per-message rate.
    static let receiveHighWaterMark: Int32 = 4
    /// Event frames read per round before the acks and control requests get a turn.
    static let maxFramesPerRound = 8192

    private let context: ZMQContext
    private let configuration: AgentConfiguration
    private let stages: IngestStages
    private let counters: AgentMetrics
    private let logger: Logger
    private let wakeup: SocketWakeup
    private let acks: AckQueue
    private let bus: EventBus
    private let replies: ControlReplyQueue
    private let controlThread: BlockingExecutor
    private let stopping = Atomic<Bool>(false)
    private let intakeStopped = Atomic<Bool>(false)
    private let thread = Mutex<DedicatedThread?>(nil)
    private let control: ControlHandler
    private let origins = OriginResolver()

    /// Answers one control request: the request frame, the caller's kernel credentials, and a
    /// function to call exactly once, from any thread, at once or later, with the reply.
    typealias ControlHandler = @Sendable (_ request: [UInt8], _ peer: PeerCredentials?, _ reply: @escaping @Sendable ([UInt8]) -> Void) -> Void

    /// `control` answers a request by calling its reply function once, at once or later; it is
    /// called on `controlThread`, never on the socket thread.
    init(
        context: ZMQContext, configuration: AgentConfiguration, stages: IngestStages, wakeup: SocketWakeup, acks: AckQueue,
        replies: ControlReplyQueue, counters: AgentMetrics, logger: Logger, controlThread: BlockingExecutor,
        control: @escaping ControlHandler
    ) {
        self.context = context
        self.configuration = configuration
        self.stages = stages
        self.wakeup = wakeup
        self.acks = acks
        bus = stages.bus
        self.replies = replies
        self.counters = counters
        self.logger = logger
        self.controlThread = controlThread
        self.control = control
    }

    /// Binds the sockets on the server thread and starts serving. Throws if binding fails.
    func start() throws {
        let ready = ThreadInbox<Result<Void, AgentError>>()
        let thread = DedicatedThread(name: "ferry-ingest") { [self] in
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

    /// Stops reading the ingest socket; acks and bus messages still go out. Clients' unacked
    /// events stay in their outboxes and are re-sent to the next agent.
    func stopIntake() {
        intakeStopped.store(true, ordering: .releasing)
        wakeup.wake()
    }

    /// Stops reading new messages, sends the acks of everything already committed and closes the
    /// sockets. Call after the commit pipeline has been stopped (so its last acks are queued).
    func stop() async {
        stopping.store(true, ordering: .releasing)
        wakeup.wake()
        if let thread = thread.withLock({ $0 }) { await thread.joinAsync() }
        wakeup.close()
    }

    // MARK: The socket thread

    private struct Sockets {
        var ingest: ZMQSocket
        var events: ZMQSocket
        var control: ZMQSocket
        /// The ingest socket's monitor (connections accepted and ended), for `ferry_clients_connected`.
        var monitor: ZMQSocket
        /// Waits on the wake-up pipe and the four sockets, in this order: one poll(2) on the
        /// sockets' notification descriptors, asking a socket whether it is readable only when
        /// that may have changed (zmq_poll asked all four twice per turn: some 50 system calls
        /// per event at a trickle).
        let waiter: ZMQWaiter
        /// Where acks are encoded, reused from one to the next.
        let ackBuffer = ByteBuffer()
        func close() {
            ingest.close()
            events.close()
            control.close()
            monitor.close()
        }
    }

    private func bind() throws -> Sockets {
        let runtime = configuration.runtimeDirectory
        do {
            let ingest = try ZMQSocket(context: context, type: .router)
            try ingest.setMaxMessageSize(Self.hardFrameLimit)
            // Messages libzmq holds per client connection beyond what the agent has read: a
            // flood of large batches sits here while intake pauses for the commit backlog, so
            // it is small (clients keep at most a few batches in flight; more wait client-side).
            try ingest.setReceiveHighWaterMark(Self.receiveHighWaterMark)
            try ingest.setSendHighWaterMark(100_000)
            try ingest.bind(FerryPaths.ingestEndpoint(runtime))
            // Connected clients come from libzmq itself, not from recent traffic: a client that
            // is connected but quiet still counts, one that went away stops counting at once.
            let monitorEndpoint = "inproc://ferry-ingest-monitor-\(ObjectIdentifier(self).hashValue)"
            try ingest.monitor(monitorEndpoint, events: [.accepted, .disconnected])
            let monitor = try ZMQSocket(context: context, type: .pair)
            try monitor.connect(monitorEndpoint)
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
                .socket(monitor, .readable),
                .socket(ingest, .readable),
            ])
            return Sockets(ingest: ingest, events: events, control: control, monitor: monitor, waiter: waiter)
        } catch let error as AgentError {
            throw error
        } catch {
            throw AgentError(code: .socket, message: "cannot bind in \(runtime): \(error)", cause: error)
        }
    }

    /// Gives the socket files explicit modes (not whatever the umask gave). A per-user agent's
    /// are its user's alone. A system agent's `ingest` and `control` are connectable by every
    /// local user — the access policy is checked per message, so a refused peer gets an error
    /// reply instead of a silent `EACCES` — and `events`, which promises no reply, is guarded by
    /// the kernel: open to all (0666) when the policy says every user, else to one group (0660).
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
            for name in ["ingest", "events", "control"] { try set(name, 0o600) }
        case .system:
            try set("ingest", 0o666)
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
            let acceptInput = !stoppingSeen && !intakeStopped.load(ordering: .acquiring) && !stages.isBusy
            let ready: [ZMQPollEvents]
            do {
                // With input paused for back-pressure, re-check the backlog soon.
                // The ingest socket (the last item) takes part only while input is accepted.
                ready = try sockets.waiter.wait(timeout: acceptInput ? .milliseconds(500) : .milliseconds(5)) { $0 < 4 || acceptInput }
            } catch {
                if error.isContextTerminated { return }
                logger.error("poll failed", metadata: ["error": "\(error)"])
                continue
            }
            if ready[0].contains(.readable) { wakeup.pipe.drain() }
            sendOutbound(sockets)
            if ready[1].contains(.readable) { readSubscriptions(sockets.events) }
            if ready[2].contains(.readable) { answerControl(sockets.control) }
            if ready[3].contains(.readable) { readMonitor(sockets.monitor) }
            if acceptInput && ready[4].contains(.readable) { readIngest(sockets.ingest) }
            if stopping.load(ordering: .acquiring) {
                if stoppingSeen {
                    sendOutbound(sockets)
                    return
                }
                // One more round: send whatever the stopped pipeline posted last.
                stoppingSeen = true
            }
        }
    }

    /// Sends what other threads queued: acks (each answered batch's outcomes then join the bus
    /// queue), bus messages, control replies.
    private func sendOutbound(_ sockets: Sockets) {
        for batches in acks.take() {
            for batch in batches { reply(batch, sockets) }
        }
        bus.take { topic, json in send(sockets.events, [Array(topic.rawValue.utf8), json]) }
        for reply in replies.take() {
            send(sockets.control, reply.envelope + [reply.body])
        }
    }

    private func reply(_ batch: CommittedBatch, _ sockets: Sockets) {
        // Header and body encoded into one reused buffer and sent from it: no array per ack.
        let buffer = sockets.ackBuffer
        buffer.bytes.removeAll(keepingCapacity: true)
        MessageHeader(version: batch.route.version, kind: .ack, requestID: batch.route.requestID).encode(into: &buffer.bytes)
        AckCodec.encode(batch.entries, into: &buffer.bytes)
        do {
            try buffer.bytes.withUnsafeBytes { raw in
                try batch.route.peer.withUnsafeBytes { peer in
                    // Never block the socket thread on a slow peer (see `send`).
                    _ = try sockets.ingest.send(peer, UnsafeRawBufferPointer(rebasing: raw[..<MessageHeader.size]),
                                                UnsafeRawBufferPointer(rebasing: raw[MessageHeader.size...]), dontWait: true)
                }
            }
        } catch {
            logger.debug("send failed", metadata: ["error": "\(error)"])
        }
        stages.answered(batch)
    }

    /// A byte buffer owned by the socket thread (not `Sendable`; it never leaves the thread).
    private final class ByteBuffer {
        var bytes: [UInt8] = []
    }

    private func send(_ socket: ZMQSocket, _ frames: [[UInt8]]) {
        do {
            // Never block the socket thread on a slow peer: a client that does not read its acks
            // hits its high-water mark and loses acks (it resends; dedup answers "duplicate").
            _ = try socket.send(frames, dontWait: true)
        } catch {
            logger.debug("send failed", metadata: ["error": "\(error)"])
        }
    }

    /// Ingest connections now (socket thread only).
    private let connections = Atomic<Int>(0)

    private func readMonitor(_ socket: ZMQSocket) {
        var changed = false
        while let message = try? socket.receive(dontWait: true) {
            guard let event = ZMQMonitorEvent(frames: message) else { continue }
            if event.kind == .accepted {
                connections.add(1, ordering: .relaxed)
                changed = true
            } else if event.kind == .disconnected {
                // Never below zero, whatever libzmq reports for a session that never completed.
                if connections.load(ordering: .relaxed) > 0 { connections.subtract(1, ordering: .relaxed) }
                changed = true
            }
        }
        if changed { counters.clientsConnected.record(connections.load(ordering: .relaxed)) }
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

    private func readIngest(_ socket: ZMQSocket) {
        // Bounded per round, in messages and in event frames (one message may carry 4096), so
        // the outbox (acks) and control requests are never starved: a flood of full batches
        // must not hold back other clients' acks until they re-send.
        var frames = 0
        for _ in 0..<256 where frames < Self.maxFramesPerRound {
            let received: (frames: [[UInt8]], peer: PeerCredentials?)?
            do {
                received = try socket.receiveWithPeer(dontWait: true)
            } catch {
                logger.debug("receive failed", metadata: ["error": "\(error)"])
                return
            }
            guard let (message, credentials) = received else { return }
            frames += message.count
            handle(message, from: credentials, socket)
            if stages.isBusy || intakeStopped.load(ordering: .acquiring) { return }
        }
    }

    private func handle(_ message: [[UInt8]], from credentials: PeerCredentials?, _ socket: ZMQSocket) {
        let receivedAt = MonotonicClock.nanoseconds()
        let peer = message[0]
        guard message.count >= 2 else {
            refuse(peer: peer, requestID: 0, .malformedMessage, "message has no header frame", socket, version: 1)
            return
        }
        let header: MessageHeader
        do {
            header = try MessageHeader(decoding: message[1])
        } catch {
            // Answer in the sender's version when this side speaks it; a sender from the future
            // gets this side's newest, an empty header version 1 (which every client reads).
            let version = message[1].first.map { supportedProtocolVersions.contains($0) ? $0 : ferryProtocolVersion } ?? 1
            refuse(peer: peer, requestID: MessageHeader.requestID(ofRaw: message[1]), error.code, error.detail, socket,
                   version: version)
            return
        }
        // Reserved bits must be 0: a bit this agent does not know could change how the message
        // is meant to be read, so it refuses the message rather than guess.
        guard header.flags == 0 else {
            refuse(peer: peer, requestID: header.requestID, .malformedMessage,
                   "header flags 0x\(String(header.flags, radix: 16)) are reserved and must be 0", socket, version: header.version)
            return
        }
        guard header.kind == .events else {
            refuse(peer: peer, requestID: header.requestID, .unknownKind,
                   "message kind \(header.kind.rawValue) is not accepted on the ingest socket; send kind 1 (events)", socket,
                   version: header.version)
            return
        }
        // Who may send is the kernel's word (the connection's credentials), checked before any
        // event is looked at: a refused sender gets an error reply and nothing is stored.
        if case .denied(let reason) = stages.checkAccess(credentials) {
            refuse(peer: peer, requestID: header.requestID, .accessDenied, reason, socket, version: header.version,
                   countAsMalformed: false)
            return
        }
        let count = message.count - 2
        guard count > 0 else {
            refuse(peer: peer, requestID: header.requestID, .malformedMessage, "events message carries no event frames", socket,
                   version: header.version)
            return
        }
        guard count <= Self.maxEventsPerMessage else {
            refuse(peer: peer, requestID: header.requestID, .messageTooLarge,
                   "\(count) event frames in one message; the limit is \(Self.maxEventsPerMessage)", socket,
                   version: header.version)
            return
        }
        var items: [IngestBatch.Item] = []
        items.reserveCapacity(count)
        let quality = stages.quality
        var weight = 0
        for frame in message[2...] {
            weight &+= frame.count &+ IngestBatch.itemOverhead
            items.append(stages.item(frame, version: header.version, quality: quality))
        }
        let origin = origins.metadata(connection: peer, peer: credentials)
        let route = AckRoute(peer: peer, requestID: header.requestID, version: header.version)
        if !stages.submit(IngestBatch(replyTo: acks, route: route, origin: origin, uid: credentials?.uid, items: items,
                                        receivedAt: receivedAt, weight: weight)) {
            refuse(peer: peer, requestID: header.requestID, .shuttingDown, "the agent is shutting down", socket,
                   version: header.version)
        }
    }

    private func refuse(
        peer: [UInt8], requestID: UInt32, _ code: ErrorCode, _ text: String, _ socket: ZMQSocket, version: UInt8,
        countAsMalformed: Bool = true
    ) {
        if countAsMalformed { counters.messagesRefused.increment() }
        logger.notice("refused a message", metadata: ["code": "\(code)", "detail": "\(text)"])
        let header = MessageHeader(version: version, kind: .error, requestID: requestID).encoded()
        send(socket, [peer, header, ErrorReply(code: code, message: text).encoded()])
    }
}
