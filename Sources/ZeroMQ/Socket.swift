#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CZeroMQ
import FerryPeer

/// The ZeroMQ socket types Ferry uses.
public enum ZMQSocketType: Sendable {
    case pair, pub, sub, req, rep, dealer, router, pull, push, xpub, xsub

    var rawValue: CInt {
        switch self {
        case .pair: ZMQ_PAIR
        case .pub: ZMQ_PUB
        case .sub: ZMQ_SUB
        case .req: ZMQ_REQ
        case .rep: ZMQ_REP
        case .dealer: ZMQ_DEALER
        case .router: ZMQ_ROUTER
        case .pull: ZMQ_PULL
        case .push: ZMQ_PUSH
        case .xpub: ZMQ_XPUB
        case .xsub: ZMQ_XSUB
        }
    }
}

/// A ZeroMQ socket.
///
/// libzmq sockets are not thread safe, so this type is deliberately not `Sendable`: create it on
/// the thread that uses it, use it only there and ``close()`` it there before the context is
/// terminated. Every operation throws ``ZMQError``; a would-block condition is reported as a
/// `nil`/`false` result, not an error.
public final class ZMQSocket {
    private var handle: UnsafeMutableRawPointer?
    /// Whether libzmq may have taken this socket's notifications without reporting them: set by
    /// every call that can process the socket's commands (send, receive, options) and cleared by
    /// ``ZMQWaiter`` when it reads `ZMQ_EVENTS` and finds nothing to read. See ``ZMQWaiter``.
    var eventsUnread = true
    /// The socket's type.
    public let type: ZMQSocketType

    /// Creates a socket of `type` in `context`. Linger defaults to 0 so closing never blocks.
    public init(context: ZMQContext, type: ZMQSocketType) throws(ZMQError) {
        guard let handle = zmq_socket(context.handle, type.rawValue) else {
            throw ZMQError.last("zmq_socket")
        }
        self.handle = handle
        self.type = type
        try setOption(ZMQ_LINGER, 0)
    }

    deinit {
        // Closing is non-blocking with linger 0; it is still the owner's job to call close() on
        // the owning thread. This only prevents a leaked descriptor if it forgot.
        if let handle { zmq_close(handle) }
    }

    func live(_ operation: @autoclosure () -> String) throws(ZMQError) -> UnsafeMutableRawPointer {
        guard let handle else { throw ZMQError(code: ENOTSOCK, operation: operation()) }
        // Any call into libzmq on the socket may process its command mailbox and so consume the
        // signal on ZMQ_FD: its readiness must be read again before a wait.
        eventsUnread = true
        return handle
    }

    /// Closes the socket. Safe to call more than once.
    public func close() {
        if let handle { zmq_close(handle) }
        handle = nil
    }

    /// Whether ``close()`` has been called.
    public var isClosed: Bool { handle == nil }

    // MARK: Endpoints

    /// Binds to `endpoint`, e.g. `ipc:///run/user/1000/ferry/ingest`.
    public func bind(_ endpoint: String) throws(ZMQError) {
        let socket = try live("zmq_bind(\(endpoint))")
        _ = try zmqCall("zmq_bind(\(endpoint))") { zmq_bind(socket, endpoint) }
    }

    /// Connects to `endpoint`. For `ipc://` this succeeds even if nobody listens yet; libzmq
    /// reconnects in the background.
    public func connect(_ endpoint: String) throws(ZMQError) {
        let socket = try live("zmq_connect(\(endpoint))")
        _ = try zmqCall("zmq_connect(\(endpoint))") { zmq_connect(socket, endpoint) }
    }

    /// Disconnects from an endpoint given to ``connect(_:)``.
    public func disconnect(_ endpoint: String) throws(ZMQError) {
        let socket = try live("zmq_disconnect(\(endpoint))")
        _ = try zmqCall("zmq_disconnect(\(endpoint))") { zmq_disconnect(socket, endpoint) }
    }

    // MARK: Options

    // The raw options by libzmq constant stay inside the module: callers name them with
    // ZMQSocketOption / ZMQSocketBytesOption and need no `import CZeroMQ`.

    /// Sets an integer option (`ZMQ_SNDHWM`, `ZMQ_LINGER`, …).
    func setOption(_ option: CInt, _ value: Int32) throws(ZMQError) {
        let socket = try live("zmq_setsockopt(\(option))")
        var value = value
        _ = try zmqCall("zmq_setsockopt(\(option))") {
            zmq_setsockopt(socket, option, &value, MemoryLayout<Int32>.size)
        }
    }

