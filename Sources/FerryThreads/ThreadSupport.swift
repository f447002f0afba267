#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// A FIFO handed between threads: producers ``put(_:)``, one consumer thread blocks in
/// ``takeAll(timeout:)``. Built on a pthread mutex and condition variable because the consumer is
/// a dedicated thread that must sleep, which `Synchronization.Mutex` cannot do.
///
/// The type is `public` (its members `package`, its methods `@inlinable`) so that the modules that
/// use an inbox specialise it for their element. Unspecialised, every put and take looked
/// `Array<Element>`'s metadata up at run time, 300 to 800 instructions each (callgrind, issue 37).
/// With Swift 6.3, the `@inlinable package` methods of a generic type were specialised in
/// another module only when the type itself was `public`. That was checked in a two-module
/// `swiftc -O -wmo -package-name` build: a class's and a struct's methods alike were not, while a
/// free `@inlinable package` generic function was. `SocketQueue` is `public` for the same reason.
/// `public` here is no API promise: FerryThreads is not a product.
public final class ThreadInbox<Element: Sendable>: @unchecked Sendable {
    // @unchecked: `items` and `closed` are only touched with `mutex` held, by every file of this
    // module (they are `@usableFromInline`, so not `private`, for the inlinable methods).
    @usableFromInline var mutex = pthread_mutex_t()
    @usableFromInline var condition = pthread_cond_t()
    @usableFromInline var items: [Element] = []
    @usableFromInline var closed = false

    /// An empty, open inbox.
    package init() {
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&condition, nil)
    }

    deinit {
        pthread_cond_destroy(&condition)
        pthread_mutex_destroy(&mutex)
    }

    /// Adds an item and wakes the consumer. Returns false once the inbox is closed.
    @discardableResult
    @inlinable
    package func put(_ item: Element) -> Bool {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        guard !closed else { return false }
        items.append(item)
        pthread_cond_signal(&condition)
        return true
    }

    /// Items waiting to be taken.
    @inlinable
    package var count: Int {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return items.count
    }

    /// Items waiting and whether the inbox is closed, read under one lock.
    @inlinable
    package var state: (count: Int, closed: Bool) {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return (items.count, closed)
    }

    /// Waits up to `timeout` for at least one item without taking any (the consumer takes them
    /// later, e.g. once it holds a lock that orders it with other takers). Returns false when the
    /// inbox is closed and empty, true otherwise (items waiting, or the timeout passed).
    @inlinable
    package func wait(timeout: Duration) -> Bool {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        waitForItems(timeout: timeout)
        return !(items.isEmpty && closed)
    }

    /// Waits with `mutex` held until an item is queued, the inbox is closed or `timeout` passed.
    @inlinable
    func waitForItems(timeout: Duration) {
        guard items.isEmpty && !closed && timeout > .zero else { return }
        var deadline = timespec()
        clock_gettime(CLOCK_REALTIME, &deadline)
        let (seconds, attoseconds) = timeout.components
        var nanoseconds = Int(deadline.tv_nsec) + Int(attoseconds / 1_000_000_000)
        deadline.tv_sec += Int(seconds) + nanoseconds / 1_000_000_000
        nanoseconds %= 1_000_000_000
        deadline.tv_nsec = nanoseconds
        while items.isEmpty && !closed {
            if pthread_cond_timedwait(&condition, &mutex, &deadline) == ETIMEDOUT { break }
        }
    }

    /// Closes the inbox: later puts are refused; the consumer drains what is left.
    @inlinable
    package func close() {
        pthread_mutex_lock(&mutex)
        closed = true
        pthread_cond_broadcast(&condition)
        pthread_mutex_unlock(&mutex)
    }

    /// Takes everything queued, waiting up to `timeout` for at least one item. Returns `nil` when
    /// the inbox is closed and empty.
    @inlinable
    package func takeAll(timeout: Duration) -> [Element]? {
        take(timeout: timeout, budget: .max) { _ in 0 }
    }

    /// Like ``takeAll(timeout:)``, but takes items oldest first only until their `weight`s add
    /// up to `budget` (always at least one item); the rest stay queued for the next take.
    @inlinable
    package func take(timeout: Duration, budget: Int, weight: (Element) -> Int) -> [Element]? {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        waitForItems(timeout: timeout)
        if items.isEmpty && closed { return nil }
        var count = 0, total = 0
        while count < items.count && (count == 0 || total < budget) {
            total += weight(items[count])
            count += 1
        }
        if count == items.count {
            defer { items.removeAll(keepingCapacity: true) }
            return items
        }
        defer { items.removeFirst(count) }
        return Array(items.prefix(count))
    }
}

