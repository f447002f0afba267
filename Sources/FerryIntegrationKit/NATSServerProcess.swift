#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryTestKit
import Foundation
import NATS
import Synchronization

/// Real `nats-server -js` processes for tests: one node, or a cluster of several on loopback,
/// each with its own free ports, configuration file and JetStream store (`-sd`) in a test
/// directory.
///
/// ```swift
/// let dir = try TemporaryDirectory()
/// defer { dir.remove() }
/// let nats = try NATSServerProcess(in: dir, nodes: 3)
/// defer { nats.cleanup() }
/// try await nats.waitUntilReady()
/// nats.kill9(node: 1)            // a crash
/// try nats.start(node: 1)        // same ports, same store
/// ```
///
/// Each node runs `nats-server -c <node>.conf -js -sd <node>-store`: the file holds the ports,
/// names and cluster routes, the flags turn JetStream on with its store.
///
/// Readiness is the server's own `/healthz` (which includes JetStream) on its monitoring port,
/// polled against a deadline. Every process is killed with `SIGKILL` by ``cleanup()`` and, as a
/// safety net, when the object is released.
public final class NATSServerProcess: Sendable {
    /// One server of the set.
    public struct Node: Sendable {
        /// The node's name (`n1`, `n2`, …), also its `server_name`.
        public let name: String
        /// Client port (`nats://127.0.0.1:<port>`).
        public let clientPort: Int
        /// Route port (clusters only).
        public let clusterPort: Int
        /// HTTP monitoring port (`/healthz`, `/jsz`).
        public let monitorPort: Int
        /// The configuration file written for it.
        public let configPath: String
        /// Its JetStream store directory (`-sd`).
        public let storeDirectory: String
        /// Its client URL.
        public var url: String { "nats://127.0.0.1:\(clientPort)" }
    }

    /// The nodes, in order.
    public let nodes: [Node]
    /// Where the servers' output files go.
    public let logDirectory: String
    private let processes: Mutex<[ChildProcess?]>
    private let runs = Mutex<[ChildProcess]>([])

    /// The `nats-server` executable (`$NATS_SERVER`, or the first on `PATH`, or `/usr/sbin`).
    public static func executable() throws -> String {
        let environment = ProcessInfo.processInfo.environment
        if let explicit = environment["NATS_SERVER"], !explicit.isEmpty { return explicit }
        let path = (environment["PATH"] ?? "") + ":/usr/sbin:/usr/bin:/usr/local/bin:/usr/local/sbin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/nats-server"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw FerryTestKitError("nats-server not found (install it with scripts/install-deps, or set NATS_SERVER)")
    }

    /// Whether `nats-server` can be found.
    public static var isAvailable: Bool { (try? executable()) != nil }

    /// Writes the configuration of `nodes` servers (a cluster when more than one) under
    /// `<directory>/nats` and starts them all unless `start` is false. Call
    /// ``waitUntilReady(timeout:)`` before use.
    public init(in directory: TemporaryDirectory, nodes count: Int = 1, start: Bool = true) throws {
        precondition(count >= 1, "at least one node")
        let base = try directory.subdirectory("nats")
        logDirectory = try directory.subdirectory("nats/logs")
        let ports = try freeLoopbackPorts(count * 3)
        var nodes: [Node] = []
        for index in 0..<count {
            let name = "n\(index + 1)"
            nodes.append(Node(name: name, clientPort: ports[index * 3], clusterPort: ports[index * 3 + 1],
                              monitorPort: ports[index * 3 + 2], configPath: "\(base)/\(name).conf",
                              storeDirectory: "\(base)/\(name)-store"))
        }
        for node in nodes {
            var config = """
                server_name: \(node.name)
                listen: 127.0.0.1:\(node.clientPort)
                http: 127.0.0.1:\(node.monitorPort)
                jetstream {
                  max_memory_store: 64MB
                  max_file_store: 1GB
                }

                """
            if count > 1 {
                let routes = nodes.filter { $0.name != node.name }.map { "nats-route://127.0.0.1:\($0.clusterPort)" }
                config += """
                    cluster {
                      name: ferry-test
                      listen: 127.0.0.1:\(node.clusterPort)
                      routes: [\(routes.joined(separator: ", "))]
                    }

                    """
            }
            try writeText(config, to: node.configPath)
        }
        self.nodes = nodes
        processes = Mutex(Array(repeating: nil, count: count))
        if start {
            for index in 0..<count { try self.start(node: index) }
        }
    }

    /// All client URLs (give them all to a client so it can fail over).
    public var urls: [String] { nodes.map(\.url) }

    /// Starts node `index` (again): same ports, configuration and store. Throws if it runs.
    public func start(node index: Int) throws {
        let node = nodes[index]
        try processes.withLock { processes in
            if let running = processes[index], running.isRunning {
                throw FerryTestKitError("nats-server \(node.name) (pid \(running.pid)) is already running")
            }
            let process = try ChildProcess(
                executable: try Self.executable(),
                arguments: ["-c", node.configPath, "-js", "-sd", node.storeDirectory],
                outputDirectory: logDirectory, label: node.name)
            processes[index] = process
            runs.withLock { $0.append(process) }
        }
    }

    /// Whether node `index` runs.
    public func isRunning(node index: Int) -> Bool {
        processes.withLock { $0[index] }?.isRunning ?? false
    }

