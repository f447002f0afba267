#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
@testable import FerryAgent
@testable import FerryStorage
import FerryTestKit
import FerryProtocol
import Logging
import Synchronization

// Helpers shared by the FerryAgentTests suites. Nothing here sleeps for a fixed time: waiting is
// always on a condition with a deadline.

/// A fresh directory removed (with its contents) by ``remove()``.
///
/// `short: true` gives `/tmp/fa-<8 hex>`, for agents whose runtime directory holds Unix sockets
/// (an `ipc://` path is limited to about 100 bytes). Otherwise it lives under
/// `FileManager.default.temporaryDirectory` with a UUID name.
final class ScratchDirectory: Sendable {
    let path: String

    init(short: Bool = false) throws {
        let uuid = UUID().uuidString.lowercased()
        if short {
            path = "/tmp/fa-" + uuid.replacingOccurrences(of: "-", with: "").prefix(8)
        } else {
            path = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-agent-tests-" + uuid).path
        }
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func appending(_ component: String) -> String { path + "/" + component }

    func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// A logger that prints nothing (the tests assert on state, not on log lines).
let quietLogger = Logger(label: "ferry-agent-tests", factory: { _ in SwiftLogNoOpLogHandler() })

// MARK: Events

enum Events {
    static let ids = EventIDGenerator()

    /// A valid event; `padding` adds a string property of that many bytes.
    static func make(_ sequence: UInt64, name: String = "Test Event", source: String = "agent-tests", padding: Int = 0) -> WireEvent {
        var properties = Array(#"{"i":\#(sequence)"#.utf8)
        if padding > 0 {
            properties += Array(#","pad":""#.utf8) + [UInt8](repeating: UInt8(ascii: "p"), count: padding) + [UInt8(ascii: "\"")]
        }
        properties.append(UInt8(ascii: "}"))
        return WireEvent(id: ids.next(), timestamp: WallClock.unixMilliseconds(), sequence: sequence, pid: 4242,
                         type: .track, source: source, name: name, properties: properties)
    }

    /// `count` encoded events numbered from 1.
    static func frames(_ count: Int, padding: Int = 0) -> [[UInt8]] {
        (1...max(count, 1)).prefix(count).map { make(UInt64($0), padding: padding).encoded() }
    }

    static func id(of frame: [UInt8]) -> EventID { EventID(bytes: frame) }
}

// MARK: Logs

struct OpenedLog {
    var log: SegmentedLog
    var report: RecoveryReport
    /// What `seedDedup` was called with, in order.
    var seeded: [(id: EventID, at: UInt64)]
}

func openLog(
    _ directory: String, segmentMaxBytes: Int64 = 1 << 20, retentionMaxBytes: Int64 = 1 << 30,
    fullPolicy: LogConfiguration.FullPolicy = .reject, cursor: LogPosition? = nil, dedupWindow: Int = .max
) throws -> OpenedLog {
    var report = RecoveryReport()
    var seeded: [(id: EventID, at: UInt64)] = []
    let log = try SegmentedLog(
        directory: directory,
        configuration: LogConfiguration(segmentMaxBytes: segmentMaxBytes, retentionMaxBytes: retentionMaxBytes,
                                        fullPolicy: fullPolicy),
        cursor: cursor, logger: quietLogger, recovered: &report, dedupWindow: dedupWindow
    ) { id, at in seeded.append((id, at)) }
    return OpenedLog(log: log, report: report, seeded: seeded)
}

/// Appends `frames` in commit groups of `groupSize`, stamping record `i` with `acceptedAt + i`.
func append(_ frames: [[UInt8]], to writer: LogWriter, groupSize: Int = 10, acceptedAt: UInt64 = 1_000) throws {
    for (index, frame) in frames.enumerated() {
        try writer.append(frame: frame, acceptedAt: acceptedAt + UInt64(index))
        if (index + 1) % groupSize == 0 { try writer.commit() }
    }
    try writer.commit()
}

/// Writes `frames` into a fresh log in `directory` and closes the writer.
func writeLog(_ directory: String, _ frames: [[UInt8]], segmentMaxBytes: Int64 = 1 << 20, groupSize: Int = 10) throws {
    let opened = try openLog(directory, segmentMaxBytes: segmentMaxBytes)
    let writer = try LogWriter(log: opened.log)
    try append(frames, to: writer, groupSize: groupSize)
}

/// Every event from `position` on, read in batches like the delivery loop does.
func readAll(_ log: SegmentedLog, from position: LogPosition? = nil, maxEvents: Int = 1000, maxBytes: Int = 1 << 20) throws -> [StoredEvent] {
    var position = position ?? LogPosition(segment: 0, offset: 0)
    var events: [StoredEvent] = []
    for _ in 0..<100_000 {
        let batch = try log.read(from: position, maxEvents: maxEvents, maxBytes: maxBytes)
        if batch.events.isEmpty { return events }
        events += batch.events
        position = batch.next
    }
    throw TestFailure("read did not reach the end of the log")
}

/// The segment files in `directory`, sorted by name (= index).
func segmentFiles(_ directory: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
        .filter { $0.hasSuffix(".seg") }.sorted().map { directory + "/" + $0 }
}

func fileSize(_ path: String) -> Int64 {
    ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.int64Value ?? -1
}

func readBytes(_ path: String) throws -> [UInt8] {
    guard let data = FileManager.default.contents(atPath: path) else { throw TestFailure("cannot read \(path)") }
    return Array(data)
}

func writeBytes(_ bytes: [UInt8], to path: String) throws {
    try Data(bytes).write(to: URL(fileURLWithPath: path))
}

func appendBytes(_ bytes: [UInt8], to path: String) throws {
    let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
    defer { try? handle.close() }
    try handle.seekToEnd()
    try handle.write(contentsOf: Data(bytes))
}

/// XORs the byte at `offset` of `path` with `mask`.
func flipByte(in path: String, at offset: Int64, mask: UInt8 = 0xFF) throws {
    var bytes = try readBytes(path)
    bytes[Int(offset)] ^= mask
    try writeBytes(bytes, to: path)
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

// MARK: File descriptors (for simulating write failures)

/// The open file descriptors of this process that refer to `path`.
func openDescriptors(of path: String) -> [CInt] {
    let target = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
    let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return names.compactMap { name -> CInt? in
        guard let fd = CInt(name),
              let link = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + name),
              link == target else { return nil }
        return fd
    }
}

/// Makes `fd` refer to `/dev/full`, so every write through it fails with ENOSPC (the descriptor
/// number stays valid; ``restoreWrites(fd:path:)`` points it back at a file).
func breakWrites(fd: CInt) throws {
    let full = open("/dev/full", O_WRONLY)
    guard full >= 0 else { throw TestFailure("cannot open /dev/full") }
    defer { close(full) }
    guard dup2(full, fd) == fd else { throw TestFailure("dup2 failed: \(errno)") }
}

/// Points `fd` back at `path`, write-only.
func restoreWrites(fd: CInt, path: String) throws {
    let fresh = open(path, O_WRONLY)
    guard fresh >= 0 else { throw TestFailure("cannot open \(path)") }
    defer { close(fresh) }
    guard dup2(fresh, fd) == fd else { throw TestFailure("dup2 failed: \(errno)") }
}

// MARK: Waiting (thin names over FerryTestKit's deadline-bounded helpers)

/// Runs blocking `body` on a thread of its own (never on the concurrency pool).
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await runOffPool(body)
}

/// Polls `condition` until it holds or `timeout` passes (then throws).
func waitUntil(_ what: String, timeout: Duration = .seconds(20), _ condition: () throws -> Bool) async throws {
    try await eventually(what, timeout: timeout) { try condition() }
}

/// Awaits `task`'s value, or throws if it takes longer than `timeout`.
func value<T: Sendable>(of task: Task<T, any Error>, timeout: Duration, _ what: String) async throws -> T {
    try await withTimeout(timeout, what) { try await task.value }
}

/// A lock-protected value that can be shared by reference (a `Mutex` cannot be copied).
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<R>(_ body: (inout sending Value) throws -> sending R) rethrows -> R {
        try mutex.withLock(body)
    }
    var value: Value { mutex.withLock { $0 } }
}

/// The ids of encoded event frames (compared instead of whole frames, for short failure output).
func idsOf(_ frames: [[UInt8]]) -> [EventID] { frames.map(Events.id(of:)) }
