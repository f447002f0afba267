@testable import FerryStorage
import FerryTestKit
import FerryProtocol
import Foundation
import Testing

@Suite("Segmented log: recovery")
struct RecoveryTests {
    /// How a crash left the end of the last segment.
    enum Tail: String, CaseIterable, CustomTestStringConvertible {
        case garbage, zeros, headerOnly, halfRecord, allButOneByte, fakeMagic
        var testDescription: String { rawValue }

        func bytes() -> [UInt8] {
            var record: [UInt8] = []
            LogRecord.appendEvent(Events.make(999, padding: 50).encoded(), acceptedAt: 1, to: &record)
            switch self {
            case .garbage: return (0..<73).map { UInt8(truncatingIfNeeded: $0 &* 97 &+ 13) }
            case .zeros: return [UInt8](repeating: 0, count: 4096)
            case .headerOnly: return Array(record.prefix(LogRecord.headerSize))
            case .halfRecord: return Array(record.prefix(record.count / 2))
            case .allButOneByte: return Array(record.dropLast())
            case .fakeMagic: return [0xF5, 0x7E, 0xA1, 0x1D, 0x40, 0, 0, 0, 1, 2, 3]
            }
        }
    }

    @Test("a torn tail of the last segment is truncated; the records before it survive; appends continue",
          arguments: Tail.allCases)
    func tornTail(tail: Tail) throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let frames = Events.frames(40, padding: 60)
        try writeLog(directory, frames, segmentMaxBytes: 4096)
        let files = segmentFiles(directory)
        #expect(files.count > 1)
        let last = files.last!
        let goodSize = fileSize(last)
        let garbage = tail.bytes()
        try appendBytes(garbage, to: last)

        let opened = try openLog(directory, segmentMaxBytes: 4096)
        #expect(opened.report.records == frames.count)
        #expect(opened.report.truncatedBytes == Int64(garbage.count))
        #expect(opened.report.corruptRegions == 0)
        #expect(opened.report.corruptBytes == 0)
        #expect(!opened.report.isClean)
        #expect(fileSize(last) == goodSize, "the file is cut back to its last valid record")
        #expect(try readAll(opened.log).map(\.decodedID) == idsOf(frames))
        #expect(opened.seeded.map(\.id) == frames.map(Events.id(of:)))

