#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import DequeModule
import FerryProtocol
import FerryThreads
import Logging
import Synchronization
import ZeroMQ

// The client's threads and its socket.
//
// An event should cost the app one hand-off, not two: before this design the thread calling
// track() woke the client's I/O thread to send, and the ack woke it again (with libzmq's own I/O
// thread and the agent's threads, about ten wake-ups per event at a trickle, each carrying its
// system calls). Now the one DEALER socket is guarded by a lock (`FerryClient.socket`) instead of
// being confined to the I/O thread. libzmq sockets are not thread safe, but a socket may move
// between threads with a full memory barrier between uses, which the lock gives; whoever holds
// the lock may send and receive:
// - The thread that queues an event that may go now (no send delay, an awaited send(), a flush,
//   a full batch) sends it itself when the socket is free (`withLockIfAvailable`: it never waits
//   for the lock, and a send never blocks: `ZMQ_DONTWAIT`). A thread that finds the lock taken
//   leaves the work to the holder, which looks for sendable events again after releasing it, so
//   nothing is stranded.
// - The I/O thread sleeps in one poll(2) on the socket's notification descriptor (`ZMQ_FD`, polled
//   without the lock: it is a plain descriptor), the wake pipe and the alarm. It wakes when an ack
//   arrives (one wake-up per message, whose receipts it completes in place), when a send delay
//   ends (the alarm, which a queueing thread sets without waking it), to re-send or to retry.
// The rule that keeps the I/O thread's poll correct while other threads use the socket: whoever
// holds the lock reads replies until the socket has none before releasing it. A receive that
// finds nothing has processed the socket's commands and left its mailbox marked asleep, so the
// next command (the next ack) signals `ZMQ_FD` again; a send may have taken the descriptor's
// signal for an ack that already came, and that read finds it. A signal taken by another thread
// only costs the I/O thread a wake-up that finds nothing.
// Receipts are called after the lock is released, on the thread that read the ack.
extension FerryClient {
    /// What one turn with the socket resolved, reported after the lock is released.
    struct SocketTurn: Sendable {
        var receipts: [(Receipt, @Sendable (Receipt) -> Void)] = []
        var resolved = false
        /// A reply made a batch overdue at once (a protocol downgrade): the I/O thread re-sends it.
        var wakeIO = false
    }

    /// How long `close` keeps trying to pass the last messages to the agent.
    static let closeLinger: Int32 = 1_000
    /// How long after a failed send (no agent, or its pipe full) the I/O thread tries again.
    static let retryInterval = Duration.milliseconds(50)

    /// Sends what may go now from the calling thread, if the socket is free; reads the replies
    /// that came meanwhile and reports them.
    func sendFromCaller() {
        while true {
            guard let turn = socket.withLockIfAvailable({ socket -> SocketTurn in
                var turn = SocketTurn()
                sendPending(socket, now: .now, byCaller: true)
                readReplies(socket, into: &turn)
                return turn
            }) else { return }
            report(turn)
            // Events another thread queued while this one held the socket are this one's to send.
            let more = state.withLock { state in
                !state.closed && !state.sendBlocked && state.nextBatchSize(configuration, now: .now) != nil
            }
            if !more { return }
        }
    }