/// A self-pipe that wakes a thread blocked in `zmq_poll`.
package final class WakePipe: Sendable {
    /// The end to poll for readability.
    package let readEnd: CInt
    private let writeEnd: CInt

    package init() throws {
        var fds: [CInt] = [0, 0]
        guard pipe(&fds) == 0 else { throw WakePipeError(errno: errno) }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        readEnd = fds[0]
        writeEnd = fds[1]
    }

    /// Makes the read end readable. A full pipe already is, so EAGAIN is fine.
    package func wake() {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    /// Empties the pipe after a wake-up.
    package func drain() {
        var buffer = [UInt8](repeating: 0, count: 256)
        while read(readEnd, &buffer, buffer.count) > 0 {}
    }

    /// Closes both ends.
    package func close() {
        _ = Glibc.close(readEnd)
        _ = Glibc.close(writeEnd)
    }
}

/// Starts a dedicated thread running `body` and returns a handle to join it.
package final class DedicatedThread: Sendable {
    private let done = ThreadInbox<Bool>()
    /// What the thread is for, for logs and debugging; on Linux also the OS thread's name (its
    /// first 15 bytes), so `top -H`, `perf` and `gdb` show `ferry-commit` rather than the name
    /// the thread inherited.
    package let name: String

    package init(name: String, _ body: @escaping @Sendable () -> Void) {
        self.name = name
        let done = self.done
        let box = Unmanaged.passRetained(ThreadBody {
            Self.nameCurrentThread(name)
            body()
            done.put(true)
        })
        var thread = pthread_t()
        let result = pthread_create(&thread, nil, { raw in
            let body = Unmanaged<ThreadBody>.fromOpaque(raw!).takeRetainedValue()
            body.run()
            return nil
        }, box.toOpaque())
        precondition(result == 0, "pthread_create failed: \(result)")
        pthread_detach(thread)
    }

    /// Names the calling OS thread through `/proc/thread-self/comm` (Glibc's module exposes
    /// neither `pthread_setname_np` nor the variadic `prctl`). Best effort: a name is a help, not
    /// a requirement.
    private static func nameCurrentThread(_ name: String) {
        #if os(Linux)
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { _ = Glibc.close(fd) }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        #endif
    }

    /// Blocks until the thread's body returns. Call from a thread that may block, never from the
    /// concurrency pool.
    package func join() {
        while done.takeAll(timeout: .seconds(1))?.isEmpty ?? false {}
    }

    /// Waits for the thread without blocking the concurrency pool (on a thread of its own, so a
    /// join never queues behind other blocking work).
    package func joinAsync() async {
        _ = try? await BlockingExecutor.runDetached(name: name + "-join") { self.join() }
    }

    private final class ThreadBody: Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }
}

/// Runs blocking work (file I/O, fsync, joins) on a dedicated thread, off the Swift concurrency
/// pool, and resumes the caller when it is done.
///
/// One executor serialises its jobs, so unrelated blocking work gets executors of its own: each
/// sink has one (a sink stalled in I/O holds back only itself), and so does the agent's control
/// socket. ``shutdown()``, or releasing the last reference, ends the thread once the queued jobs
/// are done; a job submitted after `shutdown()` runs on a thread of its own rather than being lost.
///
/// It is also a `TaskExecutor`: a task run with it as its executor preference
/// (`withTaskExecutorPreference`, `addTask(executorPreference:)`) runs its nonisolated async code
/// on this thread, and there ``run(_:)`` calls its body inline, with no hop and no suspension. A
/// sink's delivery loop runs so (docs/ARCHITECTURE.md, "The walk of one event"): its log reads,
/// the sink's writes and the cursor saves are plain calls on the sink's thread.
package final class BlockingExecutor: TaskExecutor, Sendable {
    /// An executor for short, independent work of a process (never for I/O that can stall).
    package static let shared = BlockingExecutor(name: "ferry-blocking-io")

    private let inbox = ThreadInbox<@Sendable () -> Void>()
    /// The executor's thread (`pthread_self()` there), 0 until it has started.
    private let thread: ThreadIdentity
    /// What the thread is for, for logs and debugging.
    package let name: String

    package init(name: String) {
        self.name = name
        // The thread holds the inbox, not the executor, so releasing the executor ends it.
        let inbox = self.inbox, thread = ThreadIdentity()
        self.thread = thread
        _ = DedicatedThread(name: name) {
            thread.setCurrent()
            while let jobs = inbox.takeAll(timeout: .seconds(3600)) {
                for job in jobs { job() }
            }
        }
    }

    deinit {
        inbox.close()
    }

    /// Whether the calling code runs on the executor's thread.
    package var isCurrent: Bool { thread.isCurrent }

    /// Runs `body` on the executor's thread and returns its result: inline when called there
    /// (a task that prefers this executor), else queued and awaited.
    package func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        if isCurrent { return try body() }
        return try await withCheckedThrowingContinuation { continuation in
            submit { continuation.resume(with: Result { try body() }) }
        }
    }

    /// Runs non-throwing `body` on the executor's thread (inline when called there).
    package func run<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        if isCurrent { return body() }
        return await withCheckedContinuation { continuation in
            submit { continuation.resume(returning: body()) }
        }
    }

    /// Runs a job of a task that prefers this executor, on its thread, in turn with the blocking
    /// work queued there.
    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job), executor = asUnownedTaskExecutor()
        submit { job.runSynchronously(on: executor) }
    }

    /// Queues `job` without waiting for it.
    package func submit(_ job: @escaping @Sendable () -> Void) {
        if !inbox.put(job) { Self.runDetached(name: name, job) }
    }

    /// Ends the thread after the jobs already queued.
    package func shutdown() {
        inbox.close()
    }

    /// Runs `body` on a new thread of its own (for rare blocking waits that must not queue behind,
    /// or hold up, anything else) and returns its result.
    package static func runDetached<T: Sendable>(name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            runDetached(name: name) { continuation.resume(with: Result { try body() }) }
        }
    }

    private static func runDetached(name: String, _ job: @escaping @Sendable () -> Void) {
        _ = DedicatedThread(name: name, job)
    }
}

/// Which thread a ``BlockingExecutor`` runs on, set once by that thread.
private final class ThreadIdentity: Sendable {
    private let raw = Atomic<UInt>(0)

    func setCurrent() {
        raw.store(UInt(pthread_self()), ordering: .releasing)
    }

    var isCurrent: Bool {
        raw.load(ordering: .acquiring) == UInt(pthread_self())
    }
}

/// `pipe(2)` failed while creating a ``WakePipe``.
package struct WakePipeError: Error {
    package var errno: CInt
}
