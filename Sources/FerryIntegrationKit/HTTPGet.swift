#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryTestKit
import Foundation

/// A plain HTTP/1.1 response as a test reads it.
public struct HTTPResponse: Sendable, CustomStringConvertible {
    /// The status code.
    public var status: Int
    /// Header fields, names lowercased.
    public var headers: [String: String]
    /// The body (read to the end of the connection).
    public var body: String

    public var description: String { "HTTP \(status) \(headers) \(body.prefix(300))" }
}

/// Sends one request (`Connection: close`) to 127.0.0.1:`port` and reads the response to EOF,
/// off the concurrency pool. For the agent's metrics endpoint; no TLS, no chunked bodies.
public func httpRequest(port: Int, method: String = "GET", path: String, timeout: Duration = .seconds(5)) async throws -> HTTPResponse {
    try await runOffPool {
        let fd = try connectLoopback(port: port)
        defer { close(fd) }
        let request = Array("\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n".utf8)
        return try exchange(fd, request, timeout: timeout)
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released), for a
/// server a test configures by port.
public func freeLocalPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw FerryTestKitError("socket: \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0 else { throw FerryTestKitError("bind: \(String(cString: strerror(errno)))") }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// Sends one `POST` of a JSON `body` (`Connection: close`) to the agent's HTTP API — its Unix
/// socket at `unixSocket`, or 127.0.0.1:`port` — and reads the response to EOF, off the
/// concurrency pool. No TLS, no chunked bodies.
public func httpPost(
    unixSocket: String? = nil, port: Int? = nil, path: String, json body: String, headers: [String: String] = [:],
    timeout: Duration = .seconds(10)
) async throws -> HTTPResponse {
    try await runOffPool {
        let fd = try unixSocket.map(connectUnix(path:)) ?? connectLoopback(port: port ?? 0)
        defer { close(fd) }
        let payload = Array(body.utf8)
        var head = "POST \(path) HTTP/1.1\r\nHost: \(port.map { "127.0.0.1:\($0)" } ?? "localhost")\r\nConnection: close\r\n"
        head += "Content-Type: application/json\r\nContent-Length: \(payload.count)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        return try exchange(fd, Array((head + "\r\n").utf8) + payload, timeout: timeout)
    }
}

/// A TCP connection to 127.0.0.1:`port`.
private func connectLoopback(port: Int) throws -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw FerryTestKitError("socket: \(String(cString: strerror(errno)))") }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    return try connectSocket(fd, to: address, peer: "127.0.0.1:\(port)")
}

/// A connection to the Unix stream socket at `path`.
private func connectUnix(path: String) throws -> Int32 {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw FerryTestKitError("socket: \(String(cString: strerror(errno)))") }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
        close(fd)
        throw FerryTestKitError("socket path too long")
    }
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        raw.copyBytes(from: bytes)
        raw[bytes.count] = 0
    }
    return try connectSocket(fd, to: address, peer: path)
}

/// Connects the socket `fd` to `address` (a `sockaddr_in` or `sockaddr_un`) and returns it; on
/// failure closes it and throws, naming `peer`.
private func connectSocket<Address>(_ fd: Int32, to address: Address, peer: String) throws -> Int32 {
    var address = address
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<Address>.size)) }
    }
    guard connected == 0 else {
        let message = String(cString: strerror(errno))
        close(fd)
        throw FerryTestKitError("connect to \(peer): \(message)")
    }
    return fd
}

/// Writes `request` on the connected `fd`, reads the response to EOF (each read waits at most
/// `timeout`) and parses its status line, header fields and body.
private func exchange(_ fd: Int32, _ request: [UInt8], timeout: Duration) throws -> HTTPResponse {
    var seconds = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &seconds, socklen_t(MemoryLayout<timeval>.size))
    guard write(fd, request, request.count) == request.count else { throw FerryTestKitError("write: \(String(cString: strerror(errno)))") }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = read(fd, &chunk, chunk.count)
        if n < 0 { throw FerryTestKitError("read: \(String(cString: strerror(errno)))") }
        if n == 0 { break }
        bytes += chunk[0..<n]
    }
    let text = String(decoding: bytes, as: UTF8.self)
    guard let split = text.range(of: "\r\n\r\n") else { throw FerryTestKitError("no HTTP header end in \(text.prefix(200))") }
    let lines = text[..<split.lowerBound].components(separatedBy: "\r\n")
    let statusLine = lines.first?.split(separator: " ") ?? []
    guard statusLine.count >= 2, let status = Int(statusLine[1]) else { throw FerryTestKitError("bad status line \(lines.first ?? "")") }
    var fields: [String: String] = [:]
    for line in lines.dropFirst() {
        guard let colon = line.firstIndex(of: ":") else { continue }
        fields[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
    }
    return HTTPResponse(status: status, headers: fields, body: String(text[split.upperBound...]))
}
