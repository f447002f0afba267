import Foundation
@testable import FerryAgent
import FerryIntegrationKit
@testable import FerryStorage
import FerryProtocol
import FerryTestKit
import Testing

@Suite("ferry deadletter list / show / drop (the real ferry binary, offline)")
struct DeadLetterCLITests {
    /// Writes a dead letter of `count` events for `sink` and returns it.
    static func write(_ store: DeadLetterStore, sink: String, count: Int, status: Int?) throws -> DeadLetter {
        let events = Events.frames(count).enumerated().map { index, frame in
            StoredEvent(position: LogPosition(segment: 1, offset: 16), size: frame.count + 16, acceptedAt: 1_700_000_000_000 + UInt64(index), frame: frame)
        }
        let error = SinkError(.permanent, "refused by the test", upstreamStatus: status, upstreamBody: status.map { "body \($0)" })
        let letter = DeadLetter(sink: sink, batch: DeliveryBatch(events: events), error: error, reason: "permanent", attempts: 1)
        try store.write(letter)
        return letter
    }

    @Test("a dead letter keeps each event's metadata (its origin): read back, the events are the stored ones, size included; a letter without it (earlier releases) still reads, without origin")
    func keepsMetadata() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = DeadLetterStore(dataDirectory: scratch.appending("data"))
        let origin = EventOrigin(uid: 1000, gid: 100, pid: 42, comm: "shop", exe: "/usr/bin/shop", unit: nil)
        let events = Events.frames(2).map { frame in
            StoredEvent(position: LogPosition(segment: 1, offset: 16), size: LogRecord.framedSize(frameSize: frame.count, metadataSize: origin.metadata.encoded.count),
                        acceptedAt: 1_700_000_000_000, frame: frame, metadata: origin.metadata)
        }
        let letter = DeadLetter(sink: "segment", batch: DeliveryBatch(events: events), error: SinkError(.permanent, "401"), reason: "permanent", attempts: 1)
        try store.write(letter)
        let read = try #require(try store.load(sink: "segment", id: letter.id))
        #expect(read.events.map(\.frame) == events.map(\.frame) && read.events.map(\.metadata) == events.map(\.metadata))
        #expect(read.events.map(\.size) == events.map(\.size) && read.events.map(\.acceptedAt) == events.map(\.acceptedAt))
        #expect(EventOrigin(metadata: read.events[0].metadata) == origin)

        // As the release before wrote it: frames without "metadata".
        var document = try #require(try JSONSerialization.jsonObject(with: Data(try letter.encoded())) as? [String: Any])
        document["frames"] = (document["frames"] as? [[String: Any]])?.map { $0.filter { $0.key != "metadata" } }
        let old = try DeadLetter(decoding: Array(try JSONSerialization.data(withJSONObject: document)), path: "old.json")
        #expect(old.events.map(\.frame) == events.map(\.frame) && old.events.allSatisfy { $0.metadata.fields.isEmpty })
        #expect(old.batch.events.count == 2)
    }

    @Test("list shows every sink's dead letters; show prints one (text and JSON); drop deletes exactly it")
    func listShowDrop() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let data = scratch.appending("data")
        let store = DeadLetterStore(dataDirectory: data)
        let first = try Self.write(store, sink: "http", count: 3, status: 400)
        let second = try Self.write(store, sink: "archive", count: 1, status: nil)

        let list = try await runCLI(["deadletter", "list", "--data-dir", data])
        #expect(list.status == .exited(0), "\(list)")
        #expect(list.stdout.contains("http  \(first.id)"), "\(list.stdout)")
        #expect(list.stdout.contains("3 events  permanent status 400: refused by the test"), "\(list.stdout)")
        #expect(list.stdout.contains("archive  \(second.id)"), "\(list.stdout)")
        #expect(list.stdout.contains("  1 event  permanent: "), "a one-event letter says 'event': \(list.stdout)")
        #expect(list.stdout.contains("2 dead letters"))

        let json = try await runCLI(["deadletter", "list", "--data-dir", data, "--sink", "http", "--json"])
        let rows = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [[String: Any]])
        #expect(rows.count == 1)
        #expect(rows.first?["id"] as? String == first.id)
        #expect(intValue(rows.first?["events"]) == 3)
        #expect(intValue(rows.first?["upstream_status"]) == 400)

        let show = try await runCLI(["deadletter", "show", first.id, "--data-dir", data])
        #expect(show.status == .exited(0), "\(show)")
        #expect(show.stdout.contains("upstream status  400"), "\(show.stdout)")
        #expect(show.stdout.contains("upstream body    body 400"), "\(show.stdout)")
        for event in first.events { #expect(show.stdout.contains(event.decodedID.description)) }

        let showJSON = try await runCLI(["deadletter", "show", first.id, "--data-dir", data, "--json"])
        let document = try #require(try JSONSerialization.jsonObject(with: Data(showJSON.stdout.utf8)) as? [String: Any])
        #expect(document["idempotency_key"] as? String == first.idempotencyKey)
        #expect((document["frames"] as? [Any])?.count == 3)

        let unknown = try await runCLI(["deadletter", "drop", "0190-nope", "--data-dir", data])
        #expect(unknown.status == .exited(1))
        #expect(unknown.stderr.contains("no dead letter 0190-nope"), "\(unknown)")
        let bad = try await runCLI(["deadletter", "show", "../etc/passwd", "--data-dir", data])
        #expect(bad.status != .exited(0))
        #expect(bad.stderr.contains("is not a dead-letter id"), "\(bad)")

        let drop = try await runCLI(["deadletter", "drop", first.id, "--data-dir", data])
        #expect(drop.status == .exited(0), "\(drop)")
        #expect(drop.stdout.contains("dropped \(first.id) (sink http)"))
        #expect(try store.ids(sink: "http").isEmpty)
        #expect(try store.ids(sink: "archive") == [second.id], "only the named dead letter went")

        let empty = try await runCLI(["deadletter", "list", "--data-dir", data, "--sink", "http"])
        #expect(empty.stdout.contains("no dead letters"), "\(empty)")
    }

    @Test("an id held by two sinks needs --sink")
    func ambiguousID() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let data = scratch.appending("data")
        let store = DeadLetterStore(dataDirectory: data)
        let letter = try Self.write(store, sink: "one", count: 1, status: 404)
        var copy = letter
        copy.sink = "two"
        try store.write(copy)
        let ambiguous = try await runCLI(["deadletter", "drop", letter.id, "--data-dir", data])
        #expect(ambiguous.status == .exited(1))
        #expect(ambiguous.stderr.contains("pass --sink"), "\(ambiguous)")
        let drop = try await runCLI(["deadletter", "drop", letter.id, "--data-dir", data, "--sink", "two"])
        #expect(drop.status == .exited(0), "\(drop)")
        #expect(try store.ids(sink: "one") == [letter.id])
    }
}
