#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryAgent
import FerryFileSink
import FerryStorage
import FerryProtocol
import Foundation
import ZeroMQ

/// Appends `value` to `bytes` in little-endian order (FerryProtocol's helper is `package`, not
/// visible from this package).
private func appendLE<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
    withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
}

/// Writes a log of `events` events straight into `directory` (segment files exactly as ferryd
/// writes them), far faster than ingesting them: the recovery, memory and delivery experiments
/// need millions of queued events.
func generateLog(directory: String, events: Int, bodySize: Int, segmentMaxBytes: Int = 16 << 20) throws {
    try makeDirectory(directory)
    let ids = EventIDGenerator()
    var template = benchFrame(id: .zero, sequence: 0, bodySize: bodySize)
    let acceptedAt = WallClock.unixMilliseconds()
    var index: UInt64 = 1
    var written = 0
    var buffer: [UInt8] = []
    buffer.reserveCapacity(segmentMaxBytes + 4096)
    func startSegment() {
        buffer.removeAll(keepingCapacity: true)
        buffer += Array("FERRYSG1".utf8)
        appendLE(index, to: &buffer)
    }
    func flush() throws {
        let path = directory + "/" + SegmentFile.fileName(for: index)
        guard FileManager.default.createFile(atPath: path, contents: Data(buffer)) else { throw BenchError("cannot write \(path)") }
        index += 1
    }
    startSegment()
    let recordSize = LogRecord.framedSize(frameSize: template.count)
    while written < events {
        if buffer.count + recordSize > segmentMaxBytes {
            try flush()
            startSegment()
        }
        ids.next().bytes.withUnsafeBufferPointer { id in
            template.withUnsafeMutableBufferPointer { frame in
                for i in 0..<16 { frame[i] = id[i] }
            }
        }
        LogRecord.appendEvent(template, acceptedAt: acceptedAt, to: &buffer)
        written += 1
    }
    try flush()
    // Make it durable and drop it from nothing: the experiments measure ferryd, not our writes.
    sync()
}

/// Blocks delivery for the memory and recovery experiments, using only what ferryd has today: a
/// stored cursor whose file-sink checkpoint names a file made immutable (`chattr +i`, which stops
/// root too), so every delivery attempt fails and is retried with backoff. Returns false if the
/// filesystem cannot do it (then delivery runs and the figures say so).
func blockDelivery(dataDirectory: String, sinkDirectory: String) throws -> Bool {
    try makeDirectory(sinkDirectory)
    try makeDirectory(dataDirectory + "/cursors")
    let file = sinkDirectory + "/" + FileSink.fileName(1)
    FileManager.default.createFile(atPath: file, contents: nil)
    var checkpoint: [UInt8] = []
    appendLE(UInt64(1), to: &checkpoint)
    appendLE(Int64(0), to: &checkpoint)
    try CursorStore(dataDirectory: dataDirectory, sink: "file")
        .save(LogPosition(segment: 1, offset: SegmentFile.headerSize), checkpoint: checkpoint)
    return shell("chattr", ["+i", file]) == 0
}

/// Undoes ``blockDelivery`` so the directory can be removed.
func unblockDelivery(sinkDirectory: String) {
    _ = shell("chattr", ["-i", sinkDirectory + "/" + FileSink.fileName(1)])
}

@discardableResult
func shell(_ command: String, _ arguments: [String]) -> Int32 {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = [command] + arguments
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    guard (try? process.run()) != nil else { return -1 }
    process.waitUntilExit()
    return process.terminationStatus
}

/// A ferryd launched by the driver.
final class Agent {
    let child: Child
    let runtime: String
    let spawnedAt: UInt64

    /// Starts ferryd. With `probe`, a DEALER already connected (before the launch) sends one event
    /// and ``firstAckMilliseconds`` is the time from launch to its ack.
    init(ferryd: String, data: String, runtime: String, sink: String, config: String, log: String) throws {
        self.runtime = runtime
        spawnedAt = nowNanoseconds()
        child = try Child(ferryd, ["--data-dir", data, "--runtime-dir", runtime, "--sink-dir", sink, "--config", config,
                                   "--log-level", "warning"], stderrPath: log)
    }

