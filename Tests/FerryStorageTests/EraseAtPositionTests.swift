@testable import FerryStorage
import FerryProtocol
import FerryTestKit
import Foundation
import Testing

@Suite("Segmented log: erasing recorded records by position")
struct EraseAtPositionTests {
    /// Frames whose properties carry `marker`, so its bytes can be looked for on disk.
    static func frames(_ count: Int, marker: String) -> [[UInt8]] {
        (1...count).map { i in
            WireEvent(id: Events.ids.next(), timestamp: 1, sequence: UInt64(i), pid: 1, type: .track, source: "t", name: "E",
                      properties: Array(#"{"m":"\#(marker)-\#(i)"}"#.utf8)).encoded()
        }
    }

    @Test("an overwrite torn by a power cut is erased whole from the recorded position and size; erasing again is a no-op")
    func tornOverwrite() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("segments")
        let marker = "TORN-MARKER"
        let frames = Self.frames(6, marker: marker)
        try writeLog(directory, frames)
        let opened = try openLog(directory)
        let events = try readAll(opened.log)
        let targets = [events[1], events[3], events[5]].map(ErasedRecord.init)
        #expect(targets.map(\.eventID) == [events[1], events[3], events[5]].map(\.decodedID))

        // A power cut tore the in-place overwrite of record 3: its first half is the erased
        // image, the second half is still the event. It no longer parses (and no longer matches
        // any search by content), yet the marker's bytes are on disk.
        let file = segmentFiles(directory)[0]
        var bytes = try readBytes(file)
        let torn = targets[1], image = torn.bytes
        let start = Int(torn.position.offset)
        bytes.replaceSubrange(start..<(start + image.count / 2), with: image[0..<(image.count / 2)])
        try writeBytes(bytes, to: file)
        let damaged = try openLog(directory)
        #expect(damaged.report.corruptRegions == 1)
        #expect(try readAll(damaged.log).count == 5)
        #expect(String(decoding: try readBytes(file), as: UTF8.self).contains("\(marker)-4"))

        // Erasing from the record: the torn one is rewritten whole, the others erased.
        let erased = try damaged.log.erase(at: targets)
        #expect(erased == 3)
        let text = String(decoding: try readBytes(file), as: UTF8.self)
        for i in [2, 4, 6] { #expect(!text.contains("\(marker)-\(i)\""), "record \(i) left bytes") }
        for i in [1, 3, 5] { #expect(text.contains("\(marker)-\(i)\"")) }
        let after = try readAll(damaged.log)
        #expect(after.count == 6)
        #expect(after.filter(\.isErased).map(\.decodedID) == targets.map(\.eventID))

        // Idempotent: nothing left to do, nothing written.
        let before = try readBytes(file)
        #expect(try damaged.log.erase(at: targets) == 0)
        #expect(try readBytes(file) == before)
        // And recovery now finds a clean log with the ids kept.
        let reopened = try openLog(directory)
        #expect(reopened.report.isClean)
        #expect(reopened.report.records == 6)

        // A record whose bytes a torn tail cut off is skipped, not written past the end.
        let past = ErasedRecord(StoredEvent(position: LogPosition(segment: 1, offset: fileSize(file)), size: 100, acceptedAt: 1,
                                            frame: frames[0]))
        #expect(try reopened.log.erase(at: [past]) == 0)
        #expect(try readBytes(file) == before)
    }

    @Test("an event id ending in zero bytes is recorded whole (a redo finds the event by it)")
    func idEndingInZeros() throws {
        var bytes = Events.ids.next().bytes
        bytes[14] = 0
        bytes[15] = 0
        let id = EventID(bytes: bytes)
        let frame = WireEvent(id: id, timestamp: 1, sequence: 1, pid: 1, type: .track, source: "t", name: "E").encoded()
        let record = ErasedRecord(StoredEvent(position: LogPosition(segment: 1, offset: 16), size: LogRecord.framedSize(frameSize: frame.count),
                                              acceptedAt: 5, frame: frame))
        #expect(record.eventID == id)
        let decoded = try JSONDecoder().decode(ErasedRecord.self, from: JSONEncoder().encode(record))
        #expect(decoded.eventID == id)
    }

    @Test("an erased record survives a JSON round trip exactly")
    func codable() throws {
        let event = StoredEvent(position: LogPosition(segment: 7, offset: 1234), size: LogRecord.framedSize(frameSize: Self.frames(1, marker: "x")[0].count),
                                acceptedAt: 99, frame: Self.frames(1, marker: "x")[0])
        let record = ErasedRecord(event)
        let decoded = try JSONDecoder().decode(ErasedRecord.self, from: JSONEncoder().encode(record))
        #expect(decoded == record)
        var image: [UInt8] = []
        LogRecord.appendEvent(event.frame, acceptedAt: event.acceptedAt, to: &image)
        LogRecord.erase(&image)
        #expect(decoded.bytes == image)
    }
}
