/// Who is at the other end of a local connection, as the kernel reports it: `SO_PEERCRED` of a
/// Unix-domain connection (the ZeroMQ IPC sockets, the HTTP API's Unix socket), or the uid the
/// kernel's socket table gives a loopback TCP connection (the HTTP API's TCP listener, whose
/// peer's pid is not known: ``pid`` 0).
///
/// Its own module so that every module that learns or checks a peer (ZeroMQ, the agent core,
/// the HTTP API) shares the one type without depending on each other.
public struct PeerCredentials: Sendable, Hashable {
    /// The peer's process id; 0 when the kernel does not say (a TCP peer): no process has pid 0.
    public var pid: Int32
    /// The peer's effective user id.
    public var uid: UInt32
    /// The peer's effective group id.
    public var gid: UInt32

    /// Creates credentials (`pid` 0: not known).
    public init(pid: Int32, uid: UInt32, gid: UInt32) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }

    /// The pid when it is known (nil for a TCP peer).
    public var knownPID: Int32? { pid > 0 ? pid : nil }
}
