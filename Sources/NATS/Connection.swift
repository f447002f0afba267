#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CNATS

/// A connection to a NATS server or cluster (nats.c `natsConnection`).
///
/// nats.c connections are thread-safe and run their own reader, flusher and reconnect threads;
/// this façade can be used from any thread. Its calls block (connecting, flushing), so call them
/// off the Swift concurrency pool.
///
/// Lifetime: ``close()`` closes the connection (idempotent, safe while other threads use it: their
/// calls then fail with `NATS_CONNECTION_CLOSED`). The nats.c object is destroyed in `deinit`,
/// when nothing can use it any more; a ``JetStreamContext`` keeps its connection alive.
/// The library itself (threads, timers, memory) is torn down only by ``NATSLibrary/close(timeout:)``,
/// which a process calls, if at all, after releasing every connection.
public final class NATSConnection: @unchecked Sendable {
    // @unchecked: `handle` is immutable and nats.c serialises every use of a connection
    // internally; it is destroyed only in deinit, when no other reference exists.
    let handle: OpaquePointer

    /// How to connect.
    public struct Options: Sendable, Hashable {
        /// Server URLs (`nats://host:port`); nats.c tries them (randomised) and learns the
        /// cluster's other members from the server it reaches.
        public var servers: [String]
        /// The connection name shown by the server (`connz`).
        public var name: String?
        /// Pause between reconnect attempts to the same server.
        public var reconnectWait: Duration
        /// Most reconnect attempts per server; `nil` reconnects forever.
        public var maxReconnectAttempts: Int?
        /// Timeout of one connection attempt (TCP connect and handshake).
        public var connectTimeout: Duration
        /// If no server is reachable at start, return a connection that keeps trying in the
        /// background (publishes are buffered meanwhile) instead of failing.
        public var retryOnFailedConnect: Bool
        /// Bytes of publishes buffered while disconnected; beyond it publishes fail.
        public var reconnectBufferBytes: Int
        /// An authentication token, if the server wants one.
        public var token: String?
        /// A `.creds` file (user JWT and NKey seed), if the server wants one.
        public var credentialsFile: String?

        /// Creates options; only `servers` has no default.
        public init(
            servers: [String], name: String? = nil, reconnectWait: Duration = .milliseconds(250),
            maxReconnectAttempts: Int? = nil, connectTimeout: Duration = .seconds(2), retryOnFailedConnect: Bool = true,
            reconnectBufferBytes: Int = 8 << 20, token: String? = nil, credentialsFile: String? = nil
        ) {
            self.servers = servers
            self.name = name
            self.reconnectWait = reconnectWait
            self.maxReconnectAttempts = maxReconnectAttempts
            self.connectTimeout = connectTimeout
            self.retryOnFailedConnect = retryOnFailedConnect
            self.reconnectBufferBytes = reconnectBufferBytes
            self.token = token
            self.credentialsFile = credentialsFile
        }
    }

