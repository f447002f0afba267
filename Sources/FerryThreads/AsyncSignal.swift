import Synchronization

/// A wake-up flag one task waits on and any thread sets. Signals coalesce: many signals while
/// nobody waits wake the next ``wait()`` once. Cancellation ends a wait.
package final class AsyncSignal: Sendable {
    private struct State {
        var pending = false
        var cancelled = false
        var waiter: CheckedContinuation<Void, Never>?
        /// Counts waits, so a timer of an earlier wait never ends a later one.
        var generation: UInt64 = 0
        /// The timer of the current timed wait, cancelled when a signal ends the wait first.
        var timer: Task<Void, Never>?
        /// The current wait's condition (``wait(timeout:wakeIf:)``): a signal ends the wait only
        /// when it holds.
        var condition: (@Sendable () -> Bool)?
    }
    private let state = Mutex(State())

    /// Creates a signal nobody waits on.
    package init() {}

    /// Wakes the waiter, or the next one to wait (a conditional waiter only when its condition
    /// holds).
    package func signal() {
        // A conditional waiter is asked first, outside the lock (the condition may take locks of
        // its own); the answer counts only for that same wait.
        var declined: UInt64?
        if let (condition, generation) = state.withLock({ state in
            state.waiter == nil ? nil : state.condition.map { ($0, state.generation) }
        }), !condition() {
            declined = generation
        }
        let (waiter, timer) = state.withLock { state -> (CheckedContinuation<Void, Never>?, Task<Void, Never>?) in
            if let declined, state.waiter != nil, state.generation == declined { return (nil, nil) }
            defer {
                state.timer = nil
                state.condition = nil
            }
            if let waiter = state.waiter {
                state.waiter = nil
                return (waiter, state.timer)
            }
            state.pending = true
            return (nil, state.timer)
        }
        timer?.cancel()
        waiter?.resume()
    }

    /// Waits for a signal (or returns at once if one is pending) until the task is cancelled.
    package func wait() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.pending || state.cancelled {
                        state.pending = false
                        return true
                    }
                    state.generation &+= 1
                    state.waiter = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            cancelWaiter()
        }
    }

    /// Waits for a signal, at most `timeout` (no polling: one timer per wait). Returns at once if
    /// a signal is pending; cancellation ends it too.
    package func wait(timeout: Duration) async {
        await wait(timeout: timeout, condition: nil)
    }

    /// Waits like ``wait(timeout:)``, but a signal that comes during the wait ends it only when
    /// `condition` holds (asked on the signalling thread, so it must be cheap and must not
    /// block); a signal it declines is dropped. A signal pending from before the wait ends it at
    /// once, as with ``wait(timeout:)``.
    package func wait(timeout: Duration, wakeIf condition: @escaping @Sendable () -> Bool) async {
        await wait(timeout: timeout, condition: condition)
    }

    private func wait(timeout: Duration, condition: (@Sendable () -> Bool)?) async {
        guard timeout > .zero else { return }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.pending || state.cancelled {
                        state.pending = false
                        return true
                    }
                    state.generation &+= 1
                    state.waiter = continuation
                    state.condition = condition
                    let ticket = state.generation
                    state.timer = Task { [self] in
                        try? await Task.sleep(for: timeout)
                        timerFired(ticket)
                    }
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            cancelWaiter()
        }
    }

    private func timerFired(_ ticket: UInt64) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.generation == ticket, let waiter = state.waiter else { return nil }
            state.waiter = nil
            state.timer = nil
            state.condition = nil
            return waiter
        }
        waiter?.resume()
    }

    private func cancelWaiter() {
        let (waiter, timer) = state.withLock { state -> (CheckedContinuation<Void, Never>?, Task<Void, Never>?) in
            state.cancelled = true
            defer {
                state.waiter = nil
                state.timer = nil
                state.condition = nil
            }
            return (state.waiter, state.timer)
        }
        timer?.cancel()
        waiter?.resume()
    }
}
