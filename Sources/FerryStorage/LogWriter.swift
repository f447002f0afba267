#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol

/// Appends to the log's active segment. Owned by the commit thread alone (not `Sendable`).
///
/// Appends are buffered in memory; ``commit()`` writes the group, `fdatasync`s it once and only
/// then makes it visible to readers. A failed commit rolls the files back to where the group
/// started, so a rejected group leaves no partial records behind.
package final class LogWriter {
    private let log: SegmentedLog
    private var active: Open
    /// Segments touched by the current group other than `active`, with their pre-group sizes.
    private var rotatedOut: [(open: Open, startSize: Int64)] = []
    private var groupStart: (index: UInt64, size: Int64)
    private var createdInGroup: [UInt64] = []
    private var buffer: [UInt8] = []
    private var bufferRecords = 0
    /// Total bytes of all segment files including the uncommitted group.
    package private(set) var totalBytes: Int64
    /// How long the last successful ``commit()`` spent in `fdatasync` (and the directory sync of
    /// new segments), in nanoseconds.
    package private(set) var lastSyncNanoseconds: UInt64 = 0

    private struct Open {
        var index: UInt64
        var path: String
        var fd: CInt
        /// Bytes in the file (written, maybe not yet synced).
        var written: Int64
        var records: Int
    }

    package init(log: SegmentedLog) throws {
        self.log = log
        let last = log.lastSegment
        if let last {
            let fd = try FileIO.open(last.path, O_WRONLY)
            active = Open(index: last.index, path: last.path, fd: fd, written: last.size, records: last.records)
        } else {
            active = Open(index: 0, path: "", fd: -1, written: 0, records: 0)
            active = try Self.create(log: log)
            if PlantedBug.active != .noDirFsyncOnSegmentCreate { try FileIO.syncDirectory(log.directory) }
            log.publish([(active.index, active.written, active.records)])
        }
        groupStart = (active.index, active.written)
        totalBytes = log.committedBytes
    }

    deinit {
        close(active.fd)
    }

    private static func create(log: SegmentedLog) throws -> Open {
        let directory = log.directory
        let (index, path) = log.addSegment { directory + "/" + SegmentedLog.fileName(for: $0) }
        let fd: CInt
        do {
            fd = try FileIO.open(path, O_WRONLY | O_CREAT | O_EXCL)
        } catch {
            log.removeSegment(index)
            throw error
        }
        let header = SegmentedLog.segmentHeader(index: index)
        do {
            try header.withUnsafeBytes { raw in try FileIO.pwriteAll(fd, raw, at: 0, path: path) }
        } catch {
            close(fd)
            _ = try? FileIO.unlink(path)
            log.removeSegment(index)
            throw error
        }
        return Open(index: index, path: path, fd: fd, written: SegmentedLog.segmentHeaderSize, records: 0)
    }

    /// Bytes appended in the current group.
    package var pendingBytes: Int {
        let activeStart = active.index == groupStart.index ? groupStart.size : SegmentedLog.segmentHeaderSize
        return buffer.count + Int(active.written - activeStart) + rotatedOut.reduce(0) { $0 + Int($1.open.written - $1.startSize) }
    }

    /// Buffers one event record (with what the agent recorded about it), rotating to a new
    /// segment first if it would overflow this one.
    package func append(frame: [UInt8], acceptedAt: UInt64, metadata: RecordMetadata = .init()) throws {
        try append(frame: frame, acceptedAt: acceptedAt, encodedMetadata: metadata.encoded)
    }

    /// ``append(frame:acceptedAt:metadata:)`` with the metadata already encoded.
    package func append(frame: [UInt8], acceptedAt: UInt64, encodedMetadata meta: [UInt8]) throws {
        let size = Int64(LogRecord.framedSize(frameSize: frame.count, metadataSize: meta.count))
        let fill = active.written + Int64(buffer.count)
        if fill + size > log.configuration.segmentMaxBytes && fill > SegmentedLog.segmentHeaderSize {
            try rotate()
        }
        LogRecord.appendEvent(frame, acceptedAt: acceptedAt, encodedMetadata: meta, to: &buffer)
        bufferRecords += 1
        totalBytes += size
        // Written in pieces, synced once at commit: the buffer stays small whatever the group.
        if buffer.count >= Self.flushBytes { try flushBuffer() }
    }

    /// The buffer is written to the file (not synced, not visible) once it holds this much.
    static let flushBytes = 1 << 20

    private func flushBuffer() throws {
        guard !buffer.isEmpty else { return }
        let fd = active.fd, path = active.path, at = active.written
        try buffer.withUnsafeBytes { raw in try FileIO.pwriteAll(fd, raw, at: at, path: path) }
        active.written += Int64(buffer.count)
        active.records += bufferRecords
        buffer.removeAll(keepingCapacity: true)
        bufferRecords = 0
    }

    private func rotate() throws {
        try flushBuffer()
        let startSize = active.index == groupStart.index ? groupStart.size : SegmentedLog.segmentHeaderSize
        rotatedOut.append((active, startSize))
        active = try Self.create(log: log)
        createdInGroup.append(active.index)
        totalBytes += SegmentedLog.segmentHeaderSize
    }

    /// Writes the group, syncs it and publishes it to readers. On failure the group is rolled back
    /// and the error thrown; the log stays usable.
    package func commit() throws {
        do {
            try flushBuffer()
            let syncStart = MonotonicClock.nanoseconds()
            for (open, _) in rotatedOut { try FileIO.fdatasync(open.fd, path: open.path) }
            try FileIO.fdatasync(active.fd, path: active.path)
            if !createdInGroup.isEmpty && PlantedBug.active != .noDirFsyncOnSegmentCreate {
                try FileIO.syncDirectory(log.directory)
            }
            lastSyncNanoseconds = MonotonicClock.nanoseconds() &- syncStart
        } catch {
            rollback()
            throw error
        }
        let touched = rotatedOut.map(\.open) + [active]
        log.publish(touched.map { ($0.index, $0.written, $0.records) })
        for (open, _) in rotatedOut { close(open.fd) }
        rotatedOut.removeAll()
        createdInGroup.removeAll()
        groupStart = (active.index, active.written)
    }

    /// Drops the group appended since the last commit without writing it (files are rolled back
    /// to where it started if part of it was flushed).
    package func discardGroup() {
        rollback()
    }

    private func rollback() {
        buffer.removeAll(keepingCapacity: true)
        bufferRecords = 0
        // Undo newly created segments, then cut the group's first segment back to its start.
        var segments = rotatedOut.map(\.open) + [active]
        for open in segments where createdInGroup.contains(open.index) {
            close(open.fd)
            _ = try? FileIO.unlink(open.path)
            log.removeSegment(open.index)
        }
        segments.removeAll { createdInGroup.contains($0.index) }
        if var first = segments.first {
            _ = try? FileIO.ftruncate(first.fd, groupStart.size, path: first.path)
            let committedRecords = log.segment(first.index)?.records ?? 0
            first.written = groupStart.size
            first.records = committedRecords
            active = first
        }
        rotatedOut.removeAll()
        createdInGroup.removeAll()
        totalBytes = log.committedBytes
    }

    /// Deletes a segment that is not the active one, fsyncing the directory.
    package func delete(segment: SegmentInfo) throws {
        precondition(segment.index != active.index, "the active segment is never deleted")
        try FileIO.unlink(segment.path)
        log.removeSegment(segment.index)
        totalBytes -= segment.size
    }

    /// Drops the oldest segment that is not active, for the drop-oldest policy. Returns how many
    /// undelivered events it held, or `nil` if only the active segment is left.
    package func dropOldestSegment() throws -> Int? {
        guard let oldest = log.oldestSegment(otherThan: active.index) else { return nil }
        let lost = log.undeliveredRecords(of: oldest)
        try FileIO.unlink(oldest.path)
        try FileIO.syncDirectory(log.directory)
        log.dropSegment(oldest.index, lost: lost)
        totalBytes -= oldest.size
        return lost
    }

    /// The segment appends go to; it is never deleted.
    package var activeIndex: UInt64 { active.index }

    /// The end of the committed log: where the current group started (a segment the group rotated
    /// to is not part of it, unlike ``SegmentedLog/endPosition`` in the middle of a group).
    package var committedEnd: LogPosition { LogPosition(segment: groupStart.index, offset: groupStart.size) }

    /// The oldest segment other than the active one (the one the drop-oldest policy deletes next).
    package var oldestSealedSegment: SegmentInfo? {
        log.oldestSegment(otherThan: active.index)
    }

    /// Deletes every segment other than the active one whose index is not in `keep`, then fsyncs
    /// the directory. Returns how many were deleted.
    @discardableResult
    package func deleteSegments(keeping keep: Set<UInt64>) throws -> Int {
        let dead = log.segments(otherThan: active.index) { !keep.contains($0.index) }
        for segment in dead { try delete(segment: segment) }
        if !dead.isEmpty { try FileIO.syncDirectory(log.directory) }
        return dead.count
    }
}
