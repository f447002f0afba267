@testable import FerryStorage
import FerryTestKit
import FerryProtocol
import Testing

@Suite("Segmented log: start-up independent of the backlog")
struct DeferredVerificationTests {
    /// 60 events in 4 KiB segments, record 5 (in segment 1) damaged.
    func damagedLog(_ scratch: ScratchDirectory) throws -> (directory: String, frames: [[UInt8]], before: [StoredEvent]) {
        let directory = scratch.appending("segments")
        let frames = Events.frames(60, padding: 100)
        try writeLog(directory, frames, segmentMaxBytes: 4096)
        let before = try readAll(try openLog(directory, segmentMaxBytes: 4096).log)
        try #require(segmentFiles(directory).count >= 3 && before[5].position.segment == 1 && before[6].position.segment == 1)
        try flipByte(in: directory + "/" + SegmentedLog.fileName(for: 1), at: before[5].position.offset + 20)
        return (directory, frames, before)
    }

    @Test("only the newest segments are scanned at open; the rest are readable at once and verified later with the same report")
    func deferredVerification() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let (directory, frames, before) = try damagedLog(scratch)
        var expected = frames
        expected.remove(at: 5)
        let lastSegment = before.last!.position.segment
        let inLast = before.filter { $0.position.segment == lastSegment }

        let opened = try openLog(directory, segmentMaxBytes: 4096, dedupWindow: 1)
        #expect(opened.report.segments == segmentFiles(directory).count)
        #expect(opened.report.records == inLast.count)
        #expect(opened.report.isClean, "the damage lies in a segment not scanned yet")
        #expect(opened.seeded.map(\.id) == [inLast.last!.decodedID], "the window is seeded with the newest records only")
        #expect(opened.log.unverifiedSegments == segmentFiles(directory).count - 1)
        // Reading does not wait for verification, and loses only the damaged record.
        #expect(try readAll(opened.log).map(\.decodedID) == idsOf(expected))

        // Deliveries before verification are not counted twice.
        let first = try opened.log.read(from: opened.log.cursor, maxEvents: 10, maxBytes: 1 << 20)
        opened.log.markDelivered(first.events, next: first.next)
        let found = opened.log.verifySealedSegments()
        #expect(found.records == expected.count - inLast.count)
        #expect(found.corruptRegions == 1)
        #expect(found.corruptBytes == Int64(before[5].size))
        #expect(opened.log.unverifiedSegments == 0)
        #expect(opened.log.status().undeliveredEvents == expected.count - 10)

        // A full scan reports the same as deferred scan plus verification.
        let full = try openLog(directory, segmentMaxBytes: 4096)
        var merged = opened.report
        merged.merge(found)
        #expect(merged == full.report)
    }

    @Test("verification counts delivered records from the recovered cursor")
    func deferredVerificationWithCursor() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let (directory, frames, before) = try damagedLog(scratch)
        let cursor = before[30].position
        let opened = try openLog(directory, segmentMaxBytes: 4096, cursor: cursor, dedupWindow: 1)
        _ = opened.log.verifySealedSegments()
        // 60 events, one lost; 30 valid records lie before the cursor, one of them the damaged one.
        #expect(opened.log.status().undeliveredEvents == frames.count - 30)
        #expect(try readAll(opened.log, from: opened.log.cursor).map(\.decodedID) == idsOf(Array(frames.dropFirst(30))))
    }

    @Test("the drop-oldest policy counts the events of a segment not yet verified")
    func dropUnverified() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let (directory, _, before) = try damagedLog(scratch)
        let opened = try openLog(directory, segmentMaxBytes: 4096, dedupWindow: 1)
        let writer = try LogWriter(log: opened.log)
        let lost = try writer.dropOldestSegment()
        #expect(lost == before.filter { $0.position.segment == 1 }.count - 1)
    }

    @Test("with a dedup snapshot covering the log only the last segment is scanned, and only records after the snapshot seed the window",
          arguments: [false, true])
    func dedupSnapshotCoverage(middle: Bool) throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let frames = Events.frames(60, padding: 100)
        try writeLog(directory, frames, segmentMaxBytes: 4096)
        let all = try readAll(try openLog(directory, segmentMaxBytes: 4096).log)
        let segments = segmentFiles(directory).count
        try #require(segments >= 4)
        let lastSegment = all.last!.position.segment
        let inLast = all.filter { $0.position.segment == lastSegment }
        // A clean stop's snapshot covers the end of the log; one taken earlier covers less.
        let covered = middle ? all[20].position
            : LogPosition(segment: lastSegment, offset: all.last!.position.offset + Int64(all.last!.size))

        var report = RecoveryReport()
        var seeded: [EventID] = []
        let log = try SegmentedLog(
            directory: directory, configuration: LogConfiguration(segmentMaxBytes: 4096), cursors: ["file": nil],
            logger: quietLogger, recovered: &report, dedupWindow: 100_000, dedupFrom: covered
        ) { id, _ in seeded.append(id) }
        #expect(seeded == all.filter { $0.position >= covered }.map(\.decodedID))
        let scannedSegments = Set(all.filter { $0.position.segment >= covered.segment }.map(\.position.segment))
        #expect(log.unverifiedSegments == segments - scannedSegments.count)
        #expect(report.records == all.count { $0.position.segment >= covered.segment })
        if !middle { #expect(report.records == inLast.count) }
        // Everything reads back, and verification counts the rest.
        #expect(try readAll(log).map(\.decodedID) == idsOf(frames))
        #expect(log.verifySealedSegments().records == frames.count - report.records)
    }
}