    /// Connects (blocking). With ``Options/retryOnFailedConnect`` the call returns even when no
    /// server is reachable yet, and the connection keeps trying in the background.
    public init(options: Options) throws(NATSError) {
        guard !options.servers.isEmpty else {
            throw NATSError.wrapper(NATS_INVALID_ARG, "no server URL given", "natsConnection_Connect")
        }
        var opts: OpaquePointer?
        try natsCall("natsOptions_Create") { natsOptions_Create(&opts) }
        defer { natsOptions_Destroy(opts) }
        let urls = options.servers.map { strdup($0) }
        defer { urls.forEach { free($0) } }
        var constURLs = urls.map { UnsafePointer<CChar>($0) }
        try natsCall("natsOptions_SetServers") { natsOptions_SetServers(opts, &constURLs, Int32(constURLs.count)) }
        if let name = options.name {
            try natsCall("natsOptions_SetName") { natsOptions_SetName(opts, name) }
        }
        try natsCall("natsOptions_SetMaxReconnect") {
            natsOptions_SetMaxReconnect(opts, Int32(clamping: options.maxReconnectAttempts ?? -1))
        }
        try natsCall("natsOptions_SetReconnectWait") { natsOptions_SetReconnectWait(opts, options.reconnectWait.milliseconds) }
        try natsCall("natsOptions_SetTimeout") { natsOptions_SetTimeout(opts, options.connectTimeout.milliseconds) }
        try natsCall("natsOptions_SetReconnectBufSize") {
            natsOptions_SetReconnectBufSize(opts, Int32(clamping: options.reconnectBufferBytes))
        }
        try natsCall("natsOptions_SetRetryOnFailedConnect") {
            // A callback (even one doing nothing) makes the retry asynchronous; without one
            // nats.c would block here until it connects or runs out of attempts.
            natsOptions_SetRetryOnFailedConnect(opts, options.retryOnFailedConnect, natsConnectedInBackground, nil)
        }
        if let token = options.token {
            try natsCall("natsOptions_SetToken") { natsOptions_SetToken(opts, token) }
        }
        if let credentials = options.credentialsFile {
            try natsCall("natsOptions_SetUserCredentialsFromFiles(\(credentials))") {
                natsOptions_SetUserCredentialsFromFiles(opts, credentials, nil)
            }
        }
        var connection: OpaquePointer?
        let status = natsConnection_Connect(&connection, opts)
        // NATS_NOT_YET_CONNECTED: retrying in the background, the connection is usable.
        guard status == NATS_OK || (status == NATS_NOT_YET_CONNECTED && connection != nil), let connection else {
            let error = NATSError.status(status, "natsConnection_Connect(\(options.servers.joined(separator: ",")))")
            natsConnection_Destroy(connection)
            throw error
        }
        handle = connection
    }

    /// Whether the connection is currently connected to a server (not connecting, reconnecting
    /// or closed).
    public var isConnected: Bool { natsConnection_Status(handle) == NATS_CONN_STATUS_CONNECTED }

    /// Whether ``close()`` was called (or the connection gave up reconnecting).
    public var isClosed: Bool { natsConnection_IsClosed(handle) }

    /// Sends everything buffered and waits for the server's answer (blocking, at most `timeout`).
    public func flush(timeout: Duration) throws(NATSError) {
        try natsCall("natsConnection_FlushTimeout") { natsConnection_FlushTimeout(handle, timeout.milliseconds) }
    }

    /// Closes the connection: flushes what it can, stops reconnecting, releases the sockets.
    /// Idempotent. Pending JetStream publishes are not acknowledged after this.
    public func close() {
        natsConnection_Close(handle)
    }

    deinit {
        natsConnection_Destroy(handle)
    }
}

/// nats.c's `natsConnectionHandler` for a connection established by a background retry.
private func natsConnectedInBackground(_ connection: OpaquePointer?, _ closure: UnsafeMutableRawPointer?) {}

/// The nats.c library as a whole.
public enum NATSLibrary {
    /// Tears the library down (`nats_CloseAndWait`): its internal threads end and its memory is
    /// released. Call it at most once per process, after every ``NATSConnection`` and
    /// ``JetStreamContext`` has been released; after it, no NATS object may be created (nats.c
    /// would reopen the library implicitly, which is not safe while it is closing). Long-running
    /// processes (ferryd) need not call it: exiting releases everything.
    public static func close(timeout: Duration = .seconds(5)) throws(NATSError) {
        try natsCall("nats_CloseAndWait") { nats_CloseAndWait(timeout.milliseconds) }
    }
}

extension Duration {
    /// Whole milliseconds (rounded down, at least 1 for a positive duration), as nats.c wants.
    var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        let value = seconds * 1000 + attoseconds / 1_000_000_000_000_000
        return value == 0 && self > .zero ? 1 : value
    }
}
