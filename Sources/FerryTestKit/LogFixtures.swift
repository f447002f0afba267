#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol
import FerryStorage
import Foundation
import Logging

// Fixtures for tests of the durable log (FerryStorageTests) and of the agent around it
// (FerryAgentTests). Nothing here sleeps for a fixed time.

/// A fresh directory removed (with its contents) by ``remove()``.
///
/// `short: true` gives `/tmp/fa-<8 hex>`, for agents whose runtime directory holds Unix sockets
/// (an `ipc://` path is limited to about 100 bytes). Otherwise it lives under
/// `FileManager.default.temporaryDirectory` with a UUID name.
package final class ScratchDirectory: Sendable {
    package let path: String

    package init(short: Bool = false) throws {
        let uuid = UUID().uuidString.lowercased()
        if short {
            path = "/tmp/fa-" + uuid.replacingOccurrences(of: "-", with: "").prefix(8)
        } else {
            path = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-agent-tests-" + uuid).path
        }
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    package func appending(_ component: String) -> String { path + "/" + component }

    package func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// A logger that prints nothing (the tests assert on state, not on log lines).
package let quietLogger = Logger(label: "ferry-agent-tests", factory: { _ in SwiftLogNoOpLogHandler() })

// MARK: Events

package enum Events {
    package static let ids = EventIDGenerator()

    /// A valid event; `padding` adds a string property of that many bytes.
    package static func make(_ sequence: UInt64, name: String = "Test Event", source: String = "agent-tests", padding: Int = 0) -> WireEvent {
        var properties = Array(#"{"i":\#(sequence)"#.utf8)
        if padding > 0 {
            properties += Array(#","pad":""#.utf8) + [UInt8](repeating: UInt8(ascii: "p"), count: padding) + [UInt8(ascii: "\"")]
        }
        properties.append(UInt8(ascii: "}"))
        return WireEvent(id: ids.next(), timestamp: WallClock.unixMilliseconds(), sequence: sequence, pid: 4242,
                         type: .track, source: source, name: name, properties: properties)
    }

    /// `count` encoded events numbered from 1.
    package static func frames(_ count: Int, padding: Int = 0) -> [[UInt8]] {
        (1...max(count, 1)).prefix(count).map { make(UInt64($0), padding: padding).encoded() }
    }

    package static func id(of frame: [UInt8]) -> EventID { EventID(bytes: frame) }
}

// MARK: Logs

package struct OpenedLog {
    package var log: SegmentedLog
    package var report: RecoveryReport
    /// What `seedDedup` was called with, in order.
    package var seeded: [(id: EventID, at: UInt64)]
}

package func openLog(
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
package func append(_ frames: [[UInt8]], to writer: LogWriter, groupSize: Int = 10, acceptedAt: UInt64 = 1_000) throws {
    for (index, frame) in frames.enumerated() {
        try writer.append(frame: frame, acceptedAt: acceptedAt + UInt64(index))
        if (index + 1) % groupSize == 0 { try writer.commit() }
    }
    try writer.commit()
}

/// Writes `frames` into a fresh log in `directory` and closes the writer.
package func writeLog(_ directory: String, _ frames: [[UInt8]], segmentMaxBytes: Int64 = 1 << 20, groupSize: Int = 10) throws {
    let opened = try openLog(directory, segmentMaxBytes: segmentMaxBytes)
    let writer = try LogWriter(log: opened.log)
    try append(frames, to: writer, groupSize: groupSize)
}

/// Every event from `position` on, read in batches like the delivery loop does.
package func readAll(_ log: SegmentedLog, from position: LogPosition? = nil, maxEvents: Int = 1000, maxBytes: Int = 1 << 20) throws -> [StoredEvent] {
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
package func segmentFiles(_ directory: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
        .filter { $0.hasSuffix(".seg") }.sorted().map { directory + "/" + $0 }
}

package func fileSize(_ path: String) -> Int64 {
    ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.int64Value ?? -1
}

package func readBytes(_ path: String) throws -> [UInt8] {
    guard let data = FileManager.default.contents(atPath: path) else { throw TestFailure("cannot read \(path)") }
    return Array(data)
}

/// Writes `bytes` to `path` (created with `mode`, or emptied first), with no fsync. Tests write
/// their fixtures (configuration, plans, keys, logs) with it rather than with Foundation's
/// `Data.write(to:)`, which fsyncs: called from a test body, that holds a thread of Swift's
/// cooperative pool for as long as the file system's journal takes behind other processes'
/// syncs, and on 2 cores the pool has 2 threads (docs/FAULTS.md, §9). A fixture needs no
/// durability.
package func writeBytes(_ bytes: [UInt8], to path: String, mode: mode_t = 0o644) throws {
    let fd = try FileIO.open(path, O_WRONLY | O_CREAT | O_TRUNC, mode: mode, followSymlinks: true)
    defer { close(fd) }
    try bytes.withUnsafeBytes { try FileIO.pwriteAll(fd, $0, at: 0, path: path) }
}

/// ``writeBytes(_:to:)`` of `text`'s UTF-8.
package func writeText(_ text: String, to path: String) throws {
    try writeBytes(Array(text.utf8), to: path)
}

package func appendBytes(_ bytes: [UInt8], to path: String) throws {
    let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
    defer { try? handle.close() }
    try handle.seekToEnd()
    try handle.write(contentsOf: Data(bytes))
}

/// XORs the byte at `offset` of `path` with `mask`.
package func flipByte(in path: String, at offset: Int64, mask: UInt8 = 0xFF) throws {
    var bytes = try readBytes(path)
    bytes[Int(offset)] ^= mask
    try writeBytes(bytes, to: path)
}

package struct TestFailure: Error, CustomStringConvertible {
    package var description: String
    package init(_ description: String) { self.description = description }
}

// MARK: File descriptors (for simulating write failures)

/// The open file descriptors of this process that refer to `path`.
package func openDescriptors(of path: String) -> [CInt] {
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
package func breakWrites(fd: CInt) throws {
    let full = open("/dev/full", O_WRONLY)
    guard full >= 0 else { throw TestFailure("cannot open /dev/full") }
    defer { close(full) }
    guard dup2(full, fd) == fd else { throw TestFailure("dup2 failed: \(errno)") }
}

/// Points `fd` back at `path`, write-only.
package func restoreWrites(fd: CInt, path: String) throws {
    let fresh = open(path, O_WRONLY)
    guard fresh >= 0 else { throw TestFailure("cannot open \(path)") }
    defer { close(fresh) }
    guard dup2(fresh, fd) == fd else { throw TestFailure("dup2 failed: \(errno)") }
}

/// The ids of encoded event frames.
package func idsOf(_ frames: [[UInt8]]) -> [EventID] { frames.map(Events.id(of:)) }

/// `events` as the log hands them to a sink: records of segment 1, 1000 bytes apart, accepted at
/// `acceptedAt` (for sink tests that need no log on disk).
public func storedEvents(_ events: [WireEvent], acceptedAt: UInt64 = 1_700_000_000_000) -> [StoredEvent] {
    events.enumerated().map { index, event in
        let frame = event.encoded()
        return StoredEvent(position: LogPosition(segment: 1, offset: 16 + Int64(index) * 1000),
                           size: LogRecord.framedSize(frameSize: frame.count), acceptedAt: acceptedAt, frame: frame)
    }
}