        // New appends after recovery land right after the last good record and read back.
        let more = Events.frames(15, padding: 60)
        do {
            let writer = try LogWriter(log: opened.log)
            try append(more, to: writer, groupSize: 4)
        }
        #expect(try readAll(opened.log).map(\.decodedID) == idsOf(frames + more))
        let again = try openLog(directory, segmentMaxBytes: 4096)
        #expect(again.report.isClean)
        #expect(again.report.records == frames.count + more.count)
        #expect(try readAll(again.log).map(\.decodedID) == idsOf(frames + more))
        let sameBytes = try readAll(again.log).map(\.frame) == frames + more
        #expect(sameBytes, "the frames read back are byte for byte the frames appended")
    }

    @Test("a last segment torn while its header was written gets its header back")
    func tornSegmentHeader() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let frames = Events.frames(5)
        try writeLog(directory, frames)
        // A crash right after creating segment 2: a few header bytes only.
        let second = directory + "/" + SegmentedLog.fileName(for: 2)
        try writeBytes(Array("FERR".utf8), to: second)

        let opened = try openLog(directory)
        #expect(opened.report.records == 5)
        #expect(opened.report.segments == 2)
        #expect(fileSize(second) == SegmentedLog.segmentHeaderSize)
        #expect(Array(try readBytes(second).prefix(8)) == Array("FERRYSG1".utf8))
        let more = Events.frames(3)
        do {
            let writer = try LogWriter(log: opened.log)
            #expect(writer.activeIndex == 2)
            try append(more, to: writer)
        }
        #expect(try readAll(opened.log).map(\.decodedID) == idsOf(frames + more))
        #expect(try openLog(directory).report.isClean)
    }

    /// Where in a record a byte gets damaged.
    enum Damage: Int, CaseIterable, CustomTestStringConvertible {
        case magic = 0, lengthLow = 4, lengthHigh = 7, crc = 9, kind = 12, acceptedAt = 15, frame = 60
        var testDescription: String { "\(self)" }
    }

    @Test("a damaged middle record of the last segment loses exactly that record", arguments: Damage.allCases)
    func damagedMiddleRecordLastSegment(damage: Damage) throws {
        try checkDamagedRecord(damage: damage, segmentMaxBytes: 1 << 20, victim: 17, count: 40)
    }

    @Test("a damaged middle record of a non-last segment loses exactly that record", arguments: Damage.allCases)
    func damagedMiddleRecordEarlierSegment(damage: Damage) throws {
        try checkDamagedRecord(damage: damage, segmentMaxBytes: 4096, victim: 5, count: 60)
    }

    /// Writes `count` events, damages record number `victim` (which must lie inside segment 1,
    /// with valid records on both sides) and checks what recovery and reading see.
    func checkDamagedRecord(damage: Damage, segmentMaxBytes: Int64, victim: Int, count: Int) throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let frames = Events.frames(count, padding: 60)
        try writeLog(directory, frames, segmentMaxBytes: segmentMaxBytes)
        let before = try readAll(try openLog(directory, segmentMaxBytes: segmentMaxBytes).log)
        let target = before[victim]
        try #require(target.position.segment == 1 && before[victim + 1].position.segment == 1)
        let segmentCount = segmentFiles(directory).count
        let path = directory + "/" + SegmentedLog.fileName(for: 1)
        let sizeBefore = fileSize(path)
        try flipByte(in: path, at: target.position.offset + Int64(damage.rawValue))

        let opened = try openLog(directory, segmentMaxBytes: segmentMaxBytes)
        var expected = frames
        expected.remove(at: victim)
        #expect(opened.report.records == count - 1)
        #expect(opened.report.corruptRegions == 1)
        #expect(opened.report.corruptBytes == Int64(target.size))
        #expect(opened.report.truncatedBytes == 0)
        #expect(opened.report.segments == segmentCount)
        #expect(fileSize(path) == sizeBefore, "a damaged record in the middle is skipped, never truncated")
        #expect(try readAll(opened.log).map(\.decodedID) == idsOf(expected))
        #expect(try readAll(opened.log, maxEvents: 3, maxBytes: 256).map(\.decodedID) == idsOf(expected))
        #expect(opened.seeded.map(\.id) == expected.map(Events.id(of:)))
        #expect(opened.log.status().undeliveredEvents == count - 1)

        // Appends still work after such a recovery, and the damage is reported the same way again.
        let more = Events.frames(2)
        do {
            let writer = try LogWriter(log: opened.log)
            try append(more, to: writer)
        }
        #expect(try readAll(opened.log).map(\.decodedID) == idsOf(expected + more))
        let again = try openLog(directory, segmentMaxBytes: segmentMaxBytes)
        #expect(again.report.corruptRegions == 1)
        #expect(again.report.records == count - 1 + more.count)
    }

    @Test("two adjacent damaged records form one region; both are lost, nothing else")
    func adjacentDamage() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let frames = Events.frames(20)
        try writeLog(directory, frames)
        let before = try readAll(try openLog(directory).log)
        let path = directory + "/" + SegmentedLog.fileName(for: 1)
        try flipByte(in: path, at: before[8].position.offset + 30)
        try flipByte(in: path, at: before[9].position.offset + 30)
        let opened = try openLog(directory)
        #expect(opened.report.corruptRegions == 1)
        #expect(opened.report.corruptBytes == Int64(before[8].size + before[9].size))
        #expect(try readAll(opened.log).map(\.decodedID) == idsOf(Array(frames[0..<8] + frames[10...])))
    }

    @Test("damage to the last record of a non-last segment is reported, not silently lost")
    func damagedLastRecordOfEarlierSegment() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let frames = Events.frames(60, padding: 60)
        try writeLog(directory, frames, segmentMaxBytes: 4096)
        let before = try readAll(try openLog(directory, segmentMaxBytes: 4096).log)
        let inFirst = before.filter { $0.position.segment == 1 }
        let victim = inFirst.count - 1
        let path = directory + "/" + SegmentedLog.fileName(for: 1)
        let sizeBefore = fileSize(path)
        try flipByte(in: path, at: inFirst[victim].position.offset + 40)

        let opened = try openLog(directory, segmentMaxBytes: 4096)
        var expected = frames
        expected.remove(at: victim)
        #expect(opened.report.records == frames.count - 1)
        #expect(fileSize(path) == sizeBefore, "only the last segment's tail is ever truncated")
        #expect(try readAll(opened.log).map(\.decodedID) == idsOf(expected))
        #expect(opened.report.corruptBytes == Int64(inFirst[victim].size))
        // A record was lost: the report must say so.
        #expect(!opened.report.isClean, "a lost record must not be reported as a clean recovery")
        #expect(opened.report.corruptRegions == 1)
    }

    @Test("reading with batches smaller than a segment never loses a valid record next to damage")
    func damageNextToReadChunkBoundary() throws {
        // The reader works through a segment in chunks of at least 64 KiB. Damage the record just
        // before the one that straddles the end of the first chunk.
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let frames = Events.frames(200, padding: 700)
        try writeLog(directory, frames)
        let before = try readAll(try openLog(directory).log)
        let chunkEnd = SegmentedLog.segmentHeaderSize + 65_536
        let straddling = try #require(before.firstIndex {
            $0.position.offset < chunkEnd && $0.position.offset + Int64($0.size) > chunkEnd
        })
        let victim = straddling - 1
        try flipByte(in: directory + "/" + SegmentedLog.fileName(for: 1), at: before[victim].position.offset + 100)

        let opened = try openLog(directory)
        var expected = frames
        expected.remove(at: victim)
        #expect(opened.report.records == frames.count - 1)
        #expect(opened.report.corruptRegions == 1)
        // Delivery-sized reads (maxBytes 64 KiB, the first chunk of the segment).
        let delivered = try readAll(opened.log, maxEvents: 10_000, maxBytes: 65_536)
        let missing = Set(expected.map(Events.id(of:))).subtracting(delivered.map(\.decodedID))
        #expect(missing.isEmpty, "valid records skipped by read(): \(missing.count) (record \(straddling) straddles the chunk end)")
        #expect(delivered.map(\.decodedID) == idsOf(expected))
    }

    @Test("an empty or missing data directory is an empty log with a clean report")
    func emptyAndMissingDirectory() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        for directory in [scratch.path, scratch.appending("missing/nested/segments")] {
            let opened = try openLog(directory)
            #expect(opened.report == RecoveryReport())
            #expect(opened.report.isClean)
            #expect(opened.seeded.isEmpty)
            #expect(try readAll(opened.log).isEmpty)
            #expect(opened.log.status().segments == 0)
            #expect(opened.log.status().undeliveredEvents == 0)
            #expect(opened.log.oldestUndeliveredAcceptedAt() == nil)
            #expect(FileManager.default.fileExists(atPath: directory))
            // The first writer creates segment 1.
            let frames = Events.frames(2)
            do {
                let writer = try LogWriter(log: opened.log)
                #expect(writer.activeIndex == 1)
                try append(frames, to: writer)
            }
            #expect(try readAll(opened.log).map(\.decodedID) == idsOf(frames))
            #expect(opened.log.oldestUndeliveredAcceptedAt() == 1_000)
        }
    }

    @Test("files that are not segments are ignored by recovery")
    func strayFiles() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let frames = Events.frames(3)
        try writeLog(directory, frames)
        try writeBytes([1, 2, 3], to: directory + "/notes.txt")
        try writeBytes([1, 2, 3], to: directory + "/abc.seg.tmp")
        let opened = try openLog(directory)
        #expect(opened.report.isClean)
        #expect(opened.report.segments == 1)
        #expect(try readAll(opened.log).map(\.decodedID) == idsOf(frames))
    }

    @Test("seedDedup gets the id and acceptedAt of every recovered record, oldest first, across segments")
    func seedDedup() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let frames = Events.frames(50, padding: 100)
        try writeLog(directory, frames, segmentMaxBytes: 4096)
        #expect(segmentFiles(directory).count > 1)
        let opened = try openLog(directory, segmentMaxBytes: 4096)
        #expect(opened.seeded.map(\.id) == frames.map(Events.id(of:)))
        #expect(opened.seeded.map(\.at) == (0..<UInt64(frames.count)).map { 1_000 + $0 })

        // A cursor does not change what is seeded: delivered records keep their ids in the window.
        let cursor = try readAll(opened.log)[30].position
        let withCursor = try openLog(directory, segmentMaxBytes: 4096, cursor: cursor)
        #expect(withCursor.seeded.map(\.id) == frames.map(Events.id(of:)))
        #expect(withCursor.log.cursor == cursor)
        #expect(withCursor.log.status().undeliveredEvents == 20)
        #expect(try readAll(withCursor.log, from: withCursor.log.cursor).map(\.decodedID) == idsOf(Array(frames.dropFirst(30))))
    }

    @Test("a cursor pointing at a segment already deleted resumes at the oldest segment")
    func staleCursor() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let frames = Events.frames(50, padding: 100)
        try writeLog(directory, frames, segmentMaxBytes: 4096)
        let files = segmentFiles(directory)
        let firstCount = try readAll(try openLog(directory, segmentMaxBytes: 4096).log).filter { $0.position.segment == 1 }.count
        try FileManager.default.removeItem(atPath: files[0])
        let opened = try openLog(directory, segmentMaxBytes: 4096, cursor: LogPosition(segment: 1, offset: 500))
        #expect(opened.log.cursor == LogPosition(segment: 2, offset: 16))
        #expect(try readAll(opened.log, from: opened.log.cursor).map(\.decodedID) == idsOf(Array(frames.dropFirst(firstCount))))
    }
}
