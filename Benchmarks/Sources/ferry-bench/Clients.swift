#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Ferry
import FerryProtocol
import Foundation
import GRDB
import Histogram
import Logging
import ZeroMQ

/// The outbox capacity of the benchmark's library clients; they keep below it.
let benchOutboxCapacity = 50_000

/// A `FerryClient` for a client process of the benchmark: `--runtime` (required) and `--source`
/// from `flags`, an outbox of ``benchOutboxCapacity``, only errors logged, every other setting
/// the library's default — the send delay too, unless `--send-delay-ms` sets one (the cells of
/// the CPU/latency frontier). Results report the delay used (`configuration.sendDelay`).
func makeBenchClient(_ flags: Flags) throws -> FerryClient {
    var logger = Logger(label: "ferry-bench")
    logger.logLevel = .error
    var configuration = FerryClientConfiguration(source: flags.string("source", default: "bench"),
                                                 runtimeDirectory: try flags.string("runtime"), outboxCapacity: benchOutboxCapacity)
    if let delay = Double(flags.string("send-delay-ms", default: "")) {
        configuration.sendDelay = .microseconds(Int64(delay * 1000))
    }
    return try FerryClient(configuration: configuration, logger: logger)
}

/// `client`: one app process using the Ferry library. Enqueues events of `--size` bytes of
/// properties for `--seconds`, keeping the outbox below its capacity, and reports how many were
/// acked (durable) within that time.
func runFerryClient(_ flags: Flags) async throws {
    let duration = flags.double("seconds", default: 2)
    let size = flags.int("size", default: 256)
    let capacity = benchOutboxCapacity
    let client = try makeBenchClient(flags)
    let event = Event(name: "bench", propertiesJSON: propertiesJSON(size: size))
    ChildProtocol.ready()
    let start = nowNanoseconds()
    let end = start + UInt64(duration * 1e9)
    var sent = 0
    while nowNanoseconds() < end {
        if client.statistics.pending > capacity - 1024 {
            sleepMicroseconds(100)
            continue
        }
        for _ in 0..<256 { client.enqueue(event) }
        sent += 256
    }
    let statistics = client.statistics
    let elapsed = seconds(since: start)
    ChildProtocol.finish(["accepted": statistics.accepted, "rejected": statistics.rejected,
                          "dropped": statistics.droppedFromOutbox, "enqueued": sent, "seconds": elapsed,
                          "send_delay_ms": milliseconds(client.configuration.sendDelay)])
    await client.shutdown()
}

/// `zmq-push`: the raw ZeroMQ ceiling's client: PUSHes one event-sized frame per message for
/// `--seconds`, then an `END` message.
func runZMQPush(_ flags: Flags) throws {
    let endpoint = try flags.string("endpoint")
    let duration = flags.double("seconds", default: 2)
    let frame = benchFrame(id: EventID(high: 1, low: 2), sequence: 1, bodySize: flags.int("size", default: 256))
    let context = try ZMQContext()
    let socket = try ZMQSocket(context: context, type: .push)
    try socket.setOption(.linger, -1)  // the END must arrive
    try socket.connect(endpoint)
    ChildProtocol.ready()
    let start = nowNanoseconds()
    let end = start + UInt64(duration * 1e9)
    var sent = 0
    let message = [frame]
    while nowNanoseconds() < end {
        for _ in 0..<64 { _ = try socket.send(message) }
        sent += 64
    }
    _ = try socket.send([Array("END".utf8)])
    ChildProtocol.finish(["sent": sent, "seconds": seconds(since: start)])
    socket.close()
    context.terminate()
}

/// `zmq-pull`: the raw ZeroMQ ceiling's server: counts messages until `--clients` ENDs.
func runZMQPull(_ flags: Flags) throws {
    let endpoint = try flags.string("endpoint")
    let clients = try flags.int("clients")
    let context = try ZMQContext()
    let socket = try ZMQSocket(context: context, type: .pull)
    try socket.bind(endpoint)
    ChildProtocol.ready()
    var received = 0, ends = 0, bytes = 0
    var quietSince = nowNanoseconds()
    while ends < clients {
        // A lost END must not hang the run: stop after 2 s of silence once the clients finished.
        let ready = try ZMQPoller.poll([.socket(socket, .readable)], timeout: .milliseconds(100))
        guard ready[0].contains(.readable) else {
            if (ends > 0 || received > 0) && nowNanoseconds() - quietSince > 2_000_000_000 { break }
            continue
        }
        quietSince = nowNanoseconds()
        while let message = try socket.receive(dontWait: true) {
        if message.count == 1 && message[0].count == 3 && message[0] == Array("END".utf8) {
            ends += 1
        } else {
            received += 1
            bytes += message[0].count
        }
        }
    }
    ChildProtocol.finish(["received": received, "bytes": bytes])
    socket.close()
    context.terminate()
}

