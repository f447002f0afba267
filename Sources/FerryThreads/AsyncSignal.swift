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
    }
    private let state = Mutex(State())

    /// Wakes the waiter, or the next one to wait.
    package init() {}

    package func signal() {
        let (waiter, timer) = state.withLock { state -> (CheckedContinuation<Void, Never>?, Task<Void, Never>?) in
            defer { state.timer = nil }
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
            }
            return (state.waiter, state.timer)
        }
        timer?.cancel()
        waiter?.resume()
    }
}
