#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryAgent
import FerryPeer
import FerryProtocol
import FerryThreads
import Logging
import Synchronization
import ZeroMQ

/// The ZeroMQ ingest path: the ROUTER socket `<runtime>/ingest` (docs/PROTOCOL.md), on a thread
/// of its own (`ferry-ingest`) that owns the socket and its monitor from bind to close.
///
/// It owns the protocol — message headers, error replies, acks, who is connected — and hands
/// every message's event frames to the agent through its ``IngestGateway``, the door every path
/// goes through (admission, the stages of each event, the commit, the bus). It reads at its own
/// pace: while the commit stage is busy, or once intake stops, it stops reading (clients' unacked
/// batches wait in libzmq, the kernel and their outboxes) instead of refusing. What it reads in
/// one round it commits itself when no commit is in flight (appends, one `fdatasync`, then the
/// acks, no other thread woken); otherwise the commit thread takes it, queues the answers in its
/// ``AckQueue`` and wakes it. It sends each ack, then the gateway publishes the outcomes on the
/// bus.
final class ZeroMQIngestPath: IngestPath {
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
    /// Event frames read per round before the acks get a turn.
    static let maxFramesPerRound = 8192

    let name = "zeromq"
    var metricSet: IngestPathMetricSet? { nil }

    private let configuration: AgentConfiguration
    private let logger: Logger
    private let origins = OriginResolver()
    private let stopping = Atomic<Bool>(false)
    private let intakeStopped = Atomic<Bool>(false)
    /// Ingest connections now (written on the socket thread only).
    private let connections = Atomic<Int>(0)
    private let running = Mutex<Running?>(nil)

    /// What runs once started: the socket thread and its wake-up.
    private struct Running: Sendable {
        var thread: DedicatedThread
        var wakeup: SocketWakeup
    }

