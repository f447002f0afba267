import CNATS
import Synchronization

/// The outcome of one ``JetStreamContext/publish(_:ackWait:)`` call: one result per message,
/// filled in by nats.c's acknowledgement handler (on nats.c threads) as PubAcks arrive.
///
/// Await ``acknowledgements(timeout:)`` to get them all. A message nats.c never answers for (its
/// connection closed, say) is reported as a timeout when that wait ends.
public final class PublishBatch: Sendable {
    /// Messages in the batch.
    public let count: Int
    private let state: Mutex<State>

    private struct State {
        var results: [Result<PubAck, NATSError>?]
        var remaining: Int
        var waiter: CheckedContinuation<Void, Never>?
    }

    init(count: Int) {
        self.count = count
        state = Mutex(State(results: Array(repeating: nil, count: count), remaining: count))
    }

    /// Records the result of message `index` (the first result wins); resumes the waiter when
    /// the last one arrives. Called from nats.c threads and from the publishing thread.
    func record(_ index: Int, _ result: Result<PubAck, NATSError>) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.results[index] == nil else { return nil }
            state.results[index] = result
            state.remaining -= 1
            guard state.remaining == 0 else { return nil }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Whether every message has a result.
    public var isComplete: Bool { state.withLock { $0.remaining == 0 } }

    /// Waits until every message has a result, at most `timeout` (or until the task is cancelled),
    /// and returns them in message order; messages still unanswered then fail with a timeout.
    public func acknowledgements(timeout: Duration) async -> [Result<PubAck, NATSError>] {
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            self?.expire()
        }
        defer { timer.cancel() }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let done = state.withLock { state -> Bool in
                    if state.remaining == 0 { return true }
                    state.waiter = continuation
                    return false
                }
                if done { continuation.resume() }
            }
        } onCancel: {
            expire()
        }
        return state.withLock { state in
            state.results.map { $0 ?? .failure(NATSError.wrapper(NATS_TIMEOUT, "no acknowledgement", "publish")) }
        }
    }

    /// Fails every message without a result with a timeout.
    private func expire() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.remaining > 0 else { return nil }
            for index in state.results.indices where state.results[index] == nil {
                state.results[index] = .failure(NATSError.wrapper(NATS_TIMEOUT, "no acknowledgement in time", "publish"))
            }
            state.remaining = 0
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }
}

/// Routes nats.c's acknowledgement callbacks to the batch and index of each published message.
///
/// Keyed by the `natsMsg` pointer: nats.c hands the very message it was given back to the
/// handler, and the pointer cannot be reused before the handler destroys it. nats.c gets a token
/// (not a pointer to this object) as the handler's closure, looked up in ``registry``, so a
/// callback racing with the context's release finds nothing instead of freed memory.
final class AckRouter: Sendable {
    private struct Entry {
        let batch: PublishBatch
        let index: Int
    }
    private let pending = Mutex<[UInt: Entry]>([:])

    private static let registry = Mutex<(next: UInt, routers: [UInt: AckRouter])>((1, [:]))

    static func register(_ router: AckRouter) -> UInt {
        registry.withLock { registry in
            let token = registry.next
            registry.next += 1
            registry.routers[token] = router
            return token
        }
    }

    static func unregister(_ token: UInt) {
        _ = registry.withLock { $0.routers.removeValue(forKey: token) }
    }

    static func router(for token: UInt) -> AckRouter? {
        registry.withLock { $0.routers[token] }
    }

    func expect(_ msg: OpaquePointer, batch: PublishBatch, index: Int) {
        pending.withLock { $0[UInt(bitPattern: msg)] = Entry(batch: batch, index: index) }
    }

    func forget(_ msg: OpaquePointer) {
        _ = pending.withLock { $0.removeValue(forKey: UInt(bitPattern: msg)) }
    }

    /// Records `result` for `msg`'s batch, if the message is known.
    func deliver(_ msg: OpaquePointer, _ result: Result<PubAck, NATSError>) {
        guard let entry = pending.withLock({ $0.removeValue(forKey: UInt(bitPattern: msg)) }) else { return }
        entry.batch.record(entry.index, result)
    }

    func failAll(_ error: NATSError) {
        let entries = pending.withLock { pending in
            defer { pending.removeAll() }
            return Array(pending.values)
        }
        for entry in entries { entry.batch.record(entry.index, .failure(error)) }
    }
}

/// nats.c's `jsPubAckHandler`: runs on a nats.c thread for every asynchronously published message
/// (PubAck, error, or MaxWait timeout). Must destroy the message.
func jetStreamAckHandler(
    _ js: OpaquePointer?, _ msg: OpaquePointer?, _ ack: UnsafeMutablePointer<jsPubAck>?,
    _ failure: UnsafeMutablePointer<jsPubAckErr>?, _ closure: UnsafeMutableRawPointer?
) {
    guard let msg else { return }
    defer { natsMsg_Destroy(msg) }
    guard let router = AckRouter.router(for: UInt(bitPattern: closure)) else { return }
    if let ack {
        let pubAck = PubAck(
            stream: ack.pointee.Stream.map { String(cString: $0) } ?? "", sequence: ack.pointee.Sequence,
            duplicate: ack.pointee.Duplicate, domain: ack.pointee.Domain.map { String(cString: $0) })
        router.deliver(msg, .success(pubAck))
    } else {
        let status = failure?.pointee.Err ?? NATS_ERR
        let text = failure?.pointee.ErrText.map { String(cString: $0) } ?? String(cString: natsStatus_GetText(status))
        let code = failure.map { Int($0.pointee.ErrCode.rawValue) }
        router.deliver(msg, .failure(NATSError(code: status.rawValue, text: text, operation: "publish",
                                               jetStreamCode: code == 0 ? nil : code)))
    }
}
