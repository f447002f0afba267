@testable import FerryStorage
import FerryTestKit
import FerryProtocol
import Foundation
import Testing

@Suite("Segmented log: writing, rotation, reading")
struct SegmentedLogTests {
    @Test("many appends rotate by size into several segments, all read back in order")
    func rotationBySize() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let segmentMax: Int64 = 4096
        let frames = Events.frames(300, padding: 100)
        let opened = try openLog(directory, segmentMaxBytes: segmentMax)
        #expect(opened.report == RecoveryReport())
        let writer = try LogWriter(log: opened.log)
        try append(frames, to: writer, groupSize: 7)

        let files = segmentFiles(directory)
        #expect(files.count > 5, "expected several segments, got \(files.count)")
        // Names are consecutive indices starting at 1, each file within the size limit.
        #expect(files.map { URL(fileURLWithPath: $0).lastPathComponent }
            == (1...UInt64(files.count)).map { SegmentedLog.fileName(for: $0) })
        for file in files {
            #expect(fileSize(file) <= segmentMax, "\(file) is \(fileSize(file)) bytes")
            let bytes = try readBytes(file)
            #expect(Array(bytes.prefix(8)) == Array("FERRYSG1".utf8))
        }
        #expect(writer.totalBytes == files.map(fileSize).reduce(0, +))
        #expect(opened.log.status().bytes == writer.totalBytes)
        #expect(opened.log.status().segments == files.count)
        #expect(opened.log.status().undeliveredEvents == frames.count)

        // Reading pages across segment boundaries, in order, with increasing positions.
        for (maxEvents, maxBytes) in [(1000, 1 << 20), (3, 1 << 20), (1000, 500), (1, 1)] {
            let events = try readAll(opened.log, maxEvents: maxEvents, maxBytes: maxBytes)
            #expect(events.map(\.decodedID) == idsOf(frames), "maxEvents \(maxEvents) maxBytes \(maxBytes)")
            let sameBytes = events.map(\.frame) == frames
            #expect(sameBytes, "the frames read back are byte for byte the frames appended")
            #expect(zip(events, events.dropFirst()).allSatisfy { $0.position < $1.position })
            #expect(events.map(\.acceptedAt) == (0..<UInt64(frames.count)).map { 1_000 + $0 })
            #expect(Set(events.map(\.position.segment)).count == files.count)
        }

        // Reopening recovers the same records, cleanly.
        let reopened = try openLog(directory, segmentMaxBytes: segmentMax)
        #expect(reopened.report.isClean)
        #expect(reopened.report.records == frames.count)
        #expect(reopened.report.segments == files.count)
        #expect(try readAll(reopened.log).map(\.decodedID) == idsOf(frames))
    }

    @Test("a record larger than a segment gets a segment of its own and reads back")
    func oversizedRecord() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let big = Events.make(2, padding: 10_000).encoded()
        let frames = [Events.make(1).encoded(), big, Events.make(3).encoded()]
        let opened = try openLog(directory, segmentMaxBytes: 4096)
        let writer = try LogWriter(log: opened.log)
        try append(frames, to: writer, groupSize: 1)
        #expect(segmentFiles(directory).count == 3)
        #expect(try readAll(opened.log, maxBytes: 100).map(\.decodedID) == idsOf(frames))
        // The big record is larger than a read chunk would be for a tiny batch: still read whole.
        let second = try opened.log.read(from: LogPosition(segment: 2, offset: 16), maxEvents: 1, maxBytes: 1)
        #expect(second.events.map(\.decodedID) == idsOf([big]))
    }

    @Test("uncommitted appends are invisible to readers until commit")
    func commitPublishes() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let opened = try openLog(scratch.appending("segments"))
        let writer = try LogWriter(log: opened.log)
        let frames = Events.frames(3)
        for frame in frames { try writer.append(frame: frame, acceptedAt: 5) }
        #expect(try readAll(opened.log).isEmpty)
        #expect(opened.log.status().undeliveredEvents == 0)
        try writer.commit()
        #expect(try readAll(opened.log).map(\.decodedID) == idsOf(frames))
        #expect(opened.log.status().undeliveredEvents == 3)
    }

    @Test("markDelivered moves the cursor; delivered segments other than the active one are deletable")
    func deliveryBookkeeping() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let frames = Events.frames(60, padding: 100)
        let opened = try openLog(directory, segmentMaxBytes: 4096)
        let writer = try LogWriter(log: opened.log)
        try append(frames, to: writer)
        let log = opened.log
        let segmentCount = log.status().segments
        #expect(segmentCount >= 3)
        #expect(log.cursor == LogPosition(segment: 1, offset: 16))
        #expect(log.deliveredSegments().isEmpty)

        let batch = try log.read(from: log.cursor, maxEvents: 25, maxBytes: 1 << 20)
        log.markDelivered(batch.events, next: batch.next)
        #expect(log.cursor == batch.next)
        #expect(log.status().undeliveredEvents == 35)
        let deletable = log.deliveredSegments()
        #expect(deletable.allSatisfy { $0.index < batch.next.segment })
        #expect(deletable.map(\.index) == Array(1..<batch.next.segment))
        // Moving the cursor backwards is ignored.
        log.markDelivered([], next: LogPosition(segment: 1, offset: 16))
        #expect(log.cursor == batch.next)

        for segment in deletable { try writer.delete(segment: segment) }
        #expect(segmentFiles(directory).count == segmentCount - deletable.count)
        #expect(writer.totalBytes == segmentFiles(directory).map(fileSize).reduce(0, +))
        #expect(try readAll(log, from: log.cursor).map(\.decodedID) == idsOf(Array(frames.dropFirst(25))))

        // Everything delivered: the active segment stays.
        let rest = try log.read(from: log.cursor, maxEvents: 1000, maxBytes: 1 << 20)
        log.markDelivered(rest.events, next: rest.next)
        #expect(log.status().undeliveredEvents == 0)
        #expect(!log.deliveredSegments().contains { $0.index == writer.activeIndex })

        // A reopen with the stored cursor counts nothing as undelivered.
        let reopened = try openLog(directory, segmentMaxBytes: 4096, cursor: rest.next)
        #expect(reopened.log.status().undeliveredEvents == 0)
        #expect(try readAll(reopened.log, from: reopened.log.cursor).isEmpty)
    }

    @Test("drop-oldest removes the oldest segment, counts its undelivered events and moves the cursor")
    func dropOldestSegment() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let frames = Events.frames(60, padding: 100)
        let opened = try openLog(directory, segmentMaxBytes: 4096)
        let writer = try LogWriter(log: opened.log)
        try append(frames, to: writer)
        let log = opened.log
        let first = try log.read(from: log.cursor, maxEvents: 1000, maxBytes: 1 << 20).events.filter { $0.position.segment == 1 }
        #expect(first.count > 2)
        // Deliver two events of segment 1, then drop it: the rest of it is lost and counted.
        let two = Array(first.prefix(2))
        log.markDelivered(two, next: LogPosition(segment: 1, offset: first[2].position.offset))
        let lost = try writer.dropOldestSegment()
        #expect(lost == first.count - 2)
        #expect(log.status().droppedEvents == first.count - 2)
        #expect(log.cursor == LogPosition(segment: 2, offset: 16))
        #expect(!FileManager.default.fileExists(atPath: directory + "/" + SegmentedLog.fileName(for: 1)))
        #expect(try readAll(log, from: log.cursor).map(\.decodedID) == idsOf(Array(frames.dropFirst(first.count))))
        #expect(log.status().undeliveredEvents == frames.count - first.count)
        #expect(writer.totalBytes == segmentFiles(directory).map(fileSize).reduce(0, +))

        // Only the active segment left: nothing to drop.
        while try writer.dropOldestSegment() != nil {}
        #expect(segmentFiles(directory) == [directory + "/" + SegmentedLog.fileName(for: writer.activeIndex)])
        #expect(log.status().droppedEvents + log.status().undeliveredEvents == frames.count - two.count)
    }
}