    /// Runs the I/O loop on the client thread until the client closes.
    func runIO() {
        let clock = ContinuousClock()
        // The notification descriptor, the wake pipe and the alarm (a negative descriptor, where
        // there is no alarm, is ignored by poll(2)).
        var descriptors = [pollfd(fd: notification, events: Int16(POLLIN), revents: 0),
                           pollfd(fd: wake.readEnd, events: Int16(POLLIN), revents: 0),
                           pollfd(fd: alarm.descriptor, events: Int16(POLLIN), revents: 0)]
        while true {
            let timeout: Duration? = state.withLock { state in
                if state.closed { return .zero }
                let now = clock.now
                if !state.sendBlocked && state.nextBatchSize(configuration, now: now) != nil { return .zero }
                let deadline = state.ioDeadline(configuration)
                // An alarm set for a batch that went out earlier (full, awaited or flushed) would
                // only wake this thread for nothing.
                if let alarmAt = state.alarmAt, deadline.map({ alarmAt < $0 }) ?? true {
                    alarm.clear()
                    state.alarmAt = nil
                }
                state.ioAsleep = true
                state.ioWakesAt = deadline
                return deadline.map { max(.zero, $0 - now) } ?? nil
            }
            for index in descriptors.indices { descriptors[index].revents = 0 }
            if timeout != .zero {
                var milliseconds = Self.milliseconds(timeout)
                while descriptors.withUnsafeMutableBufferPointer({ poll($0.baseAddress, nfds_t($0.count), milliseconds) }) < 0 {
                    if errno != EINTR {
                        logger.error("ferry client poll failed", metadata: ["errno": "\(errno)"])
                        break
                    }
                    milliseconds = 0
                }
            }
            if descriptors[1].revents != 0 { wake.drain() }
            let rang = descriptors[2].revents != 0
            if rang { alarm.drain() }
            let (closed, now) = state.withLock { state -> (Bool, ContinuousClock.Instant) in
                state.ioAsleep = false
                state.ioWakesAt = nil
                if rang { state.alarmAt = nil }
                return (state.closed, clock.now)
            }
            if closed {
                closeSocket(now: now)
                return
            }
            let turn = socket.withLock { socket -> SocketTurn in
                var turn = SocketTurn()
                readReplies(socket, into: &turn)
                // While sends are blocked, only once the retry is due.
                let (maySend, overdue) = state.withLock { state -> (Bool, Bool) in
                    if state.sendBlocked, state.retryAt.map({ now >= $0 }) ?? true { state.sendBlocked = false }
                    let overdue = state.oldestSentAt.map { now - $0 >= configuration.resendAfter } ?? false
                    return (!state.sendBlocked, overdue)
                }
                if maySend {
                    if !overdue || resendOverdue(socket, now: now) { sendPending(socket, now: now, byCaller: false) }
                    // Anything a send took the signal for.
                    readReplies(socket, into: &turn)
                }
                return turn
            }
            report(turn)
        }
    }

    /// The last pass: reads the replies already there, sends every event still queued (none
    /// waits for the send delay or the in-flight window once closed) and closes the socket with
    /// a linger, so that libzmq still passes those messages to the agent.
    private func closeSocket(now: ContinuousClock.Instant) {
        let turn = socket.withLock { socket -> SocketTurn in
            var turn = SocketTurn()
            readReplies(socket, into: &turn)
            state.withLock { $0.sendBlocked = false }
            sendPending(socket, now: now, byCaller: false)
            try? socket.setOption(.linger, Self.closeLinger)
            socket.close()
            return turn
        }
        report(turn)
    }

    /// Calls the receipts a turn resolved and resumes the flush waiters it satisfied.
    private func report(_ turn: SocketTurn) {
        for (receipt, onReceipt) in turn.receipts { onReceipt(receipt) }
        if turn.resolved { resumeFlushWaiters() }
        if turn.wakeIO { wake.wake() }
    }

    private static func milliseconds(_ timeout: Duration?) -> CInt {
        guard let timeout else { return -1 }
        let (seconds, attoseconds) = timeout.components
        let ms = Double(seconds) * 1000 + Double(attoseconds) / 1e15
        // Rounded up, so a short timeout never becomes a busy spin.
        return CInt(min(Double(CInt.max), max(0, ms.rounded(.up))))
    }

    /// Re-sends batches whose ack is overdue. Returns false if the socket refused (no agent).
    private func resendOverdue(_ socket: ZMQSocket, now: ContinuousClock.Instant) -> Bool {
        let overdue = state.withLock { state in
            state.inFlight.filter { now - $0.value.sentAt >= configuration.resendAfter }
        }
        for (requestID, batch) in overdue.sorted(by: { $0.key < $1.key }) {
            guard (try? socket.send(batch.message, dontWait: true)) == true else {
                blockSends(now: now)
                return false
            }
            state.withLock { state in
                state.inFlight[requestID]?.sentAt = now
                state.statistics.resentBatches += 1
            }
        }
        return true
    }

    /// After a refused send: nobody sends until the I/O thread retries, after
    /// ``retryInterval``.
    private func blockSends(now: ContinuousClock.Instant) {
        let wakeIO = state.withLock { state in
            state.sendBlocked = true
            state.retryAt = now + Self.retryInterval
            return state.wakeIO(by: now + Self.retryInterval, now: now, alarm: alarm)
        }
        if wakeIO { wake.wake() }
    }

