import FerryProtocol
import FerryThreads
import Synchronization

/// Thrown by ``eventually(_:timeout:pollInterval:_:)`` when the condition never held.
public struct EventuallyTimeout: Error, CustomStringConvertible, Sendable {
    /// What was waited for.
    public var what: String
    /// How long.
    public var timeout: Duration
    /// The last error the condition threw, if any.
    public var lastError: String?

    public var description: String {
        "timed out after \(timeout) waiting for \(what)" + (lastError.map { " (last error: \($0))" } ?? "")
    }
}

/// Polls `condition` until it returns `true`, at most `timeout`; throws ``EventuallyTimeout``
/// otherwise. Errors the condition throws count as "not yet" (the last one is reported).
///
/// This is how tests synchronise with other processes: on an observable condition with a
/// deadline, never on a fixed sleep.
public func eventually(
    _ what: String = "a condition", timeout: Duration = .seconds(20), pollInterval: Duration = .milliseconds(25),
    _ condition: () async throws -> Bool
) async throws {
    _ = try await waitForValue(what, timeout: timeout, pollInterval: pollInterval) {
        try await condition() ? true : nil
    }
}

/// Polls `produce` until it returns a value, at most `timeout`, and returns that value; throws
/// ``EventuallyTimeout`` otherwise.
public func waitForValue<T>(
    _ what: String = "a value", timeout: Duration = .seconds(20), pollInterval: Duration = .milliseconds(25),
    _ produce: () async throws -> T?
) async throws -> T {
    let deadline = ContinuousClock.now + timeout
    var lastError: String?
    while true {
        do {
            if let value = try await produce() { return value }
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            lastError = "\(error)"
        }
        if ContinuousClock.now >= deadline { throw EventuallyTimeout(what: what, timeout: timeout, lastError: lastError) }
        try await Task.sleep(for: pollInterval)
    }
}

/// Runs blocking work (ZeroMQ polls, pipe writes) on a thread of its own, off the Swift
/// concurrency pool, and returns its result.
public func runOffPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        _ = DedicatedThread(name: "ferry-testkit") {
            continuation.resume(with: Result { try body() })
        }
    }
}

/// Runs `body` and returns its result, or throws ``EventuallyTimeout`` if it takes longer than
/// `timeout`. Unlike a task group, it does not wait for a body that ignores cancellation (an
/// `await client.send(…)` whose agent never answers): that body is left running.
public func withTimeout<T: Sendable>(
    _ timeout: Duration, _ what: String = "an operation", _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let once = ResumeOnce<T>()
    return try await withCheckedThrowingContinuation { continuation in
        once.set(continuation)
        let work = Task { once.resume(with: await Result(catching: body)) }
        Task {
            try? await Task.sleep(for: timeout)
            if once.resume(with: .failure(EventuallyTimeout(what: what, timeout: timeout, lastError: nil))) { work.cancel() }
        }
    }
}

private final class ResumeOnce<T: Sendable>: Sendable {
    private let state = Mutex<(continuation: CheckedContinuation<T, any Error>?, done: Bool)>((nil, false))

    func set(_ continuation: CheckedContinuation<T, any Error>) {
        state.withLock { $0.continuation = continuation }
    }

    @discardableResult
    func resume(with result: Result<T, any Error>) -> Bool {
        let continuation = state.withLock { state -> CheckedContinuation<T, any Error>? in
            guard !state.done, let continuation = state.continuation else { return nil }
            state.done = true
            return continuation
        }
        continuation?.resume(with: result)
        return continuation != nil
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
