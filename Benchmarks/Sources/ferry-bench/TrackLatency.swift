#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Ferry
import Foundation
import Logging
import Synchronization

/// Latencies in log-spaced buckets (2% wide, 1 µs to hours), mergeable across processes: each
/// client sends its buckets to the driver, which adds them up before taking percentiles.
struct LogHistogram {
    static let base = log(1.02)
    var buckets: [Int: Int] = [:]
    var count = 0

    mutating func record(microseconds: Double) {
        let bucket = microseconds <= 1 ? 0 : Int((log(microseconds) / Self.base).rounded(.down)) + 1
        buckets[bucket, default: 0] += 1
        count += 1
    }

    mutating func merge(_ other: LogHistogram) {
        for (bucket, n) in other.buckets { buckets[bucket, default: 0] += n }
        count += other.count
    }

    /// The upper bound of the bucket holding the `percentile`th value, in µs.
    func value(atPercentile percentile: Double) -> Double {
        guard count > 0 else { return .nan }
        let rank = max(1, Int((percentile / 100 * Double(count)).rounded(.up)))
        var seen = 0
        for bucket in buckets.keys.sorted() {
            seen += buckets[bucket]!
            if seen >= rank { return bucket == 0 ? 1 : exp(Double(bucket) * Self.base) }
        }
        return .nan
    }

    /// `[[bucket, count], …]` for the JSON result line.
    var encoded: [[Int]] { buckets.map { [$0.key, $0.value] } }

    init() {}
    init(encoded: Any?) {
        for pair in encoded as? [[Int]] ?? [] where pair.count == 2 {
            buckets[pair[0], default: 0] += pair[1]
            count += pair[1]
        }
    }
}

/// A histogram the receipt callbacks (on the client's thread) record into.
final class HistogramBox: Sendable {
    let state = Mutex(LogHistogram())
}

/// `track-latency`: one app process using the real `FerryClient` library the way apps do. Each
/// event is built as `track()` builds it (`Event(type: .track, name:, properties:)`, a dictionary
/// of properties encoded by the library) and queued with `enqueue(_:onReceipt:)` — `track()` plus
/// a receipt callback — at Poisson arrivals of `--rate` events/s; the latency is from the moment
/// the event was *due* (so a late sender does not hide latency) to its `accepted` receipt.
/// `--rate 0`: as fast as the outbox allows (the maximum these clients reach), no latencies.
/// `--await-send`: each event is sent with `send()` and awaited before the next (an app that waits
/// for every receipt); the latency runs from the call to the receipt. Reports its CPU and context
/// switches (all threads, ``threadContextSwitches(pid:)``) from the release to the last ack, and
/// its client's send delay.
func runTrackLatencyClient(_ flags: Flags) async throws {
    let rate = flags.double("rate", default: 1000)
    let duration = flags.double("seconds", default: 2)
    let size = flags.int("size", default: 256)
    let capacity = benchOutboxCapacity
    // `--null`: the same loop, the same properties built, and no Ferry: what the app's own pacing
    // costs, the baseline the CPU-per-event rows subtract to show Ferry's share.
    if flags.has("null") { return try runNullApp(rate: rate, duration: duration, size: size) }
    let client = try makeBenchClient(flags)
    // Properties of about `size` bytes once encoded: a number, a short string and a pad.
    let pad = String(repeating: "x", count: max(1, size - 40))
    let histogram = HistogramBox()
    tightenTimerSlack()
    ChildProtocol.ready()
    // This process's CPU from here until its last event is acked (the CPU-per-event rows).
    let cpu0 = ownCPUSeconds(), threads0 = threadCPUSeconds(pid: getpid()), switches0 = threadContextSwitches(pid: getpid())
    let start = nowNanoseconds()
    let end = start + UInt64(duration * 1e9)
    var sent = 0
    let awaitSend = flags.has("await-send")
    if rate <= 0 {
        while nowNanoseconds() < end {
            if client.statistics.pending > capacity - 1024 {
                sleepMicroseconds(100)
                continue
            }
            for _ in 0..<256 {
                client.track("bench", properties: ["total": 42.5, "sku": "A-1", "pad": .string(pad)])
            }
            sent += 256
        }
    } else {
        var generator = SystemRandomNumberGenerator()
        var due = Double(start)
        while true {
            due += -log(Double.random(in: Double.ulpOfOne..<1, using: &generator)) / rate * 1e9
            guard due < Double(end) else { break }
            let dueAt = UInt64(due)
            // Sleep until due (at least one quantum: everything due by then goes out together);
            // never spin, never send early. Lateness is charged: latency runs from `dueAt`.
            let now = nowNanoseconds()
            if dueAt > now { sleep(untilNanoseconds: max(dueAt, now + pacingQuantumNanoseconds)) }
            let event = Event(type: .track, name: "bench", properties: ["total": 42.5, "sku": "A-1", "pad": .string(pad)])
            if awaitSend {
                let called = nowNanoseconds()
                let receipt = await client.send(event)
                let done = nowNanoseconds()
                if receipt.status == .accepted { histogram.state.withLock { $0.record(microseconds: Double(done - called) / 1000) } }
                sent += 1
                continue
            }
            _ = client.enqueue(event) { receipt in
                guard receipt.status == .accepted else { return }
                let done = nowNanoseconds()
                let latency = done > dueAt ? Double(done - dueAt) / 1000 : 0
                histogram.state.withLock { $0.record(microseconds: latency) }
            }
            sent += 1
        }
        // Give the last events time to be acked.
        let deadline = nowNanoseconds() + 10_000_000_000
        while client.statistics.pending > 0 && nowNanoseconds() < deadline { sleepMicroseconds(1000) }
    }
    let cpu = ownCPUSeconds() - cpu0, threads = threadDelta(threads0, threadCPUSeconds(pid: getpid()))
    let switches = switchesByName(switches0, threadContextSwitches(pid: getpid()))
    let statistics = client.statistics
    let elapsed = Double(end - start) / 1e9
    let merged = histogram.state.withLock { $0 }
    ChildProtocol.finish(["cpu_seconds": cpu, "threads_cpu_seconds": threads, "context_switches": switches.values.reduce(0, +),
                          "threads_context_switches": switches, "send_delay_ms": milliseconds(client.configuration.sendDelay),
                          "await_send": awaitSend, "accepted": statistics.accepted, "rejected": statistics.rejected, "sent": sent,
                          "offered_rate": rate, "seconds": elapsed, "rate": Double(statistics.accepted) / elapsed,
                          "latencies": merged.count, "histogram": merged.encoded])
    await client.shutdown()
}