    /// Sends new batches from the outbox while they may go (see `State.nextBatchSize`). A
    /// refused send (no agent, or the pipe is full) leaves the batch pending and blocks sends
    /// until the I/O thread retries.
    private func sendPending(_ socket: ZMQSocket, now: ContinuousClock.Instant, byCaller: Bool) {
        var wakeIO = false
        defer { if wakeIO { wake.wake() } }
        while true {
            // The send happens under the lock (a non-blocking copy into libzmq, microseconds), so
            // a batch is either still pending or in flight, never in between where the overflow
            // policy could not see it.
            let outcome = state.withLock { state -> Bool? in
                guard !state.sendBlocked, let count = state.nextBatchSize(configuration, now: now) else { return nil }
                let requestID = state.nextRequestID
                let version = state.protocolVersion
                var message = [MessageHeader(version: version, kind: .events, requestID: requestID).encoded()]
                message.reserveCapacity(count + 1)
                for entry in state.pending.prefix(count) {
                    message.append(version < 2 ? WireEvent.strippingExtensions(entry.frame) : entry.frame)
                }
                // Nobody to send to (or the pipe is full): the batch stays pending, in order.
                guard (try? socket.send(message, dontWait: true)) == true else { return false }
                state.nextRequestID = requestID &+ 1
                let entries = Array(state.pending.prefix(count))
                state.pending.removeFirst(count)
                state.inFlight[requestID] = InFlight(entries: entries, message: message, sentAt: now)
                state.inFlightEvents += count
                state.statistics.sentMessages += 1
                if byCaller {
                    state.statistics.sentByCaller += 1
                    // The I/O thread may be asleep with no deadline (nothing was in flight when it
                    // fell asleep) and may never see this batch's ack: it must wake to re-send it
                    // by then. Usually the alarm is set (no wake-up now); the ack clears it.
                    if state.wakeIO(by: now + configuration.resendAfter, now: now, alarm: alarm) { wakeIO = true }
                }
                return true
            }
            guard let sent = outcome else { return }
            if !sent {
                blockSends(now: now)
                return
            }
        }
    }

    /// Reads every reply waiting on the socket (until it has none: the rule above) and resolves
    /// their batches into `turn`.
    private func readReplies(_ socket: ZMQSocket, into turn: inout SocketTurn) {
        while let message = try? socket.receive(dontWait: true) {
            guard message.count == 2, let header = try? MessageHeader(decoding: message[0]) else {
                logger.warning("ferry client: unreadable reply from the agent")
                continue
            }
            switch header.kind {
            case .ack:
                guard let entries = try? AckCodec.decode(message[1]) else {
                    logger.warning("ferry client: malformed ack")
                    continue
                }
                complete(requestID: header.requestID, into: &turn) { index in
                    index < entries.count ? (Self.receiptStatus(entries[index]), entries[index].reason) : (.rejected(.malformed), .malformed)
                }
            case .error:
                let reply = try? ErrorReply(decoding: message[1])
                if reply?.code == .unsupportedVersion, downgrade() {
                    logger.warning("ferry agent speaks protocol 1 only: sending without a session (re-sends are then deduplicated by id only)")
                    turn.wakeIO = true
                    continue
                }
                if reply?.code == .shuttingDown {
                    // Not a verdict on the events: the agent is stopping. Keep the batch in
                    // flight; it is re-sent (after `resendAfter`) to the next agent.
                    logger.debug("ferry agent is shutting down; will re-send", metadata: ["request": "\(header.requestID)"])
                    continue
                }
                logger.error("ferry agent refused a message", metadata: [
                    "code": "\(reply?.code.description ?? "?")", "message": "\(reply?.message ?? "")",
                ])
                let code = reply?.code ?? .malformedMessage
                complete(requestID: header.requestID, into: &turn) { _ in (.refusedByAgent(code), .none) }
            case .events:
                continue
            }
        }
    }

    /// Switches to protocol 1 after an older agent refused a version 2 message: the refused
    /// batch is rebuilt without extensions and goes out again at once. Returns false if already
    /// on protocol 1 (the refusal is then final).
    private func downgrade() -> Bool {
        state.withLock { state in
            guard state.protocolVersion > 1 else { return false }
            state.protocolVersion = 1
            for (id, batch) in state.inFlight {
                var message = [MessageHeader(version: 1, kind: .events, requestID: id).encoded()]
                message += batch.entries.map { WireEvent.strippingExtensions($0.frame) }
                state.inFlight[id]?.message = message
                // Overdue now: the next turn of the I/O loop re-sends it.
                state.inFlight[id]?.sentAt = batch.sentAt - configuration.resendAfter
            }
            return true
        }
    }

