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

// The client's I/O thread: it owns the DEALER socket, sends the outbox in batches, re-sends
// what is overdue and resolves acks. It sleeps in one poll(2) on the socket's notification
// descriptor and the wake pipe (ZMQWaiter: zmq_poll would ask the socket's mailbox before and
// after every wait, and poll twice when nothing is ready at first);
// track() writes the pipe only when the thread is idle, so a burst of events costs one wake-up,
// and the events queued while a message is in flight go out together when its ack comes.
extension FerryClient {
    /// Runs the I/O loop on the client thread until the client closes. `waiter` waits on
    /// `socket` and the wake pipe, in this order.
    func runIO(_ socket: ZMQSocket, waiter: ZMQWaiter) {
        let clock = ContinuousClock()
        var sendBlocked = false
        while true {
            // Decide how long to sleep: until the oldest in-flight batch is due for re-sending,
            // briefly if sending failed (agent absent), or until woken.
            let timeout: Duration? = state.withLock { state in
                if state.closed { return .zero }
                let now = clock.now
                if state.nextBatchSize(configuration, now: now) != nil && !sendBlocked { return .zero }
                var wait: Duration? = sendBlocked ? .milliseconds(50) : nil
                if let oldest = state.oldestSentAt {
                    let due = max(.zero, oldest + configuration.resendAfter - now)
                    wait = min(wait ?? due, due)
                }
                // A partial batch waiting out the send delay (nothing else holds it back): sleep
                // until it is due; meanwhile only an event that fills the batch wakes this thread.
                var lingering = false
                if !sendBlocked,
                   state.inFlight.count < min(configuration.partialBatchesInFlight, configuration.maxInFlightBatches),
                   let due = state.partialBatchDue(configuration) {
                    let delay = max(.zero, due - now)
                    wait = min(wait ?? delay, delay)
                    lingering = true
                }
                state.lingering = lingering
                // While sends fail (no agent) a new event cannot go out either: it waits for the
                // retry instead of waking this thread to fail again (and rebuild a batch) per event.
                // Otherwise track() writes the wake pipe only when this flag is set, so a burst
                // of events costs one write and one wake-up, not one per event.
                state.ioIdle = wait != .zero && !sendBlocked && !lingering
                return wait
            }
            let ready: [ZMQPollEvents]
            do {
                ready = try waiter.wait(timeout: timeout)
            } catch {
                if error.isContextTerminated { return }
                logger.error("ferry client poll failed", metadata: ["error": "\(error)"])
                continue
            }
            if ready[1].contains(.readable) { wake.drain() }
            let (closed, overdue) = state.withLock { state -> (Bool, Bool) in
                state.ioIdle = false
                state.lingering = false
                return (state.closed, state.oldestSentAt.map { clock.now - $0 >= configuration.resendAfter } ?? false)
            }
            if closed { return }
            if ready[0].contains(.readable) { readReplies(socket) }
            sendBlocked = overdue && !resendOverdue(socket, now: clock.now)
            if !sendBlocked { sendBlocked = !sendPending(socket, now: clock.now) }
        }
    }

    /// Re-sends batches whose ack is overdue. Returns false if the socket refused (no agent).
    private func resendOverdue(_ socket: ZMQSocket, now: ContinuousClock.Instant) -> Bool {
        let overdue = state.withLock { state in
            state.inFlight.filter { now - $0.value.sentAt >= configuration.resendAfter }
        }
        for (requestID, batch) in overdue.sorted(by: { $0.key < $1.key }) {
            guard (try? socket.send(batch.message, dontWait: true)) == true else { return false }
            state.withLock { state in
                state.inFlight[requestID]?.sentAt = now
                state.statistics.resentBatches += 1
            }
        }
        return true
    }

    /// Sends new batches from the outbox while the in-flight window allows.
    private func sendPending(_ socket: ZMQSocket, now: ContinuousClock.Instant) -> Bool {
        while true {
            // The send happens under the lock (a non-blocking copy into libzmq, microseconds), so
            // a batch is either still pending or in flight, never in between where the overflow
            // policy could not see it.
            let outcome = state.withLock { state -> Bool? in
                guard let count = state.nextBatchSize(configuration, now: now) else { return nil }
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
                return true
            }
            guard let sent = outcome else { return true }
            if !sent { return false }
        }
    }

    private func readReplies(_ socket: ZMQSocket) {
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
                complete(requestID: header.requestID) { index in
                    index < entries.count ? (Self.receiptStatus(entries[index]), entries[index].reason) : (.rejected(.malformed), .malformed)
                }
            case .error:
                let reply = try? ErrorReply(decoding: message[1])
                if reply?.code == .unsupportedVersion, downgrade() {
                    logger.warning("ferry agent speaks protocol 1 only: sending without a session (re-sends are then deduplicated by id only)")
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
                complete(requestID: header.requestID) { _ in (.refusedByAgent(code), .none) }
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

    /// Resolves every event of an in-flight batch (a late ack for a batch already resolved, e.g.
    /// after a re-send, is ignored).
    private func complete(requestID: UInt32, status: (Int) -> (Receipt.Status, RejectReason)) {
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
        for (receipt, onReceipt) in resolved { onReceipt?(receipt) }
        resumeFlushWaiters()
    }
}