    /// Sets a binary option (`ZMQ_SUBSCRIBE`, `ZMQ_ROUTING_ID`, …).
    func setOption(_ option: CInt, bytes: some Collection<UInt8>) throws(ZMQError) {
        let socket = try live("zmq_setsockopt(\(option))")
        let array = Array(bytes)
        _ = try zmqCall("zmq_setsockopt(\(option))") {
            array.withUnsafeBytes { zmq_setsockopt(socket, option, $0.baseAddress, $0.count) }
        }
    }

    /// Reads an integer option.
    func option(_ option: CInt) throws(ZMQError) -> Int32 {
        let socket = try live("zmq_getsockopt(\(option))")
        var value: Int32 = 0
        var size = MemoryLayout<Int32>.size
        _ = try zmqCall("zmq_getsockopt(\(option))") { zmq_getsockopt(socket, option, &value, &size) }
        return value
    }

    /// Subscribes a SUB socket to messages whose first frame starts with `prefix` (`""` = all).
    public func subscribe(_ prefix: String) throws(ZMQError) {
        try setOption(ZMQ_SUBSCRIBE, bytes: Array(prefix.utf8))
    }

    /// Send high-water mark, in messages.
    public func setSendHighWaterMark(_ messages: Int32) throws(ZMQError) { try setOption(ZMQ_SNDHWM, messages) }
    /// Receive high-water mark, in messages.
    public func setReceiveHighWaterMark(_ messages: Int32) throws(ZMQError) { try setOption(ZMQ_RCVHWM, messages) }

    /// Largest inbound message libzmq will accept, in bytes; larger ones drop the connection.
    public func setMaxMessageSize(_ bytes: Int64) throws(ZMQError) {
        let socket = try live("zmq_setsockopt(ZMQ_MAXMSGSIZE)")
        var value = bytes
        _ = try zmqCall("zmq_setsockopt(ZMQ_MAXMSGSIZE)") {
            zmq_setsockopt(socket, ZMQ_MAXMSGSIZE, &value, MemoryLayout<Int64>.size)
        }
    }

    // MARK: Messages

    /// Sends a multipart message. Returns `false` if `dontWait` is set and the message could not
    /// be queued right now (`EAGAIN`); any other failure throws.
    @discardableResult
    public func send(_ frames: [[UInt8]], dontWait: Bool = false) throws(ZMQError) -> Bool {
        let socket = try live("zmq_send")
        precondition(!frames.isEmpty, "a ZeroMQ message has at least one frame")
        let base: CInt = dontWait ? ZMQ_DONTWAIT : 0
        for (index, frame) in frames.enumerated() {
            let flags = base | (index < frames.count - 1 ? ZMQ_SNDMORE : 0)
            do {
                _ = try zmqCall("zmq_send") {
                    frame.withUnsafeBytes { zmq_send(socket, $0.baseAddress, $0.count, flags) }
                }
            } catch {
                // libzmq queues a multipart message atomically once its first frame is accepted,
                // so would-block can only happen on the first frame.
                if error.isWouldBlock && index == 0 { return false }
                throw error
            }
        }
        return true
    }

    /// Sends a three-frame message from raw buffers (libzmq copies them), with no array of
    /// frames to build: the agent's acks (routing id, header, body). Returns `false` if
    /// `dontWait` is set and the message could not be queued right now.
    @discardableResult
    public func send(
        _ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer, _ third: UnsafeRawBufferPointer,
        dontWait: Bool = false
    ) throws(ZMQError) -> Bool {
        let socket = try live("zmq_send")
        let base: CInt = dontWait ? ZMQ_DONTWAIT : 0
        do {
            _ = try zmqCall("zmq_send") { zmq_send(socket, first.baseAddress, first.count, base | ZMQ_SNDMORE) }
        } catch {
            // As above: only the first frame can would-block.
            if error.isWouldBlock { return false }
            throw error
        }
        _ = try zmqCall("zmq_send") { zmq_send(socket, second.baseAddress, second.count, base | ZMQ_SNDMORE) }
        _ = try zmqCall("zmq_send") { zmq_send(socket, third.baseAddress, third.count, base) }
        return true
    }

    /// Receives one whole multipart message. Returns `nil` if `dontWait` is set and nothing is
    /// waiting. Frame sizes come from `zmq_msg_size`, never from a truncating `zmq_recv`.
    public func receive(dontWait: Bool = false) throws(ZMQError) -> [[UInt8]]? {
        var ignored: PeerCredentials?
        return try receive(dontWait: dontWait, peer: &ignored, wantPeer: false)
    }

