#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
@testable import FerryStorage
import FerryTestKit
import FerryProtocol
import Foundation
import Testing

/// Commit failures are simulated by pointing the writer's descriptor at `/dev/full` with
/// `dup2`, so every write through it fails with ENOSPC while the descriptor number stays valid.
@Suite("Log writer: group commit rollback", .enabled(if: FileManager.default.fileExists(atPath: "/dev/full")
    && FileManager.default.fileExists(atPath: "/proc/self/fd")))
struct LogWriterTests {
    @Test("a failed commit keeps nothing of the group; the writer stays usable")
    func rollbackWithoutRotation() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let opened = try openLog(directory)
        let writer = try LogWriter(log: opened.log)
        let committed = Events.frames(5)
        try append(committed, to: writer)
        let path = directory + "/" + SegmentedLog.fileName(for: 1)
        let sizeAfterGood = fileSize(path)
        let bytesAfterGood = writer.totalBytes

        let fds = openDescriptors(of: path)
        try #require(fds.count == 1, "expected exactly the writer's descriptor on \(path), found \(fds)")
        try breakWrites(fd: fds[0])
        for frame in Events.frames(4) { try writer.append(frame: frame, acceptedAt: 7) }
        #expect(writer.totalBytes > bytesAfterGood)
        #expect(throws: StorageError.self) { try writer.commit() }
        try restoreWrites(fd: fds[0], path: path)

        #expect(writer.totalBytes == bytesAfterGood)
        #expect(fileSize(path) == sizeAfterGood)
        #expect(opened.log.status().undeliveredEvents == committed.count)
        #expect(try readAll(opened.log).map(\.decodedID) == idsOf(committed))

        let later = Events.frames(3)
        try append(later, to: writer)
        #expect(try readAll(opened.log).map(\.decodedID) == idsOf(committed + later))
        #expect(writer.totalBytes == fileSize(path))
        let reopened = try openLog(directory)
        #expect(reopened.report.isClean)
        #expect(try readAll(reopened.log).map(\.decodedID) == idsOf(committed + later))
    }

    @Test("a failed commit that had rotated deletes the new segment and cuts the old one back")
    func rollbackAcrossRotation() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let opened = try openLog(directory, segmentMaxBytes: 4096)
        let writer = try LogWriter(log: opened.log)
        let committed = Events.frames(5, padding: 100)
        try append(committed, to: writer)
        let first = directory + "/" + SegmentedLog.fileName(for: 1)
        let sizeAfterGood = fileSize(first)
        let bytesAfterGood = writer.totalBytes

        // Append until the writer rotates: the group's first part is then written to segment 1.
        var group = 0
        while writer.activeIndex == 1 {
            try writer.append(frame: Events.make(UInt64(100 + group), padding: 100).encoded(), acceptedAt: 9)
            group += 1
            try #require(group < 100)
        }
        #expect(fileSize(first) > sizeAfterGood, "rotation flushed the group's start into segment 1")
        let second = directory + "/" + SegmentedLog.fileName(for: writer.activeIndex)
        let fds = openDescriptors(of: second)
        try #require(fds.count == 1, "expected the writer's descriptor on \(second), found \(fds)")
        try breakWrites(fd: fds[0])
        #expect(throws: StorageError.self) { try writer.commit() }

        #expect(!FileManager.default.fileExists(atPath: second), "the segment created by the failed group is deleted")
        #expect(fileSize(first) == sizeAfterGood, "segment 1 is cut back to where the group started")
        #expect(writer.activeIndex == 1)
        #expect(writer.totalBytes == bytesAfterGood)
        #expect(opened.log.status().segments == 1)
        #expect(opened.log.status().bytes == bytesAfterGood)
        #expect(try readAll(opened.log).map(\.decodedID) == idsOf(committed))

        // The writer goes on: new groups append after the committed records and rotate again.
        let later = Events.frames(40, padding: 100)
        try append(later, to: writer)
        #expect(try readAll(opened.log).map(\.decodedID) == idsOf(committed + later))
        #expect(writer.totalBytes == segmentFiles(directory).map(fileSize).reduce(0, +))
        let reopened = try openLog(directory, segmentMaxBytes: 4096)
        #expect(reopened.report.isClean)
        #expect(reopened.report.records == committed.count + later.count)
        #expect(try readAll(reopened.log).map(\.decodedID) == idsOf(committed + later))
    }

    @Test("a failed write reports no_space for ENOSPC")
    func noSpaceCode() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let opened = try openLog(directory)
        let writer = try LogWriter(log: opened.log)
        let path = directory + "/" + SegmentedLog.fileName(for: 1)
        let fds = openDescriptors(of: path)
        try #require(fds.count == 1)
        try breakWrites(fd: fds[0])
        try writer.append(frame: Events.make(1).encoded(), acceptedAt: 1)
        let error = #expect(throws: StorageError.self) { try writer.commit() }
        #expect(error?.code == .noSpace)
        #expect(error?.errno == ENOSPC)
        try restoreWrites(fd: fds[0], path: path)
        #expect(fileSize(path) == SegmentedLog.segmentHeaderSize)
    }
}