    /// Launches ferryd and measures the time until a probe event is acked.
    static func launchMeasuringFirstAck(ferryd: String, data: String, runtime: String, sink: String, config: String,
                                        log: String) throws -> (Agent, milliseconds: Double) {
        try makeDirectory(runtime)
        let context = try ZMQContext()
        defer { context.terminate() }
        let socket = try ZMQSocket(context: context, type: .dealer)
        defer { socket.close() }
        try socket.setOption(.linger, 0)
        try socket.setOption(.reconnectInterval, 1)
        try socket.setOption(.reconnectIntervalMax, 1)
        try socket.connect(FerryPaths.ingestEndpoint(runtime))
        let frame = benchFrame(id: EventIDGenerator().next(), sequence: 0, bodySize: 64)
        _ = try socket.send([MessageHeader(kind: .events, requestID: 7).encoded(), frame])
        let agent = try Agent(ferryd: ferryd, data: data, runtime: runtime, sink: sink, config: config, log: log)
        let deadline = nowNanoseconds() + 120_000_000_000
        while nowNanoseconds() < deadline {
            let ready = try ZMQPoller.poll([.socket(socket, .readable)], timeout: .milliseconds(5))
            if ready[0].contains(.readable), let reply = try socket.receive(dontWait: true), reply.count == 2 {
                let elapsed = Double(nowNanoseconds() - agent.spawnedAt) / 1e6
                return (agent, elapsed)
            }
            if !agent.child.process.isRunning { throw BenchError("ferryd exited early; see \(log)") }
        }
        throw BenchError("no ack from ferryd within 120 s; see \(log)")
    }

    func stop() {
        child.signal(SIGTERM)
        child.wait()
    }

    func kill9() {
        child.signal(SIGKILL)
        child.wait()
    }
}

/// One request on ferryd's control socket.
func controlRequest(runtime: String, _ json: String) -> [String: Any]? {
    guard let context = try? ZMQContext() else { return nil }
    defer { context.terminate() }
    guard let socket = try? ZMQSocket(context: context, type: .req) else { return nil }
    defer { socket.close() }
    try? socket.setOption(.linger, 0)
    guard (try? socket.connect(FerryPaths.controlEndpoint(runtime))) != nil,
          (try? socket.send([Array(json.utf8)])) == true,
          let ready = try? ZMQPoller.poll([.socket(socket, .readable)], timeout: .seconds(5)),
          ready[0].contains(.readable), let reply = try? socket.receive(dontWait: true), let body = reply.first else { return nil }
    return (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
}

/// The disk ceiling: appends of one record each followed by fdatasync (unless `perAppend` is
/// false), and sequential appends with one fdatasync per MiB. Returns events/s for records of `recordSize` bytes.
func diskCeiling(directory: String, recordSize: Int, seconds duration: Double, perAppend measurePerAppend: Bool = true) throws -> (syncPerAppend: Double, syncPerMiB: Double, mibPerSecond: Double) {
    try makeDirectory(directory)
    let path = directory + "/disk-ceiling.bin"
    defer { unlink(path) }
    let record = [UInt8](repeating: 0xAB, count: recordSize)
    func run(syncEvery bytes: Int) -> Double {
        unlink(path)
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        defer { close(fd) }
        let start = nowNanoseconds()
        let end = start + UInt64(duration * 1e9)
        var count = 0, unsynced = 0
        while nowNanoseconds() < end {
            _ = record.withUnsafeBytes { write(fd, $0.baseAddress, recordSize) }
            count += 1
            unsynced += recordSize
            if unsynced >= bytes {
                fdatasync(fd)
                unsynced = 0
            }
        }
        fdatasync(fd)
        return Double(count) / seconds(since: start)
    }
    let perAppend = measurePerAppend ? run(syncEvery: 1) : .nan
    let perMiB = run(syncEvery: 1 << 20)
    return (perAppend, perMiB, perMiB * Double(recordSize) / Double(1 << 20))
}
