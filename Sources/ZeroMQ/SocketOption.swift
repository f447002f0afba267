import CZeroMQ

/// An integer socket option, by name, so that code using ``ZMQSocket`` needs no `import CZeroMQ`
/// for the option constants. Set with ``ZMQSocket/setOption(_:_:)``, read with
/// ``ZMQSocket/option(_:)``.
public struct ZMQSocketOption: Sendable, Hashable, CustomStringConvertible {
    /// The libzmq constant (`ZMQ_LINGER`, …).
    let rawValue: CInt
    /// The libzmq name, for errors and logs.
    public let description: String

    init(_ rawValue: CInt, _ name: String) {
        self.rawValue = rawValue
        self.description = name
    }

    /// `ZMQ_LINGER`: how long, in milliseconds, `close` keeps unsent messages (`-1` forever, `0`
    /// drop them).
    public static let linger = ZMQSocketOption(ZMQ_LINGER, "ZMQ_LINGER")
    /// `ZMQ_IMMEDIATE`: `1` queues messages only to completed connections.
    public static let immediate = ZMQSocketOption(ZMQ_IMMEDIATE, "ZMQ_IMMEDIATE")
    /// `ZMQ_SNDHWM`: the send high-water mark, in messages (`0` no limit).
    public static let sendHighWaterMark = ZMQSocketOption(ZMQ_SNDHWM, "ZMQ_SNDHWM")
    /// `ZMQ_RCVHWM`: the receive high-water mark, in messages (`0` no limit).
    public static let receiveHighWaterMark = ZMQSocketOption(ZMQ_RCVHWM, "ZMQ_RCVHWM")
    /// `ZMQ_RECONNECT_IVL`: the first reconnection delay, in milliseconds.
    public static let reconnectInterval = ZMQSocketOption(ZMQ_RECONNECT_IVL, "ZMQ_RECONNECT_IVL")
    /// `ZMQ_RECONNECT_IVL_MAX`: the longest reconnection delay, in milliseconds (`0` no backoff).
    public static let reconnectIntervalMax = ZMQSocketOption(ZMQ_RECONNECT_IVL_MAX, "ZMQ_RECONNECT_IVL_MAX")
    /// `ZMQ_SNDTIMEO`: how long, in milliseconds, a blocking send waits (`-1` forever).
    public static let sendTimeout = ZMQSocketOption(ZMQ_SNDTIMEO, "ZMQ_SNDTIMEO")
    /// `ZMQ_RCVTIMEO`: how long, in milliseconds, a blocking receive waits (`-1` forever).
    public static let receiveTimeout = ZMQSocketOption(ZMQ_RCVTIMEO, "ZMQ_RCVTIMEO")
    /// `ZMQ_ROUTER_MANDATORY`: `1` makes a ROUTER fail a send to an unknown peer instead of
    /// dropping it.
    public static let routerMandatory = ZMQSocketOption(ZMQ_ROUTER_MANDATORY, "ZMQ_ROUTER_MANDATORY")
    /// `ZMQ_SNDBUF`: the kernel send buffer, in bytes (`-1` the OS default).
    public static let sendBuffer = ZMQSocketOption(ZMQ_SNDBUF, "ZMQ_SNDBUF")
    /// `ZMQ_RCVBUF`: the kernel receive buffer, in bytes (`-1` the OS default).
    public static let receiveBuffer = ZMQSocketOption(ZMQ_RCVBUF, "ZMQ_RCVBUF")
    /// `ZMQ_FD` (read only): the descriptor that becomes readable when commands reach the socket
    /// while nobody is processing them; see ``ZMQWaiter`` for the rule that makes it usable.
    public static let notificationDescriptor = ZMQSocketOption(ZMQ_FD, "ZMQ_FD")
}

/// A binary socket option, by name. Set with ``ZMQSocket/setOption(_:bytes:)``.
public struct ZMQSocketBytesOption: Sendable, Hashable, CustomStringConvertible {
    /// The libzmq constant (`ZMQ_ROUTING_ID`, …).
    let rawValue: CInt
    /// The libzmq name, for errors and logs.
    public let description: String

    init(_ rawValue: CInt, _ name: String) {
        self.rawValue = rawValue
        self.description = name
    }

    /// `ZMQ_ROUTING_ID`: the identity a ROUTER peer sees for this socket (1–255 bytes, not
    /// starting with a zero byte).
    public static let routingID = ZMQSocketBytesOption(ZMQ_ROUTING_ID, "ZMQ_ROUTING_ID")
    /// `ZMQ_SUBSCRIBE`: a SUB socket receives messages whose first frame starts with these bytes
    /// (see also ``ZMQSocket/subscribe(_:)``).
    public static let subscribe = ZMQSocketBytesOption(ZMQ_SUBSCRIBE, "ZMQ_SUBSCRIBE")
    /// `ZMQ_UNSUBSCRIBE`: undoes one earlier `subscribe` of the same bytes.
    public static let unsubscribe = ZMQSocketBytesOption(ZMQ_UNSUBSCRIBE, "ZMQ_UNSUBSCRIBE")
}

extension ZMQSocket {
    /// Sets an integer option.
    public func setOption(_ option: ZMQSocketOption, _ value: Int32) throws(ZMQError) {
        try setOption(option.rawValue, value)
    }

    /// Sets a binary option.
    public func setOption(_ option: ZMQSocketBytesOption, bytes: some Collection<UInt8>) throws(ZMQError) {
        try setOption(option.rawValue, bytes: bytes)
    }

    /// Reads an integer option.
    public func option(_ option: ZMQSocketOption) throws(ZMQError) -> Int32 {
        try self.option(option.rawValue)
    }
}
