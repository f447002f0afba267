@testable import FerryStorage
import FerryTestKit
import FerryProtocol
import Foundation
import Testing

@Suite("Cursor store")
struct CursorStoreTests {
    static func store(_ scratch: ScratchDirectory) throws -> CursorStore {
        try FileManager.default.createDirectory(atPath: scratch.appending("cursors"), withIntermediateDirectories: true)
        return CursorStore(dataDirectory: scratch.path, sink: "file")
    }

    @Test("no file: nil")
    func missing() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        #expect(try Self.store(scratch).load() == nil)
    }

    @Test("save then load round-trips the position and checkpoint", arguments: [nil, [], [1, 2, 3], Array(0..<200)] as [[UInt8]?])
    func roundTrip(checkpoint: [UInt8]?) throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = try Self.store(scratch)
        #expect(store.path == scratch.path + "/cursors/file.cursor")
        let position = LogPosition(segment: 0x0123_4567_89AB, offset: 987_654_321)
        try store.save(position, checkpoint: checkpoint)
        let loaded = try #require(try store.load())
        #expect(loaded.position == position)
        // An empty checkpoint is stored as none.
        #expect(loaded.checkpoint == (checkpoint?.isEmpty == false ? checkpoint : nil))
        // Overwriting replaces it; no temp file is left behind.
        try store.save(LogPosition(segment: 2, offset: 16), checkpoint: [9])
        let second = try #require(try store.load())
        #expect(second.position == LogPosition(segment: 2, offset: 16))
        #expect(second.checkpoint == [9])
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.appending("cursors")) == ["file.cursor"])
    }

    @Test("the file stays open between saves; a file put in its place is opened anew, not written behind it")
    func keptOpen() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = try Self.store(scratch)
        try store.save(LogPosition(segment: 1, offset: 10), checkpoint: [1])
        try store.save(LogPosition(segment: 1, offset: 20), checkpoint: [2])
        try store.save(LogPosition(segment: 1, offset: 30), checkpoint: [3])
        #expect(openDescriptorCount(of: store.path) == 1, "one descriptor kept for the saves in place")
        // Another file of the same size renamed over the path (a restore from a copy).
        let copy = scratch.appending("cursors/copy")
        try writeBytes(try readBytes(store.path), to: copy)
        try FileManager.default.moveItem(atPath: store.path, toPath: store.path + ".old")
        try FileManager.default.moveItem(atPath: copy, toPath: store.path)
        try store.save(LogPosition(segment: 1, offset: 40), checkpoint: [4])
        #expect(try store.load()?.position == LogPosition(segment: 1, offset: 40))
        #expect(try store.load()?.checkpoint == [4])
        #expect(openDescriptorCount(of: store.path + ".old") == 0 && openDescriptorCount(of: store.path) == 1)
        store.close()
        #expect(openDescriptorCount(of: store.path) == 0)
    }

    @Test("any damaged byte, a truncated file or an extended file throws corrupt")
    func corrupt() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = try Self.store(scratch)
        try store.save(LogPosition(segment: 3, offset: 4_096), checkpoint: [1, 2, 3, 4, 5, 6, 7, 8])
        let good = try readBytes(store.path)
        var variants: [(String, [UInt8])] = good.indices.map { index in
            var bad = good
            bad[index] ^= 0x20
            return ("byte \(index) flipped", bad)
        }
        variants += [("truncated", Array(good.dropLast())), ("extended", good + [0]), ("empty", []),
                     ("header only", Array(good.prefix(4)))]
        for (what, bytes) in variants {
            try writeBytes(bytes, to: store.path)
            do {
                _ = try store.load()
                Issue.record("\(what): load() did not throw")
            } catch let error as StorageError {
                #expect(error.code == .corrupt, "\(what): \(error)")
                #expect(error.message.contains(store.path), "\(what): the message names the file: \(error.message)")
            }
        }
        // Rewriting a good cursor over a damaged one works.
        try store.save(LogPosition(segment: 3, offset: 4_096), checkpoint: nil)
        #expect(try store.load()?.position == LogPosition(segment: 3, offset: 4_096))
    }
}
