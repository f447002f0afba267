#if canImport(Glibc)
import Glibc
#endif

/// The uid owning the other end of a loopback TCP connection, as the kernel lists it in
/// `/proc/net/tcp` and `/proc/net/tcp6` (the `uid` column of the socket whose local address is
/// the peer's and whose remote address is ours). Never from anything the peer sends.
package enum TCPPeer {
    /// The `/proc/net/tcp` form of an address: each 32-bit word of the address in host (little-
    /// endian) order as 8 upper-case hex digits, then `:` and the port as 4 hex digits.
    package static func procForm(ip: String, port: Int) -> String? {
        // Network-order address bytes: 4 (IPv4) or 16 (IPv6).
        var raw = [UInt8](repeating: 0, count: 16)
        var bytes: [UInt8]
        if raw.withUnsafeMutableBytes({ inet_pton(AF_INET, ip, $0.baseAddress) }) == 1 {
            bytes = Array(raw[0..<4])
        } else if raw.withUnsafeMutableBytes({ inet_pton(AF_INET6, ip, $0.baseAddress) }) == 1 {
            bytes = raw
        } else {
            return nil
        }
        var text = ""
        for word in stride(from: 0, to: bytes.count, by: 4) {
            for byte in bytes[word..<(word + 4)].reversed() { text += hex(byte) }
        }
        return text + ":" + hex(UInt8(port >> 8)) + hex(UInt8(port & 0xFF))
    }

    private static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789ABCDEF")
        return String([digits[Int(byte >> 4)], digits[Int(byte & 0xF)]])
    }

    /// The uid in a `/proc/net/tcp{,6}` text of the socket with local address `local` and remote
    /// address `remote` (both in ``procForm(ip:port:)``), nil when no line matches.
    package static func uid(inTable text: String, local: String, remote: String) -> UInt32? {
        for line in text.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            // sl local rem st tx:rx tr:when retrnsmt uid …
            guard fields.count > 7, fields[1] == local, fields[2] == remote else { continue }
            return UInt32(fields[7])
        }
        return nil
    }

    /// The uid of the process at `peerIP`:`peerPort` connected to our `localIP`:`localPort`,
    /// read from procfs now (call it off any event loop); nil when the kernel lists no such
    /// socket (the peer is remote, or already gone).
    package static func uid(peerIP: String, peerPort: Int, localIP: String, localPort: Int) -> UInt32? {
        // An IPv4 peer of an IPv6 socket is listed in tcp6 in its mapped form.
        var candidates: [(String, String)] = []
        if let peer = procForm(ip: peerIP, port: peerPort), let local = procForm(ip: localIP, port: localPort) {
            candidates.append((peer, local))
        }
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            guard let text = readFile(table) else { continue }
            for (peer, local) in candidates {
                if let uid = uid(inTable: text, local: peer, remote: local) { return uid }
            }
        }
        return nil
    }

    /// The primary gid of `uid` from the user database, nil if it has no entry.
    package static func primaryGID(of uid: UInt32) -> UInt32? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16 << 10)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.pw_gid
    }

    private static func readFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        // A busy host lists many sockets; read at most 64 MiB.
        while bytes.count < 64 << 20 {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count <= 0 { break }
            bytes += chunk[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
