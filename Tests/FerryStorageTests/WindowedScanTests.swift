import FerryProtocol
@testable import FerryStorage
import FerryTestKit
import Foundation
import Testing

/// The scanner reads a segment in windows (memory bounded by one window, not the segment): what
/// it finds must not depend on where the windows fall.
@Suite("Segmented log: windowed scan")
struct WindowedScanTests {
    struct Found: Equatable {
        var visited: [Int64]
        var records: [Int64]
        var corruptRegions: Int
        var corruptBytes: Int64
        var truncatedBytes: Int64
        var size: Int64
        var damage: [[Int64]]
    }

    static func scan(_ path: String, window: Int, truncate: Bool = false) throws -> Found {
        var visited: [Int64] = []
        let result = try SegmentScanner.scan(path: path, truncateTornTail: truncate, windowBytes: window) { offset, size, body in
            #expect(body.count == size - LogRecord.headerSize)
            visited.append(offset)
        }
        return Found(visited: visited, records: result.records, corruptRegions: result.corruptRegions, corruptBytes: result.corruptBytes,
                     truncatedBytes: result.truncatedBytes, size: result.size, damage: result.damage.map { [$0.offset, $0.length] })
    }

    /// A segment of records of mixed sizes (one larger than the small windows), damaged in
    /// several ways: flipped bytes inside records, a run of garbage, a fake record magic, and
    /// (with `tornTail`) half a record at the end.
    static func damagedSegment(in scratch: ScratchDirectory, tornTail: Bool) throws -> (path: String, records: Int) {
        let directory = scratch.appending("segments")
        var frames: [[UInt8]] = []
        for i in 0..<60 { frames.append(Events.make(UInt64(i), padding: [0, 40, 300, 3000][i % 4]).encoded()) }
        try writeLog(directory, frames, segmentMaxBytes: 1 << 20)
        let path = segmentFiles(directory)[0]
        var bytes = try readBytes(path)
        bytes[200] ^= 0xFF  // inside an early record
        bytes[bytes.count / 2] ^= 0x01  // in the middle
        bytes.replaceSubrange((bytes.count * 3 / 4)..<(bytes.count * 3 / 4 + 10), with: [0xF5, 0x7E, 0xA1, 0x1D, 0x40, 0, 0, 0, 9, 9])
        if tornTail {
            var record: [UInt8] = []
            LogRecord.appendEvent(Events.make(999, padding: 500).encoded(), acceptedAt: 1, to: &record)
            bytes += record.prefix(record.count / 2)
        }
        try writeBytes(bytes, to: path)
        return (path, frames.count)
    }

    @Test("damage, resynchronisation and a torn tail are found the same whatever the window", arguments: [false, true])
    func sameAsWholeFile(tornTail: Bool) throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let (path, written) = try Self.damagedSegment(in: scratch, tornTail: tornTail)
        let whole = try Self.scan(path, window: 1 << 30)
        #expect(whole.corruptRegions >= 3)
        #expect(whole.records.count < written && whole.records.count > written / 2)
        #expect(whole.visited == whole.records)
        for window in [1, 7, 16, 64, 100, 1000, 4096, 5000] {
            #expect(try Self.scan(path, window: window) == whole, "window \(window)")
        }
    }

    @Test("a torn tail is cut back to the last valid record with small windows too")
    func truncatesWithSmallWindows() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let (path, _) = try Self.damagedSegment(in: scratch, tornTail: true)
        let whole = try Self.scan(path, window: 1 << 30)
        let cut = try Self.scan(path, window: 64, truncate: true)
        #expect(cut.truncatedBytes > 0)
        #expect(cut.records == whole.records)
        #expect(cut.corruptRegions == whole.corruptRegions - 1)
        #expect(fileSize(path) == cut.size)
        #expect(try Self.scan(path, window: 1 << 30).truncatedBytes == 0)
    }
}