    /// The path of `configuration` (its runtime directory and mode); nothing is bound until
    /// ``start(_:)``.
    init(configuration: AgentConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    /// Binds the socket on its thread and starts serving, submitting through `gateway`. Throws
    /// ``AgentError`` (code `socket`) if it cannot bind.
    func start(_ gateway: IngestGateway) async throws {
        let context: ZMQContext
        let wakeup: SocketWakeup
        do {
            context = try ZMQContext()
            wakeup = try SocketWakeup()
        } catch {
            throw AgentError(code: .socket, message: "cannot start the ZeroMQ ingest socket: \(error)", cause: error)
        }
        let acks = AckQueue(wakeup: wakeup)
        try await withCheckedThrowingContinuation { (ready: CheckedContinuation<Void, any Error>) in
            let thread = DedicatedThread(name: "ferry-ingest") { [self] in
                let sockets: Sockets
                do {
                    sockets = try bind(context, wakeup: wakeup)
                } catch {
                    context.terminate()
                    ready.resume(throwing: error)
                    return
                }
                acks.ownedByCurrentThread()
                ready.resume()
                serve(sockets, gateway: gateway, acks: acks, wakeup: wakeup)
                sockets.close()
                context.terminate()
            }
            running.withLock { $0 = Running(thread: thread, wakeup: wakeup) }
        }
    }

    /// Stops reading the socket; acks still go out. Clients' unacked events stay in their
    /// outboxes and are re-sent to the next agent.
    func stopIntake() {
        intakeStopped.store(true, ordering: .releasing)
        running.withLock { $0 }?.wakeup.wake()
    }

    /// Sends the acks of everything already committed and closes the socket. Called after the
    /// commit pipeline stopped (so its last acks are queued).
    func stop() async {
        stopping.store(true, ordering: .releasing)
        guard let running = running.withLock({ $0 }) else { return }
        running.wakeup.wake()
        await running.thread.joinAsync()
        running.wakeup.close()
    }

    // MARK: The socket thread

    private struct Sockets {
        var ingest: ZMQSocket
        /// The ingest socket's monitor (connections accepted and ended), for `ferry_clients_connected`.
        var monitor: ZMQSocket
        /// Waits on the wake-up pipe, the monitor and the socket, in this order: one poll(2) on
        /// their descriptors, asking a socket whether it is readable only when that may have
        /// changed.
        let waiter: ZMQWaiter
        /// Where acks are encoded, reused from one to the next.
        let ackBuffer = ByteBuffer()
        func close() {
            ingest.close()
            monitor.close()
        }
    }

    /// A byte buffer owned by the socket thread (not `Sendable`; it never leaves the thread).
    private final class ByteBuffer {
        var bytes: [UInt8] = []
    }

    private func bind(_ context: ZMQContext, wakeup: SocketWakeup) throws -> Sockets {
        let runtime = configuration.runtimeDirectory
        do {
            let ingest = try ZMQSocket(context: context, type: .router)
            try ingest.setMaxMessageSize(Self.hardFrameLimit)
            // Messages libzmq holds per client connection beyond what the path has read: a
            // flood of large batches sits here while intake pauses for the commit backlog, so
            // it is small (clients keep at most a few batches in flight; more wait client-side).
            try ingest.setReceiveHighWaterMark(Self.receiveHighWaterMark)
            try ingest.setSendHighWaterMark(100_000)
            try ingest.bind(FerryPaths.ingestEndpoint(runtime))
            // Connected clients come from libzmq itself, not from recent traffic: a client that
            // is connected but quiet still counts, one that went away stops counting at once.
            let monitorEndpoint = "inproc://ferry-ingest-monitor"
            try ingest.monitor(monitorEndpoint, events: [.accepted, .disconnected])
            let monitor = try ZMQSocket(context: context, type: .pair)
            try monitor.connect(monitorEndpoint)
            try setSocketFileMode()
            let waiter = try ZMQWaiter([
                .fileDescriptor(wakeup.pipe.readEnd, .readable),
                .socket(monitor, .readable),
                .socket(ingest, .readable),
            ])
            return Sockets(ingest: ingest, monitor: monitor, waiter: waiter)
        } catch let error as AgentError {
            throw error
        } catch {
            throw AgentError(code: .socket, message: "cannot bind in \(runtime): \(error)", cause: error)
        }
    }

    /// Gives the socket file an explicit mode (not whatever the umask gave): a per-user agent's is
    /// its user's alone; a system agent's is connectable by every local user — the access policy
    /// is checked per message, so a refused peer gets an error reply instead of a silent `EACCES`.
    private func setSocketFileMode() throws {
        let path = configuration.runtimeDirectory + "/ingest"
        let mode: mode_t = configuration.mode == .system ? 0o666 : 0o600
        if chmod(path, mode) != 0 {
            throw AgentError(code: .socket, message: "cannot set the mode of \(path): \(String(cString: strerror(errno)))")
        }
    }

    private func serve(_ sockets: Sockets, gateway: IngestGateway, acks: AckQueue, wakeup: SocketWakeup) {
        var stoppingSeen = false
        while true {
            let acceptInput = !stoppingSeen && !intakeStopped.load(ordering: .acquiring) && !gateway.isBusy
            let ready: [ZMQPollEvents]
            do {
                // With input paused for back-pressure, re-check the backlog soon.
                // The ingest socket (the last item) takes part only while input is accepted.
                ready = try sockets.waiter.wait(timeout: acceptInput ? .milliseconds(500) : .milliseconds(5)) { $0 < 2 || acceptInput }
            } catch {
                if error.isContextTerminated { return }
                logger.error("poll failed", metadata: ["error": "\(error)"])
                continue
            }
            if ready[0].contains(.readable) { wakeup.pipe.drain() }
            sendAcks(sockets, acks: acks, gateway: gateway)
            if ready[1].contains(.readable) { readMonitor(sockets.monitor, gateway: gateway) }
            if acceptInput && ready[2].contains(.readable) {
                readIngest(sockets.ingest, gateway: gateway, acks: acks)
                // What this thread committed itself is queued (no wake-up): out at once.
                sendAcks(sockets, acks: acks, gateway: gateway)
            }
            if stopping.load(ordering: .acquiring) {
                if stoppingSeen {
                    sendAcks(sockets, acks: acks, gateway: gateway)
                    return
                }
                // One more round: send whatever the stopped pipeline posted last.
                stoppingSeen = true
            }
        }
    }

    /// Sends the acks the commit thread queued; each answered batch's outcomes then go to the bus.
    private func sendAcks(_ sockets: Sockets, acks: AckQueue, gateway: IngestGateway) {
        for batches in acks.take() {
            for batch in batches { reply(batch, sockets, gateway: gateway) }
        }
    }

    private func reply(_ batch: CommittedBatch, _ sockets: Sockets, gateway: IngestGateway) {
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
        gateway.answered(batch)
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

    private func readMonitor(_ socket: ZMQSocket, gateway: IngestGateway) {
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
        if changed { gateway.recordClientsConnected(connections.load(ordering: .relaxed)) }
    }

    /// Reads what is waiting (one round) and commits it as one group: on this thread when no
    /// commit is in flight (appends, one `fdatasync`, the answers queued for ``sendAcks``), else
    /// handed to the commit thread (``IngestGateway/commit(_:)``).
    private func readIngest(_ socket: ZMQSocket, gateway: IngestGateway, acks: AckQueue) {
        // Bounded per round, in messages and in event frames (one message may carry 4096), so
        // the acks are never starved: a flood of full batches must not hold back other clients'
        // acks until they re-send.
        var frames = 0
        var round = IngestRound()
        for _ in 0..<256 where frames < Self.maxFramesPerRound {
            let received: (frames: [[UInt8]], peer: PeerCredentials?)?
            do {
                received = try socket.receiveWithPeer(dontWait: true)
            } catch {
                logger.debug("receive failed", metadata: ["error": "\(error)"])
                break
            }
            guard let (message, credentials) = received else { break }
            frames += message.count
            handle(message, from: credentials, socket, gateway: gateway, acks: acks, round: &round)
            if round.isFull || gateway.isBusy || intakeStopped.load(ordering: .acquiring) { break }
        }
        guard !round.isEmpty else { return }
        for route in gateway.commit(round) {
            refuse(peer: route.peer, requestID: route.requestID, .shuttingDown, "the agent is shutting down", socket,
                   version: route.version, gateway: gateway)
        }
    }

    private func handle(_ message: [[UInt8]], from credentials: PeerCredentials?, _ socket: ZMQSocket, gateway: IngestGateway,
                        acks: AckQueue, round: inout IngestRound) {
        let receivedAt = MonotonicClock.nanoseconds()
        let peer = message[0]
        guard message.count >= 2 else {
            refuse(peer: peer, requestID: 0, .malformedMessage, "message has no header frame", socket, version: 1, gateway: gateway)
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
                   version: version, gateway: gateway)
            return
        }
        // Reserved bits must be 0: a bit this agent does not know could change how the message
        // is meant to be read, so it refuses the message rather than guess.
        guard header.flags == 0 else {
            refuse(peer: peer, requestID: header.requestID, .malformedMessage,
                   "header flags 0x\(String(header.flags, radix: 16)) are reserved and must be 0", socket, version: header.version,
                   gateway: gateway)
            return
        }
        guard header.kind == .events else {
            refuse(peer: peer, requestID: header.requestID, .unknownKind,
                   "message kind \(header.kind.rawValue) is not accepted on the ingest socket; send kind 1 (events)", socket,
                   version: header.version, gateway: gateway)
            return
        }
        // Through the door every path shares: who may send is the kernel's word (the
        // connection's credentials), checked before any event is looked at.
        var refusal: (ErrorCode, String)?
        let admission = gateway.submit(
            peer: credentials, receivedAt: receivedAt, version: header.version, replyTo: acks,
            route: AckRoute(peer: peer, requestID: header.requestID, version: header.version), into: &round
        ) {
            let count = message.count - 2
            guard count > 0 else {
                refusal = (.malformedMessage, "events message carries no event frames")
                return nil
            }
            guard count <= Self.maxEventsPerMessage else {
                refusal = (.messageTooLarge, "\(count) event frames in one message; the limit is \(Self.maxEventsPerMessage)")
                return nil
            }
            return message[2...]
        } origin: {
            origins.metadata(connection: peer, peer: credentials)
        }
        switch admission {
        case .submitted: return
        case .withdrawn:
            let (code, text) = refusal ?? (.malformedMessage, "the message was refused")
            refuse(peer: peer, requestID: header.requestID, code, text, socket, version: header.version, gateway: gateway)
        case .denied(let reason):
            // A refused sender gets an error reply and nothing is stored (counted as denied).
            refuse(peer: peer, requestID: header.requestID, .accessDenied, reason, socket, version: header.version,
                   gateway: gateway, countAsMalformed: false)
        case .stopping, .busy:
            refuse(peer: peer, requestID: header.requestID, .shuttingDown, "the agent is shutting down", socket,
                   version: header.version, gateway: gateway)
        }
    }

    private func refuse(
        peer: [UInt8], requestID: UInt32, _ code: ErrorCode, _ text: String, _ socket: ZMQSocket, version: UInt8,
        gateway: IngestGateway, countAsMalformed: Bool = true
    ) {
        if countAsMalformed { gateway.countRefusedMessage() }
        logger.notice("refused a message", metadata: ["code": "\(code)", "detail": "\(text)"])
        let header = MessageHeader(version: version, kind: .error, requestID: requestID).encoded()
        send(socket, [peer, header, ErrorReply(code: code, message: text).encoded()])
    }
}