/// `track-latency --null`: the Poisson loop of ``runTrackLatencyClient(_:)`` building the same
/// properties, handed to no library (not even encoded into an `Event`). Reports `sent` as `accepted` and the process's CPU and context switches.
private func runNullApp(rate: Double, duration: Double, size: Int) throws {
    let pad = String(repeating: "x", count: max(1, size - 40))
    tightenTimerSlack()
    ChildProtocol.ready()
    let cpu0 = ownCPUSeconds(), threads0 = threadCPUSeconds(pid: getpid()), switches0 = threadContextSwitches(pid: getpid())
    let start = nowNanoseconds()
    let end = start + UInt64(duration * 1e9)
    var generator = SystemRandomNumberGenerator()
    var due = Double(start)
    var sent = 0, kept = 0
    while true {
        due += -log(Double.random(in: Double.ulpOfOne..<1, using: &generator)) / max(rate, 1) * 1e9
        guard due < Double(end) else { break }
        let dueAt = UInt64(due)
        let now = nowNanoseconds()
        if dueAt > now { sleep(untilNanoseconds: max(dueAt, now + pacingQuantumNanoseconds)) }
        // What the app itself builds: its properties (encoding them is the library's work).
        let properties: [String: FerryValue] = ["total": 42.5, "sku": "A-1", "pad": .string(pad)]
        kept &+= properties.count  // kept observable so the dictionary is really built
        sent += 1
    }
    let cpu = ownCPUSeconds() - cpu0, threads = threadDelta(threads0, threadCPUSeconds(pid: getpid()))
    let switches = switchesByName(switches0, threadContextSwitches(pid: getpid()))
    let elapsed = Double(end - start) / 1e9
    ChildProtocol.finish(["cpu_seconds": cpu, "threads_cpu_seconds": threads, "context_switches": switches.values.reduce(0, +),
                          "threads_context_switches": switches, "accepted": sent, "rejected": 0, "sent": sent,
                          "offered_rate": rate, "seconds": elapsed, "rate": Double(sent) / elapsed, "kept": kept,
                          "latencies": 0, "histogram": [[Int]]()])
}
