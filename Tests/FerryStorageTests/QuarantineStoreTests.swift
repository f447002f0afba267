@testable import FerryStorage
import FerryProtocol
import FerryTestKit
import Foundation
import Testing

@Suite("Quarantine store")
struct QuarantineStoreTests {
    static func entry(_ sequence: UInt64, padding: Int = 0, origin: [UInt8] = []) -> QuarantinedEvent {
        let frame = Events.make(sequence, padding: padding).encoded()
        return QuarantinedEvent(id: EventID(bytes: frame), quarantinedAt: 1_700_000_000_000 + sequence, frame: frame, origin: origin,
                                violations: #"[{"event":"track:Test Event","rule":"required","path":"properties.total","message":"is required"}]"#)
    }

    @Test("an entry round-trips; a resend replaces it; remove is durable and counted")
    func roundTrip() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = QuarantineStore(dataDirectory: scratch.path)
        #expect(try store.open().isEmpty)
        #expect(!FileManager.default.fileExists(atPath: store.directory), "made on the first quarantined event only")
        let origin = EventOrigin(uid: 1000, gid: 1000).metadata.encoded
        let first = Self.entry(1, origin: origin), second = Self.entry(2)
        #expect(store.add([first, second]).allSatisfy { $0 == nil })
        #expect(try store.load(first.id) == first)
        #expect(try store.ids() == [first.id, second.id])
        #expect(store.count == 2)
        let bytes = store.bytes
        // The same event again (a client's resend) replaces its entry.
        #expect(store.add([first]).allSatisfy { $0 == nil })
        #expect(store.count == 2 && store.bytes == bytes)
        // No temp file is left, and the directory is private.
        #expect(try FileManager.default.contentsOfDirectory(atPath: store.directory).sorted()
                == [QuarantineStore.fileName(first.id), QuarantineStore.fileName(second.id)].sorted())
        var st = stat()
        #expect(lstat(store.directory, &st) == 0 && st.st_mode & 0o777 == 0o700)
        #expect(try store.remove(first.id))
        #expect(try !store.remove(first.id))
        #expect(store.count == 1)
        // A new store counts what is on disk.
        let reopened = QuarantineStore(dataDirectory: scratch.path)
        #expect(try reopened.open().isEmpty)
        #expect(reopened.count == 1 && reopened.bytes == store.bytes)
    }

    @Test("full: the add fails with noSpace (answered like a full disk), nothing is written, room made by a removal is used")
    func full() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let one = Self.entry(1, padding: 3000)
        let store = QuarantineStore(dataDirectory: scratch.path, maxBytes: one.encoded().count + 100)
        try store.open()
        let results = store.add([one, Self.entry(2, padding: 3000)])
        #expect(results[0] == nil)
        #expect(results[1]?.code == .noSpace)
        #expect(store.count == 1)
        #expect(try store.ids() == [one.id])
        try store.remove(one.id)
        #expect(store.add([Self.entry(3, padding: 3000)]).allSatisfy { $0 == nil })
    }

    @Test("damaged entries are reported and skipped, not fatal", arguments: ["truncated", "flipped", "garbage"])
    func corrupt(damage: String) throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = QuarantineStore(dataDirectory: scratch.path)
        let good = Self.entry(1), bad = Self.entry(2)
        #expect(store.add([good, bad]).allSatisfy { $0 == nil })
        var bytes = try #require(FileManager.default.contents(atPath: store.path(bad.id)).map { [UInt8]($0) })
        switch damage {
        case "truncated": bytes.removeLast(9)
        case "flipped": bytes[QuarantinedEvent.headerSize + 20] ^= 0x40
        default: bytes = Array("not an entry".utf8)
        }
        try Data(bytes).write(to: URL(fileURLWithPath: store.path(bad.id)))
        let reopened = QuarantineStore(dataDirectory: scratch.path)
        let problems = try reopened.open()
        #expect(problems.count == 1 && problems[0].contains(bad.id.description), "\(problems)")
        #expect(reopened.count == 1)
        #expect(throws: StorageError.self) { try reopened.load(bad.id) }
        #expect(try reopened.load(good.id) == good)
        // An erasure passes over it; drop removes it.
        #expect(try reopened.erase { _ in true } == 1)
        #expect(try reopened.ids() == [bad.id])
        #expect(try reopened.remove(bad.id))
    }

    @Test("a temp file left by a crash is removed on open; a symbolic link in the area is refused")
    func leftovers() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = QuarantineStore(dataDirectory: scratch.path)
        let entry = Self.entry(1)
        #expect(store.add([entry]).allSatisfy { $0 == nil })
        let temp = store.directory + "/." + QuarantineStore.fileName(Self.entry(2).id) + ".tmp"
        try Data("half".utf8).write(to: URL(fileURLWithPath: temp))
        #expect(try QuarantineStore(dataDirectory: scratch.path).open().isEmpty)
        #expect(!FileManager.default.fileExists(atPath: temp))
        try FileManager.default.createSymbolicLink(atPath: store.directory + "/x.q", withDestinationPath: "/etc/passwd")
        #expect(throws: StorageError.self) { try QuarantineStore(dataDirectory: scratch.path).open() }
    }

    @Test("erase removes the entries the test covers and counts them")
    func erase() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = QuarantineStore(dataDirectory: scratch.path)
        let entries = (1...4).map { Self.entry(UInt64($0)) }
        #expect(store.add(entries).allSatisfy { $0 == nil })
        let doomed = Set([entries[1].id, entries[3].id])
        #expect(try store.erase { doomed.contains($0.id) } == 2)
        #expect(try store.ids() == [entries[0].id, entries[2].id])
        #expect(store.count == 2)
    }

    @Test("the replay marker round-trips, survives open, is never listed as an entry, and clears durably")
    func replayMarker() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = QuarantineStore(dataDirectory: scratch.path)
        let entries = [Self.entry(1), Self.entry(2)]
        #expect(store.add(entries).allSatisfy { $0 == nil })
        #expect(try store.loadMarker() == nil)
        let marker = QuarantineStore.ReplayMarker(from: LogPosition(segment: 7, offset: 4096), ids: entries.map(\.id))
        try store.writeMarker(marker)
        #expect(try store.loadMarker() == marker)
        let reopened = QuarantineStore(dataDirectory: scratch.path)
        #expect(try reopened.open().isEmpty)
        #expect(try reopened.loadMarker() == marker)
        #expect(try reopened.ids() == entries.map(\.id))
        try reopened.clearMarker()
        try reopened.clearMarker()
        #expect(try reopened.loadMarker() == nil)
    }
}
