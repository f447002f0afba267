import CZeroMQ
import Synchronization

/// A ZeroMQ context: the container for all sockets of a process and libzmq's I/O threads.
///
/// A context is thread safe and may be shared. Terminate it explicitly with ``terminate()`` once
/// every socket made from it is closed; `deinit` never blocks.
public final class ZMQContext: Sendable {
    // The handle itself never changes; libzmq documents zmq_ctx_* as thread safe.
    nonisolated(unsafe) let handle: UnsafeMutableRawPointer
    private let terminated = Atomic<Bool>(false)

    /// Creates a context with the given number of libzmq I/O threads.
    public init(ioThreads: Int = 1) throws(ZMQError) {
        guard let handle = zmq_ctx_new() else { throw ZMQError.last("zmq_ctx_new") }
        self.handle = handle
        if ioThreads != 1 {
            _ = try zmqCall("zmq_ctx_set(ZMQ_IO_THREADS)") { zmq_ctx_set(handle, ZMQ_IO_THREADS, CInt(ioThreads)) }
        }
    }

    /// Makes every blocking call on this context's sockets return `ETERM`, without waiting.
    ///
    /// Use it to wake threads that own sockets so they close them; then call ``terminate()``.
    public func shutdown() {
        _ = zmq_ctx_shutdown(handle)
    }

    /// Terminates the context. Blocks until every socket made from it has been closed, so call it
    /// from a thread that owns no socket and never from the Swift concurrency pool.
    public func terminate() {
        guard !terminated.exchange(true, ordering: .acquiringAndReleasing) else { return }
        while zmq_ctx_term(handle) != 0 && CZeroMQ_errno() == EINTR {}
    }

    /// Whether ``terminate()`` has been called.
    public var isTerminated: Bool { terminated.load(ordering: .acquiring) }

    // No deinit: zmq_ctx_term there could block forever on an unclosed socket (a classic bug of
    // Swift ZeroMQ bindings). An unterminated context leaks libzmq's I/O thread, nothing more.

    /// The libzmq version linked at run time, e.g. `(4, 3, 4)`.
    public static var version: (major: Int, minor: Int, patch: Int) {
        var major: CInt = 0, minor: CInt = 0, patch: CInt = 0
        zmq_version(&major, &minor, &patch)
        return (Int(major), Int(minor), Int(patch))
    }
}
