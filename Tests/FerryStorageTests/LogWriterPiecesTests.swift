@testable import FerryStorage
import FerryTestKit
import Testing

/// A group larger than ``LogWriter/flushBytes`` is written in pieces (the writer's buffer stays
/// small) but stays one unit: invisible until its single commit, gone whole if discarded.
@Suite("Log writer: large groups written in pieces")
struct LogWriterPiecesTests {
    @Test("a group larger than the write buffer is invisible until commit and rolled back whole")
    func largeGroup() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let opened = try openLog(directory, segmentMaxBytes: 64 << 20)
        let writer = try LogWriter(log: opened.log)
        let frames = Events.frames(3 * LogWriter.flushBytes / 1100 + 1, padding: 1000)
        for frame in frames { try writer.append(frame: frame, acceptedAt: 1) }
        let file = segmentFiles(directory)[0]
        #expect(fileSize(file) > Int64(LogWriter.flushBytes), "written in pieces before the commit")
        #expect(writer.pendingBytes >= 3 * LogWriter.flushBytes)
        #expect(try readAll(opened.log).isEmpty, "nothing visible before the commit")

        writer.discardGroup()
        #expect(fileSize(file) == SegmentedLog.segmentHeaderSize)
        #expect(try readAll(opened.log).isEmpty)

        for frame in frames { try writer.append(frame: frame, acceptedAt: 1) }
        try writer.commit()
        #expect(try readAll(opened.log, maxEvents: 100_000, maxBytes: 64 << 20).map(\.decodedID) == idsOf(frames))
        let again = try openLog(directory, segmentMaxBytes: 64 << 20)
        #expect(again.report.isClean && again.report.records == frames.count)
    }
}
