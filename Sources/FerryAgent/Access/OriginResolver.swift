#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryPeer
import FerryStorage
import Synchronization

/// Builds each connection's ``EventOrigin`` from the kernel's credentials of the connection and
/// `/proc/<pid>`, once per connection, and keeps it for the connection's later messages.
///
/// The credentials (uid, gid, pid) are libzmq's reading of `SO_PEERCRED` when the connection was
/// made. `comm`, `exe` and the systemd unit are read from procfs (memory, no disk) at the
/// connection's first message, and only if `/proc/<pid>` still belongs to a process of that uid:
/// if the sender has exited, or its pid now names a process of another user, they are `nil`.
/// (A pid reused by another process of the same user within that window cannot be told apart
/// without a pidfd of the connection, which libzmq does not give.)
package final class OriginResolver: Sendable {
    /// Connections remembered; beyond this the cache starts over (a reconnect costs one read).
    static let capacity = 4096

    private let cache = Mutex<[[UInt8]: CachedOrigin]>([:])

    private struct CachedOrigin: Sendable {
        var credentials: PeerCredentials
        var encoded: [UInt8]
    }

    /// A resolver with nothing remembered.
    package init() {}

    /// The encoded record metadata for messages of connection `routingID` sent with `peer`
    /// (empty without credentials).
    package func metadata(connection routingID: [UInt8], peer: PeerCredentials?) -> [UInt8] {
        guard let peer else { return [] }
        if let cached = cache.withLock({ $0[routingID] }), cached.credentials == peer { return cached.encoded }
        let encoded = Self.origin(of: peer).metadata.encoded
        cache.withLock { cache in
            if cache.count >= Self.capacity { cache.removeAll(keepingCapacity: true) }
            cache[routingID] = CachedOrigin(credentials: peer, encoded: encoded)
        }
        return encoded
    }

    /// The origin of a sender with `peer` credentials, read from procfs now.
    static func origin(of peer: PeerCredentials) -> EventOrigin {
        var origin = EventOrigin(uid: peer.uid, gid: peer.gid, pid: UInt32(bitPattern: peer.pid))
        let base = "/proc/\(peer.pid)"
        // The pid must still be a process of the sender's user, or nothing of it is ours to say.
        guard let status = readSmallFile(base + "/status"), effectiveUID(inStatus: status) == peer.uid else { return origin }
        if var comm = readSmallFile(base + "/comm") {
            while comm.hasSuffix("\n") { comm.removeLast() }
            origin.comm = comm.isEmpty ? nil : comm
        }
        origin.exe = readLink(base + "/exe")
        origin.unit = readSmallFile(base + "/cgroup").flatMap(systemdUnit(inCgroup:))
        // Read again: had the process exited meanwhile, what was read may be another's.
        guard let again = readSmallFile(base + "/status"), effectiveUID(inStatus: again) == peer.uid else {
            return EventOrigin(uid: peer.uid, gid: peer.gid, pid: UInt32(bitPattern: peer.pid))
        }
        return origin
    }

    /// The effective uid in a `/proc/<pid>/status` text (`Uid:` real, effective, saved, fs).
    static func effectiveUID(inStatus text: String) -> UInt32? {
        for line in text.split(separator: "\n") where line.hasPrefix("Uid:") {
            let fields = line.dropFirst(4).split(whereSeparator: { $0 == " " || $0 == "\t" })
            return fields.count >= 2 ? UInt32(fields[1]) : nil
        }
        return nil
    }

    /// The systemd unit a `/proc/<pid>/cgroup` text places the process in: the last `.service`
    /// or `.scope` component of its systemd path — the unified hierarchy (`0::/…`, cgroup v2)
    /// or the `name=systemd` one (cgroup v1). `user@1000.service/app.slice/foo.service` gives
    /// `foo.service`.
    static func systemdUnit(inCgroup text: String) -> String? {
        var path: Substring?
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3 else { continue }
            if parts[1] == "name=systemd" {
                path = parts[2]
                break
            }
            if parts[0] == "0" && parts[1].isEmpty { path = parts[2] }
        }
        guard let path else { return nil }
        return path.split(separator: "/").last { $0.hasSuffix(".service") || $0.hasSuffix(".scope") }.map(String.init)
    }

    private static func readSmallFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while bytes.count < 64 << 10 {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count <= 0 { break }
            bytes += chunk[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func readLink(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(path, &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
