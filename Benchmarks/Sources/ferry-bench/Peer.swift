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