    /// `SIGKILL`s node `index` (a crash) and reaps it.
    @discardableResult
    public func kill9(node index: Int) -> ExitStatus {
        processes.withLock { $0[index] }?.kill9() ?? .unknown
    }

    /// Waits until every running node answers `/healthz` with `ok` (JetStream included).
    public func waitUntilReady(timeout: Duration = .seconds(20)) async throws {
        let deadline = ContinuousClock.now + timeout
        for index in nodes.indices where isRunning(node: index) {
            try await waitUntilReady(node: index, timeout: max(.zero, deadline - ContinuousClock.now))
        }
    }

    /// Waits until node `index` answers `/healthz` with `ok`; throws (with its log) if it exits
    /// first or `timeout` passes.
    public func waitUntilReady(node index: Int, timeout: Duration = .seconds(20)) async throws {
        let node = nodes[index]
        guard let process = processes.withLock({ $0[index] }) else {
            throw FerryTestKitError("nats-server \(node.name) was never started")
        }
        let deadline = ContinuousClock.now + timeout
        var last = ""
        while true {
            if let exit = process.exitStatus {
                throw FerryTestKitError("nats-server \(node.name) exited (\(exit))\n\(process.standardError.suffix(3000))")
            }
            let port = node.monitorPort
            last = (try? await runOffPool { try httpGet(port: port, path: "/healthz") }) ?? last
            if last.hasPrefix("HTTP/1.1 200"), last.contains("\"ok\"") { return }
            if ContinuousClock.now >= deadline {
                throw FerryTestKitError("nats-server \(node.name) not healthy after \(timeout); last answer: \(last.suffix(300))\n\(process.standardError.suffix(3000))")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Every message now in `stream`, read with a fresh connection (to any running node) and an
    /// ephemeral pull consumer. A read that fails (a cluster still electing a leader after a node
    /// was lost cannot create the consumer yet) is retried until `timeout`.
    public func streamMessages(_ stream: String, timeout: Duration = .seconds(30)) async throws -> [ReceivedMessage] {
        let urls = nodes.indices.filter { isRunning(node: $0) }.map { nodes[$0].url }
        return try await waitForValue("the messages of stream \(stream)", timeout: timeout, pollInterval: .milliseconds(200)) {
            try await runOffPool {
                let connection = try NATSConnection(options: .init(servers: urls, name: "testkit-reader", retryOnFailedConnect: false))
                defer { connection.close() }
                let js = try JetStreamContext(connection: connection)
                return try js.fetchAll(stream: stream, timeout: .seconds(10))
            }
        }
    }

    /// The stream's state (`nil` if it does not exist), read with a fresh connection.
    public func streamInfo(_ stream: String) async throws -> StreamInfo? {
        let urls = nodes.indices.filter { isRunning(node: $0) }.map { nodes[$0].url }
        return try await runOffPool {
            let connection = try NATSConnection(options: .init(servers: urls, name: "testkit-reader", retryOnFailedConnect: false))
            defer { connection.close() }
            return try JetStreamContext(connection: connection).streamInfo(stream)
        }
    }

    /// The names of the clients connected to node `index` (its `/connz`).
    public func clientNames(node index: Int) async throws -> [String] {
        let port = nodes[index].monitorPort
        let answer = try await runOffPool { try httpGet(port: port, path: "/connz") }
        guard let body = answer.range(of: "\r\n\r\n").map({ answer[$0.upperBound...] }),
              let object = try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any] else {
            throw FerryTestKitError("unreadable /connz answer: \(answer.prefix(300))")
        }
        return (object["connections"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String }
    }

    /// The standard error of every run so far (nats-server logs there).
    public var logs: String {
        runs.withLock { $0 }.map { "=== nats-server pid \($0.pid) ===\n" + $0.standardError }.joined(separator: "\n")
    }

    /// Kills every node still running. Idempotent; the files stay for the test's directory to remove.
    public func cleanup() {
        for run in runs.withLock({ $0 }) { run.kill9() }
    }

    deinit { cleanup() }
}

/// `count` distinct TCP ports that were free on 127.0.0.1 a moment ago (bound to port 0 and
/// released; the sockets stay open until all are chosen, so the ports are distinct).
public func freeLoopbackPorts(_ count: Int) throws -> [Int] {
    var sockets: [CInt] = []
    defer { sockets.forEach { close($0) } }
    var ports: [Int] = []
    for _ in 0..<count {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw FerryTestKitError("socket: \(String(cString: strerror(errno)))") }
        sockets.append(fd)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else { throw FerryTestKitError("bind: \(String(cString: strerror(errno)))") }
        ports.append(Int(UInt16(bigEndian: address.sin_port)))
    }
    return ports
}

/// A blocking HTTP/1.1 GET on 127.0.0.1 (one second send/receive timeouts); returns the raw answer.
func httpGet(port: Int, path: String) throws -> String {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw FerryTestKitError("socket: \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var timeout = timeval(tv_sec: 1, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = UInt16(port).bigEndian
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
    }
    guard connected else { throw FerryTestKitError("connect to port \(port): \(String(cString: strerror(errno)))") }
    let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8)
    guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == request.count else {
        throw FerryTestKitError("send to port \(port) failed")
    }
    var answer: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = recv(fd, &buffer, buffer.count, 0)
        if n <= 0 { break }
        answer += buffer[0..<n]
    }
    return String(decoding: answer, as: UTF8.self)
}
