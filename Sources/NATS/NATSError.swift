import CNATS

/// An error reported by nats.c: the `natsStatus` code, the library's text for it (the thread's
/// last-error text when there is one, read right after the failing call), the operation that
/// failed and, for JetStream API errors, the server's JetStream error code.
///
/// The one error type of this module (compare `ZMQError`).
public struct NATSError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The raw `natsStatus` value.
    public var code: UInt32
    /// What nats.c said about it.
    public var text: String
    /// The call (or wrapper operation) that failed, e.g. `"js_AddStream(FERRY)"`.
    public var operation: String
    /// The JetStream error code (`jsErrCode`, e.g. 10059 "stream not found"), or `nil`.
    public var jetStreamCode: Int?

    /// Creates an error.
    public init(code: UInt32, text: String, operation: String, jetStreamCode: Int? = nil) {
        self.code = code
        self.text = text
        self.operation = operation
        self.jetStreamCode = jetStreamCode
    }

    /// An error for `status`, with the calling thread's last-error text when nats.c left one.
    static func status(_ status: natsStatus, _ operation: String, jetStreamCode: jsErrCode? = nil) -> NATSError {
        let detail = String(cString: CNATS_lastErrorText())
        let generic = String(cString: natsStatus_GetText(status))
        let js = jetStreamCode.flatMap { $0.rawValue == 0 ? nil : Int($0.rawValue) }
        return NATSError(code: status.rawValue, text: detail.isEmpty ? generic : detail, operation: operation, jetStreamCode: js)
    }

    /// An error raised by this wrapper itself (bad arguments, a publish that was never acknowledged).
    static func wrapper(_ status: natsStatus, _ text: String, _ operation: String) -> NATSError {
        NATSError(code: status.rawValue, text: text, operation: operation)
    }

    /// nats.c's generic text for ``code``.
    public var statusText: String { String(cString: natsStatus_GetText(natsStatus(rawValue: code))) }

    public var description: String {
        var result = "\(operation): \(text)"
        if text != statusText { result += " (\(statusText))" }
        if let jetStreamCode { result += " [JetStream error \(jetStreamCode)]" }
        return result
    }

    /// A timeout (`NATS_TIMEOUT`): no answer in time, including an unacknowledged publish.
    public var isTimeout: Bool { code == NATS_TIMEOUT.rawValue }
    /// Nobody listens on the subject (`NATS_NO_RESPONDERS`): for JetStream, no stream captures
    /// the subject, or JetStream is not available there.
    public var isNoResponders: Bool { code == NATS_NO_RESPONDERS.rawValue }
    /// The connection was closed (`NATS_CONNECTION_CLOSED`).
    public var isConnectionClosed: Bool { code == NATS_CONNECTION_CLOSED.rawValue }
    /// The stream does not exist (JetStream error 10059).
    public var isStreamNotFound: Bool { jetStreamCode == Int(JSStreamNotFoundErr.rawValue) }
}

/// Runs a nats.c call returning `natsStatus` and throws ``NATSError`` unless it is `NATS_OK`.
/// Every fallible C call in this module goes through here (or reads `jsErrCode` alongside), so
/// the thread's last-error text is read right after the call.
@inline(__always)
func natsCall(_ operation: @autoclosure () -> String, _ body: () -> natsStatus) throws(NATSError) {
    let status = body()
    if status != NATS_OK { throw NATSError.status(status, operation()) }
}

/// As ``natsCall(_:_:)`` for JetStream calls that also report a `jsErrCode`.
@inline(__always)
func jsCall(_ operation: @autoclosure () -> String, _ body: (UnsafeMutablePointer<jsErrCode>) -> natsStatus) throws(NATSError) {
    var errorCode = jsErrCode(rawValue: 0)
    let status = body(&errorCode)
    if status != NATS_OK { throw NATSError.status(status, operation(), jetStreamCode: errorCode) }
}