    /// Receives a multipart message and the credentials of the process that sent it, read with
    /// `SO_PEERCRED` from the IPC connection it arrived on (Linux; `nil` elsewhere, on other
    /// transports, or when the connection is already gone).
    public func receiveWithPeer(dontWait: Bool = false) throws(ZMQError) -> (frames: [[UInt8]], peer: PeerCredentials?)? {
        var peer: PeerCredentials?
        guard let frames = try receive(dontWait: dontWait, peer: &peer, wantPeer: true) else { return nil }
        return (frames, peer)
    }

    private func receive(dontWait: Bool, peer: inout PeerCredentials?, wantPeer: Bool) throws(ZMQError) -> [[UInt8]]? {
        let socket = try live("zmq_msg_recv")
        var frames: [[UInt8]] = []
        // Routing id, header and at least one body frame: one allocation for the usual message.
        frames.reserveCapacity(4)
        var message = zmq_msg_t()
        _ = zmq_msg_init(&message)
        defer { zmq_msg_close(&message) }
        let flags: CInt = dontWait ? ZMQ_DONTWAIT : 0
        while true {
            do {
                _ = try zmqCall("zmq_msg_recv") { zmq_msg_recv(&message, socket, frames.isEmpty ? flags : 0) }
            } catch {
                if error.isWouldBlock && frames.isEmpty { return nil }
                throw error
            }
            let size = CZeroMQ_msg_size(&message)
            let frame: [UInt8]
            if size == 0 {
                frame = []
            } else {
                let data = zmq_msg_data(&message)!
                frame = Array(UnsafeRawBufferPointer(start: data, count: size))
            }
            if wantPeer && peer == nil, let address = zmq_msg_gets(&message, "Peer-Address") {
                // libzmq reads SO_PEERCRED once, when the connection is made, and appends
                // ":uid:gid:pid" to an IPC peer's address; every message of that connection
                // carries it. (Not ZMQ_SRCFD + getsockopt per message: after a disconnect that fd
                // number can belong to another connection.) A ROUTER's routing id frame is made
                // locally and carries no metadata, so look at each frame.
                // Parsed in place: a String and its split cost more than the rest of a
                // one-event message's handling.
                peer = PeerCredentials(cPeerAddress: address)
            }
            frames.append(frame)
            // Read "more" before the next recv reuses the message.
            if zmq_msg_more(&message) == 0 { return frames }
        }
    }

    // MARK: Polling support

    var pollHandle: UnsafeMutableRawPointer? { handle }
}


/// Reading the credentials libzmq records for an IPC connection (``PeerCredentials`` is
/// FerryPeer's, shared with the modules that check them).
extension PeerCredentials {
    /// Parses libzmq's `Peer-Address` message property of an IPC connection: the peer's
    /// address, then `:uid:gid:pid` as the kernel reported them (`SO_PEERCRED`) when the
    /// connection was made. `nil` when the property carries no credentials (other transports,
    /// platforms without `SO_PEERCRED`).
    public init?(peerAddress: String) {
        var text = peerAddress
        guard let parsed = text.withUTF8({ Self.parse($0) }) else { return nil }
        self = parsed
    }

    /// ``init(peerAddress:)`` reading a NUL-terminated C string in place (no allocation).
    public init?(cPeerAddress: UnsafePointer<CChar>) {
        let bytes = UnsafeRawPointer(cPeerAddress).assumingMemoryBound(to: UInt8.self)
        guard let parsed = Self.parse(UnsafeBufferPointer(start: bytes, count: strlen(cPeerAddress))) else { return nil }
        self = parsed
    }

    /// The last three `:`-separated decimal fields of `text` (uid, gid, pid), after at least one
    /// more field (the address).
    private static func parse(_ text: UnsafeBufferPointer<UInt8>) -> PeerCredentials? {
        var end = text.count
        /// The decimal field ending at `end` (exclusive), moving `end` to its separating colon.
        func field(max: UInt64) -> UInt64? {
            var value: UInt64 = 0, scale: UInt64 = 1, digits = 0
            while end > 0, text[end - 1] != UInt8(ascii: ":") {
                let digit = text[end - 1] &- UInt8(ascii: "0")
                guard digit <= 9, digits < 10 else { return nil }
                value += UInt64(digit) * scale
                scale *= 10
                digits += 1
                end -= 1
            }
            // A field needs a digit and a colon before it (the address comes first).
            guard digits > 0, end > 0, value <= max else { return nil }
            end -= 1
            return value
        }
        guard let pid = field(max: UInt64(Int32.max)), let gid = field(max: UInt64(UInt32.max)),
              let uid = field(max: UInt64(UInt32.max)), pid > 0 else { return nil }
        return PeerCredentials(pid: Int32(pid), uid: UInt32(uid), gid: UInt32(gid))
    }
}
