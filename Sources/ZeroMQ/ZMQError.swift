import CZeroMQ

/// An error reported by libzmq, carrying the `zmq_errno()` value read right after the failing call.
///
/// Modelled on swift-system's `Errno`: a raw `CInt` code with readable names for the cases
/// callers branch on, plus the operation that failed.
public struct ZMQError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The errno value libzmq reported.
    public var code: CInt
    /// The libzmq call (or wrapper operation) that failed, e.g. `"zmq_bind(ipc:///run/ferry/ingest)"`.
    public var operation: String

    /// Creates an error from an errno value and the operation that produced it.
    public init(code: CInt, operation: String) {
        self.code = code
        self.operation = operation
    }

    /// Reads `zmq_errno()` for the call that just failed.
    @inline(__always)
    static func last(_ operation: @autoclosure () -> String) -> ZMQError {
        let code = CZeroMQ_errno()
        return ZMQError(code: code, operation: operation())
    }

    /// The human-readable text libzmq gives for ``code``.
    public var message: String { String(cString: zmq_strerror(code)) }

    public var description: String { "\(operation): \(message) (errno \(code))" }

    /// The operation would have blocked (`EAGAIN`).
    public var isWouldBlock: Bool { code == EAGAIN }
    /// The context was terminated (`ETERM`): the socket must be closed.
    public var isContextTerminated: Bool { code == ETERM }
    /// The call was interrupted by a signal (`EINTR`).
    public var isInterrupted: Bool { code == EINTR }
    /// The message could not be routed (`EHOSTUNREACH`, ROUTER with `ZMQ_ROUTER_MANDATORY`).
    public var isHostUnreachable: Bool { code == EHOSTUNREACH }

    /// Compares codes only, so callers can write `error == .wouldBlock`.
    public static func ~= (pattern: ZMQError, value: ZMQError) -> Bool { pattern.code == value.code }
}

/// Runs a libzmq call that returns `-1` on failure, retrying on `EINTR`.
///
/// Every C call in this module goes through here (compare swift-nio's `syscall(blocking:)`), so
/// the errno is read immediately and interrupted calls never surface as errors.
@inline(__always)
func zmqCall(_ operation: @autoclosure () -> String, _ body: () -> CInt) throws(ZMQError) -> CInt {
    while true {
        let result = body()
        if result >= 0 { return result }
        let error = ZMQError.last(operation())
        if error.isInterrupted { continue }
        throw error
    }
}