/// `sqlite-server`: the SQLite baseline. Speaks Ferry's ingest protocol on the same endpoint, so
/// the same Ferry clients feed it; one GRDB transaction (WAL, synchronous=FULL) per received
/// message, acked after the commit.
func runSQLiteServer(_ flags: Flags) throws {
    let runtime = try flags.string("runtime")
    let path = try flags.string("db")
    var configuration = Configuration()
    configuration.prepareDatabase { db in
        try db.execute(sql: "PRAGMA journal_mode = WAL")
        try db.execute(sql: "PRAGMA synchronous = FULL")
    }
    let database = try DatabaseQueue(path: path, configuration: configuration)
    try database.write { db in
        try db.execute(sql: "CREATE TABLE IF NOT EXISTS queue (seq INTEGER PRIMARY KEY, event_id BLOB NOT NULL, body BLOB NOT NULL)")
    }
    try makeDirectory(runtime)
    let context = try ZMQContext()
    let socket = try ZMQSocket(context: context, type: .router)
    try socket.setReceiveHighWaterMark(10_000)
    try socket.setSendHighWaterMark(100_000)
    try socket.bind(FerryPaths.ingestEndpoint(runtime))
    ChildProtocol.ready()
    var stored = 0
    while true {
        let ready = try ZMQPoller.poll([.socket(socket, .readable)], timeout: .milliseconds(200))
        if ready[0].contains(.readable) {
            while let message = try socket.receive(dontWait: true) {
                guard message.count >= 3, let header = try? MessageHeader(decoding: message[1]) else { continue }
                let frames = message[2...]
                try database.write { db in
                    let statement = try db.cachedStatement(sql: "INSERT INTO queue (event_id, body) VALUES (?, ?)")
                    for frame in frames {
                        try statement.execute(arguments: [Data(frame.prefix(16)), Data(frame)])
                    }
                }
                stored += frames.count
                let entries = frames.map { AckEntry(id: EventID(bytes: $0), status: .accepted) }
                _ = try socket.send([message[0], MessageHeader(kind: .ack, requestID: header.requestID).encoded(),
                                     AckCodec.encode(entries)], dontWait: true)
            }
        }
        // The driver closes stdin's pipe by sending SIGTERM; nothing else to check.
    }
}

/// `latency`: offers `--rate` events/s (one DEALER, Ferry's wire protocol, events due in the same
/// instant share a message) for `--seconds` and records each event's ack latency from the time it
/// was *due* (so a stalled sender does not hide latency: coordinated omission corrected).
/// `--one-per-message`: the raw one-event-per-message client (each event its own message, however
/// late the sender is); `ack_rate` is then what ferryd sustained (acks over the time to the last).
func runLatencyClient(_ flags: Flags) throws {
    let onePerMessage = flags.has("one-per-message")
    let runtime = try flags.string("runtime")
    let rate = flags.double("rate", default: 1000)
    let duration = flags.double("seconds", default: 3)
    let properties = propertiesJSON(size: flags.int("size", default: 256))
    let context = try ZMQContext()
    let socket = try ZMQSocket(context: context, type: .dealer)
    try socket.setOption(.receiveHighWaterMark, 0)
    try socket.setOption(.sendHighWaterMark, 0)
    try socket.connect(FerryPaths.ingestEndpoint(runtime))
    let ids = EventIDGenerator()
    var histogram = Histogram<UInt64>(highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: .three)
    var outstanding: [UInt32: (first: Int, count: Int)] = [:]
    var requestID: UInt32 = 1
    var acked = 0, rejected = 0
    var lastAck: UInt64 = 0
    let interval = 1e9 / rate

    func drain(start: UInt64) throws {
        while let reply = try socket.receive(dontWait: true) {
            guard reply.count == 2, let header = try? MessageHeader(decoding: reply[0]),
                  let batch = outstanding.removeValue(forKey: header.requestID) else { continue }
            let now = nowNanoseconds()
            lastAck = now
            let entries = (try? AckCodec.decode(reply[1])) ?? []
            for (offset, entry) in entries.enumerated() {
                if entry.status != .accepted { rejected += 1 }
                let due = start + UInt64(Double(batch.first + offset) * interval)
                histogram.record(now > due ? (now - due) / 1000 : 0)
                acked += 1
            }
        }
    }

    tightenTimerSlack()
    ChildProtocol.ready()
    let start = nowNanoseconds()
    let total = Int(rate * duration)
    var sent = 0
    while sent < total {
        try drain(start: start)
        let due = min(total, Int(Double(nowNanoseconds() - start) / interval) + 1)
        if due > sent {
            let count = onePerMessage ? 1 : min(due - sent, 4096)
            var message = [MessageHeader(kind: .events, requestID: requestID).encoded()]
            for i in 0..<count {
                message.append(WireEvent(id: ids.next(), timestamp: WallClock.unixMilliseconds(), sequence: UInt64(sent + i),
                                         pid: 1, type: .track, source: "bench", name: "bench", properties: properties).encoded())
            }
            _ = try socket.send(message)
            outstanding[requestID] = (sent, count)
            requestID &+= 1
            sent += count
        } else {
            // Sleep (never spin) until the next message is due, at least one quantum: the acks
            // wait in the socket meanwhile (read right after), the due messages go out together.
            let next = start + UInt64(Double(sent) * interval)
            let now = nowNanoseconds()
            if next > now { sleep(untilNanoseconds: min(max(next, now + pacingQuantumNanoseconds), now + 1_000_000)) }
        }
    }
    let sendSeconds = seconds(since: start)
    let deadline = nowNanoseconds() + 10_000_000_000
    while !outstanding.isEmpty && nowNanoseconds() < deadline {
        _ = try ZMQPoller.poll([.socket(socket, .readable)], timeout: .milliseconds(10))
        try drain(start: start)
    }
    ChildProtocol.finish([
        "offered_rate": rate, "achieved_rate": Double(total) / sendSeconds, "acked": acked, "rejected": rejected,
        "lost": outstanding.values.reduce(0) { $0 + $1.count },
        "ack_rate": lastAck > start ? Double(acked) / (Double(lastAck - start) / 1e9) : 0,
        "p50_us": histogram.valueAtPercentile(50), "p99_us": histogram.valueAtPercentile(99),
        "p999_us": histogram.valueAtPercentile(99.9), "max_us": histogram.max,
    ])
    socket.close()
    context.terminate()
}
