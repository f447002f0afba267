@testable import FerryFileSink
@testable import FerryAgent
import FerryTestKit
@testable import FerryStorage
import FerryProtocol
import Foundation
import Testing

@Suite("File sink")
struct FileSinkTests {
    static func stored(_ events: [WireEvent], acceptedAt: UInt64 = 1_700_000_000_000) -> [StoredEvent] {
        storedEvents(events, acceptedAt: acceptedAt)
    }

    static func ids(_ lines: [[String: Any]]) -> [String] { lines.map { $0["id"] as? String ?? "<no id>" } }

    @Test("recovering from the first batch's checkpoint cuts the output back to the first batch's lines",
          arguments: [Int64(64 << 20), 1])
    func recoverToCheckpoint(maxFileBytes: Int64) async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("delivered")
        let first = (1...3).map { Events.make(UInt64($0)) }
        let second = (4...7).map { Events.make(UInt64($0)) }

        let sink = FileSink(directory: directory, maxFileBytes: maxFileBytes)
        let initial = try await sink.recover(checkpoint: nil)
        #expect(initial != nil)
        let checkpoint1 = try #require(try await sink.deliver(DeliveryBatch(events: Self.stored(first))))
        let checkpoint2 = try #require(try await sink.deliver(DeliveryBatch(events: Self.stored(second))))
        #expect(checkpoint1 != checkpoint2)
        #expect(Self.ids(try sinkLines(directory)) == (first + second).map(\.id.description))
        if maxFileBytes == 1 {
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
                == [FileSink.fileName(1), FileSink.fileName(2)], "a tiny file limit rolls to a new file per batch")
        }

        // The cursor after batch 1 was stored, then the process died after writing batch 2.
        let restarted = FileSink(directory: directory, maxFileBytes: maxFileBytes)
        let recovered = try await restarted.recover(checkpoint: checkpoint1)
        #expect(recovered == checkpoint1)
        #expect(Self.ids(try sinkLines(directory)) == first.map(\.id.description))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).sorted() == [FileSink.fileName(1)])

        // Re-delivering batch 2 leaves every event exactly once, in order.
        let again = try await restarted.deliver(DeliveryBatch(events: Self.stored(second)))
        #expect(again == checkpoint2)
        #expect(Self.ids(try sinkLines(directory)) == (first + second).map(\.id.description))
    }

    @Test("the sink keeps its file open between batches; a file moved away is left alone and the next batch goes where the path points")
    func keepsItsFileOpen() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("delivered")
        let sink = FileSink(directory: directory)
        _ = try await sink.recover(checkpoint: nil)
        let path = directory + "/" + FileSink.fileName(1), aside = directory + "/moved"
        let first = Events.make(1), second = Events.make(2)
        _ = try await sink.deliver(DeliveryBatch(events: Self.stored([first])))
        _ = try await sink.deliver(DeliveryBatch(events: Self.stored([second])))
        #expect(openDescriptorCount(of: path) == 1, "one descriptor for both batches")
        #expect(Self.ids(try sinkLines(directory)) == [first, second].map(\.id.description))

        try FileManager.default.moveItem(atPath: path, toPath: aside)
        let movedBytes = try readBytes(aside)
        let third = Events.make(3)
        _ = try await sink.deliver(DeliveryBatch(events: Self.stored([third])))
        #expect(try readBytes(aside) == movedBytes, "nothing written behind the path into the moved file")
        #expect(String(decoding: try readBytes(path), as: UTF8.self).contains(third.id.description))
        #expect(openDescriptorCount(of: aside) == 0 && openDescriptorCount(of: path) == 1)
        try await sink.shutdown()
        #expect(openDescriptorCount(of: path) == 0, "shutdown closes it")
    }

    @Test("recovering from the initial checkpoint removes everything delivered after it")
    func recoverToInitialCheckpoint() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("delivered")
        let sink = FileSink(directory: directory)
        let initial = try await sink.recover(checkpoint: nil)
        _ = try await sink.deliver(DeliveryBatch(events: Self.stored([Events.make(1)])))
        let restarted = FileSink(directory: directory)
        _ = try await restarted.recover(checkpoint: initial)
        #expect(try sinkLines(directory).isEmpty)
    }

    @Test("without a checkpoint the sink continues after the newest file and never rewrites one")
    func noCheckpointStartsANewFile() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("delivered")
        let sink = FileSink(directory: directory)
        _ = try await sink.recover(checkpoint: nil)
        let first = [Events.make(1)]
        _ = try await sink.deliver(DeliveryBatch(events: Self.stored(first)))
        let restarted = FileSink(directory: directory)
        _ = try await restarted.recover(checkpoint: nil)
        let second = [Events.make(2)]
        _ = try await restarted.deliver(DeliveryBatch(events: Self.stored(second)))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
            == [FileSink.fileName(1), FileSink.fileName(2)])
        #expect(Self.ids(try sinkLines(directory)) == (first + second).map(\.id.description))
    }

    @Test("each line is one JSON object with the event's fields")
    func lineContents() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("delivered")
        let plain = Events.make(1, name: "Order Completed")
        var multiline = Events.make(2, name: "Multi \"line\"")
        multiline.properties = Array("{\n  \"a\": 1,\r\n  \"s\": \"x\\ny\"\n}".utf8)
        multiline.userID = "user-7"
        multiline.onceKey = "once"
        multiline.flags = .localOnly
        multiline.category = 3
        var notObject = Events.make(3)
        notObject.properties = Array("[1,2]".utf8)
        var empty = Events.make(4)
        empty.type = .identify
        empty.properties = []
        var badUTF8 = Events.make(5)
        badUTF8.properties = []
        var badFrame = badUTF8.encoded()
        badFrame[WireEvent.fixedHeaderSize] = 0xFF // first byte of the source: invalid UTF-8
        let events = Self.stored([plain, multiline, notObject, empty]) + [
            StoredEvent(position: LogPosition(segment: 1, offset: 99_999), size: 0, acceptedAt: 5, frame: badFrame),
        ]

        let sink = FileSink(directory: directory)
        _ = try await sink.recover(checkpoint: nil)
        _ = try await sink.deliver(DeliveryBatch(events: events))
        let lines = try sinkLines(directory)
        try #require(lines.count == 5, "one line per event, got \(lines.count)")
        #expect(Self.ids(lines) == [plain, multiline, notObject, empty, badUTF8].map(\.id.description))

        #expect(lines[0]["name"] as? String == "Order Completed")
        #expect(lines[0]["type"] as? String == "track")
        #expect(lines[0]["source"] as? String == "agent-tests")
        #expect((lines[0]["seq"] as? NSNumber)?.intValue == 1)
        #expect((lines[0]["pid"] as? NSNumber)?.intValue == 4242)
        #expect((lines[0]["accepted_at"] as? NSNumber)?.int64Value == 1_700_000_000_000)
        #expect(((lines[0]["properties"] as? [String: Any])?["i"] as? NSNumber)?.intValue == 1)
        #expect(lines[0]["local_only"] == nil)

        #expect(lines[1]["name"] as? String == "Multi \"line\"")
        #expect(((lines[1]["properties"] as? [String: Any])?["s"] as? String) == "x\ny")
        #expect(lines[1]["user_id"] as? String == "user-7")
        #expect(lines[1]["once_key"] as? String == "once")
        #expect(lines[1]["local_only"] as? Bool == true)
        #expect((lines[1]["category"] as? NSNumber)?.intValue == 3)

        #expect(lines[2]["properties_raw"] as? String == "[1,2]")
        #expect((lines[3]["properties"] as? [String: Any])?.isEmpty == true)
        #expect(lines[3]["type"] as? String == "identify")
        #expect(lines[4]["undecodable"] as? Bool == true)
    }

    @Test("the event-model fields are anonymous_id, group_id, previous_id and context, each only when set")
    func eventModelFields() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.appending("delivered")
        var all = Events.make(1, name: "Joined")
        all.type = .group
        all.anonymousID = "anon \"7\""
        all.groupID = "acme"
        all.previousID = "old-1"
        all.context = Array("{\n  \"locale\": \"fr-FR\",\r\n  \"app\": {\"v\": 2}\n}".utf8)
        var some = Events.make(2)
        some.anonymousID = "a2"
        let none = Events.make(3)
        // A frame an older agent stored without checking its context (not an object).
        var unchecked = Events.make(4)
        unchecked.extensions = [EventExtension(tag: .init(rawValue: 0x0005), value: Array("[1]".utf8))]
        let sink = FileSink(directory: directory)
        _ = try await sink.recover(checkpoint: nil)
        _ = try await sink.deliver(DeliveryBatch(events: Self.stored([all, some, none, unchecked])))
        let lines = try sinkLines(directory)
        try #require(lines.count == 4)
        #expect(lines[0]["anonymous_id"] as? String == "anon \"7\"")
        #expect(lines[0]["group_id"] as? String == "acme")
        #expect(lines[0]["previous_id"] as? String == "old-1")
        let context = try #require(lines[0]["context"] as? [String: Any])
        #expect(context["locale"] as? String == "fr-FR")
        #expect(((context["app"] as? [String: Any])?["v"] as? NSNumber)?.intValue == 2)
        #expect(lines[1]["anonymous_id"] as? String == "a2")
        #expect(Set(lines[1].keys).isDisjoint(with: ["group_id", "previous_id", "context", "context_raw"]))
        #expect(Set(lines[2].keys).isDisjoint(with: ["anonymous_id", "group_id", "previous_id", "context", "context_raw"]))
        #expect(lines[3]["context_raw"] as? String == "[1]")
        #expect(lines[3]["undecodable"] == nil)
    }
}
