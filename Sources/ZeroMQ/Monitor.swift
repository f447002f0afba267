import CZeroMQ

/// One event of a socket monitor (`zmq_socket_monitor`): what happened to which endpoint.
public struct ZMQMonitorEvent: Sendable, Hashable {
    /// What happened.
    public struct Kind: OptionSet, Sendable, Hashable {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }
        /// A peer connected to a bound socket.
        public static let accepted = Kind(rawValue: ZMQ_EVENT_ACCEPTED)
        /// A session ended (the peer went, or its handshake failed).
        public static let disconnected = Kind(rawValue: ZMQ_EVENT_DISCONNECTED)
        /// The monitor stopped.
        public static let monitorStopped = Kind(rawValue: ZMQ_EVENT_MONITOR_STOPPED)
    }

    /// The event (one ``Kind`` bit).
    public var kind: Kind
    /// The event's value (a file descriptor or an error number, depending on the event).
    public var value: UInt32
    /// The endpoint it concerns.
    public var endpoint: String

    /// Decodes a monitor message: a 6-byte frame (event:u16, value:u32, native byte order, little-endian on the hosts Ferry runs on) and
    /// the endpoint; nil for anything else.
    public init?(frames: [[UInt8]]) {
        guard frames.count >= 2, frames[0].count == 6 else { return nil }
        let first = frames[0]
        kind = Kind(rawValue: Int32(UInt16(first[0]) | UInt16(first[1]) << 8))
        value = UInt32(first[2]) | UInt32(first[3]) << 8 | UInt32(first[4]) << 16 | UInt32(first[5]) << 24
        endpoint = String(decoding: frames[1], as: UTF8.self)
    }
}

extension ZMQSocket {
    /// Starts publishing `events` of this socket on the `inproc://` endpoint `endpoint`; connect a
    /// ``ZMQSocketType/pair`` socket there to read them (``ZMQMonitorEvent``).
    public func monitor(_ endpoint: String, events: ZMQMonitorEvent.Kind) throws(ZMQError) {
        let handle = try live("zmq_socket_monitor")
        guard zmq_socket_monitor(handle, endpoint, events.rawValue) == 0 else { throw ZMQError.last("zmq_socket_monitor") }
    }
}