    private static func receiptStatus(_ entry: AckEntry) -> Receipt.Status {
        switch entry.status {
        case .accepted: .accepted
        case .duplicate: .duplicate
        case .rejected: .rejected(entry.reason)
        case .blocked: .blocked
        case .suppressed: .suppressed
        }
    }

    /// Resolves every event of an in-flight batch into `turn` (a late ack for a batch already
    /// resolved, e.g. after a re-send, is ignored).
    private func complete(requestID: UInt32, into turn: inout SocketTurn, status: (Int) -> (Receipt.Status, RejectReason)) {
        let resolved = state.withLock { state -> [(Receipt, (@Sendable (Receipt) -> Void)?)]? in
            guard let batch = state.inFlight.removeValue(forKey: requestID) else { return nil }
            state.inFlightEvents -= batch.entries.count
            return batch.entries.enumerated().map { offset, entry in
                let (verdict, reason) = status(offset)
                let receipt = Receipt(id: entry.id, status: verdict, reason: reason)
                switch receipt.status {
                case .accepted: state.statistics.accepted += 1
                case .duplicate: state.statistics.duplicate += 1
                case .suppressed: state.statistics.suppressed += 1
                case .blocked:
                    state.statistics.rejected += 1
                    state.statistics.blocked += 1
                default: state.statistics.rejected += 1
                }
                return (receipt, state.receipts.removeValue(forKey: entry.index))
            }
        }
        guard let resolved else { return }
        turn.resolved = true
        for (receipt, onReceipt) in resolved {
            if let onReceipt { turn.receipts.append((receipt, onReceipt)) }
        }
    }
}

/// The I/O thread's alarm: a `timerfd` in its poll set, which another thread sets for the end of
/// a send delay without waking the I/O thread (a write to the wake pipe would wake it now only
/// for it to sleep again until the delay ends: one more context switch per batch). Where there is
/// no `timerfd` (not Linux), ``set(after:)`` returns false and the caller writes the wake pipe.
final class IOAlarm: Sendable {
    /// The descriptor to poll for readability; -1 if there is no alarm.
    let descriptor: CInt

    #if os(Linux)
    // Glibc's Swift module does not include <sys/timerfd.h>: the two calls are looked up once.
    private typealias Create = @convention(c) (CInt, CInt) -> CInt
    private typealias Set = @convention(c) (CInt, CInt, UnsafePointer<itimerspec>?, UnsafeMutablePointer<itimerspec>?) -> CInt
    private static let calls: (create: Create, set: Set)? = {
        guard let create = dlsym(nil, "timerfd_create"), let set = dlsym(nil, "timerfd_settime") else { return nil }
        return (unsafeBitCast(create, to: Create.self), unsafeBitCast(set, to: Set.self))
    }()
    #endif

    init() {
        #if os(Linux)
        // TFD_NONBLOCK | TFD_CLOEXEC (O_NONBLOCK | O_CLOEXEC).
        descriptor = Self.calls.map { $0.create(CLOCK_MONOTONIC, O_NONBLOCK | O_CLOEXEC) } ?? -1
        #else
        descriptor = -1
        #endif
    }

    /// Rings once after `delay` (replacing any earlier setting). False if there is no alarm.
    func set(after delay: Duration) -> Bool {
        #if os(Linux)
        guard descriptor >= 0, let calls = Self.calls else { return false }
        // Zero would disarm it: at least a nanosecond.
        let (seconds, attoseconds) = max(delay, .nanoseconds(1)).components
        var value = itimerspec(it_interval: timespec(tv_sec: 0, tv_nsec: 0),
                               it_value: timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000)))
        return calls.set(descriptor, 0, &value, nil) == 0
        #else
        return false
        #endif
    }

    /// Disarms it.
    func clear() {
        #if os(Linux)
        guard descriptor >= 0, let calls = Self.calls else { return }
        var value = itimerspec()
        _ = calls.set(descriptor, 0, &value, nil)
        #endif
    }

    /// Acknowledges a ring (the descriptor stays readable until then).
    func drain() {
        var expirations: UInt64 = 0
        _ = read(descriptor, &expirations, MemoryLayout<UInt64>.size)
    }

    func close() {
        #if canImport(Glibc)
        if descriptor >= 0 { _ = Glibc.close(descriptor) }
        #endif
    }
}

/// The earlier of an optional instant and an instant.
func earliest(_ a: ContinuousClock.Instant?, _ b: ContinuousClock.Instant) -> ContinuousClock.Instant {
    a.map { min($0, b) } ?? b
}
