#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
@_spi(ExperimentalCustomExecutors) @_spi(ExperimentalScheduling) import _Concurrency
import FerryThreads

/// The only executor of the `ferry` process, installed by ``FerryMain`` as Swift concurrency's
/// main *and* default (global) executor: every job runs on the main thread, in the order it was
/// enqueued; a sleeping task's job waits in a timer list of that thread. No thread pool, no timer
/// thread.
///
/// Why: on Linux the runtime's own executors are libdispatch's. The first job that reaches a
/// libdispatch worker thread (any hop off the main thread, `Task.sleep`'s wake-up, or
/// `dispatch_main` handing the main queue to the pool) registers that worker with libdispatch's
/// thread-pool monitor, a timer source on the manager queue; the manager queue targets the
/// user-interactive overcommit root queue, whose worker asks for nice −4 with `setpriority`. A
/// non-root user may not lower a nice value (`EACCES`), so libdispatch logged "Failed to set
/// thread priority for worker thread … errno=13" (to syslog, the journal) on every run (issue 29;
/// gdb on Swift 6.3.1: `_dispatch_workq_worker_register` → `_dispatch_mgr_queue_push` →
/// `_dispatch_root_queue_poke_slow` on the user-interactive overcommit queue). A command that
/// runs for milliseconds does its blocking I/O on threads of its own (the client library's) and
/// needs no pool: with this executor libdispatch never starts a thread.
///
/// The runtime's executor factory is an experimental interface of Swift 6.2+ (`ExecutorFactory`,
/// `SchedulingExecutor`, `_createExecutors`); `FerryIntegrationTests/CLIThreadPriorityTests`
/// catches a toolchain where it stops taking effect.
final class CLIExecutor: MainExecutor, TaskExecutor, SchedulingExecutor, @unchecked Sendable {
    // @unchecked: the only shared state is `inbox` (locked); `timers` and `stopped` belong to
    // the thread in `run()`, which sets `runThread` once, before it runs any job (the only
    // reader, `checkIsolated()`, is called from jobs).

    /// The process's executor.
    static let shared = CLIExecutor()

    /// What other threads (and the jobs themselves) hand to the run loop.
    private enum Entry: Sendable {
        case now(UnownedJob)
        case at(ContinuousClock.Instant, UnownedJob)
        case stop
    }

    private let inbox = ThreadInbox<Entry>()
    /// Sleeping jobs with their due times; touched only by the thread in ``run()``.
    private var timers: [(due: ContinuousClock.Instant, job: UnownedJob)] = []
    private var stopped = false
    private var runThread: pthread_t?

    private init() {}

    func enqueue(_ job: consuming ExecutorJob) {
        inbox.put(.now(UnownedJob(job)))
    }

    /// A delayed job (`Task.sleep`): due after `delay` on `clock`. `ContinuousClock` and
    /// `SuspendingClock` (the clocks `ferry` sleeps on) count in `Duration`; both are timed on the
    /// continuous clock here, which differs only across a system suspend.
    func enqueue<C: Clock>(_ job: consuming ExecutorJob, after delay: C.Duration, tolerance: C.Duration?, clock: C) {
        guard let delay = delay as? Duration else {
            preconditionFailure("ferry's executor times sleeps on clocks counting in Duration, not \(C.self)")
        }
        inbox.put(.at(.now + max(delay, .zero), UnownedJob(job)))
    }

    /// Runs jobs on the calling thread until ``stop()``.
    func run() throws {
        runThread = pthread_self()
        while !stopped {
            let now = ContinuousClock.now
            var due: [UnownedJob] = []
            timers.removeAll { timer in
                guard timer.due <= now else { return false }
                due.append(timer.job)
                return true
            }
            for job in due { job.runSynchronously(on: asUnownedSerialExecutor()) }
            let wait = timers.map { $0.due - ContinuousClock.now }.min().map { max($0, .zero) } ?? .seconds(3600)
            guard !due.isEmpty || wait > .zero else { continue }
            guard let entries = inbox.takeAll(timeout: due.isEmpty ? wait : .zero) else { return }
            for entry in entries {
                switch entry {
                case .now(let job): job.runSynchronously(on: asUnownedSerialExecutor())
                case .at(let instant, let job): timers.append((instant, job))
                case .stop: stopped = true
                }
            }
        }
    }

    /// Ends ``run()`` after the jobs already queued.
    func stop() {
        inbox.put(.stop)
    }

    var isMainExecutor: Bool { true }

    func checkIsolated() {
        guard let runThread, pthread_equal(runThread, pthread_self()) != 0 else {
            preconditionFailure("not on ferry's executor thread")
        }
    }
}

/// The executors `ferry` runs Swift concurrency on: ``CLIExecutor`` for both.
struct CLIExecutorFactory: ExecutorFactory {
    static var mainExecutor: any MainExecutor { CLIExecutor.shared }
    static var defaultExecutor: any TaskExecutor { CLIExecutor.shared }

    /// Makes ``CLIExecutor`` the process's executors; call first thing in `main`, before any task
    /// exists.
    static func install() {
        _createExecutors(factory: CLIExecutorFactory.self)
    }
}
