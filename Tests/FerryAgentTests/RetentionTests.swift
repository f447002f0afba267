#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
@testable import FerryAgent
import FerryMetrics
import FerryTestKit
@testable import FerryStorage
@testable import FerryZeroMQIngest
import FerryProtocol
import FerryThreads
import Foundation
import Synchronization
import Testing

/// Drives the commit thread directly: submit ingest batches, collect the committed results.
final class PipelineHarness: Sendable {
    let scratch: ScratchDirectory
    let log: SegmentedLog
    let pipeline: CommitPipeline
    let counters = AgentMetrics(backend: PrometheusBackend().agentBackend)
    let configuration: AgentConfiguration
    /// What the pipeline hands the socket thread: acks and bus messages (this harness drains them).
    private let wakeup: SocketWakeup
    private let acks: AckQueue
    private let bus: EventBus
    private let pending = Locked<[CommittedBatch]>([])
    let droppedOnBus = Locked<[EventID]>([])
    private let nextRequest = Atomic<UInt32>(1)

    /// A harness over a fresh log. Its set-up creates the log, the consent files and the commit
    /// thread's segment and fsyncs them, so it runs off the cooperative pool, as the agent's
    /// start-up does on its I/O thread (docs/FAULTS.md, §9).
    static func start(log logConfiguration: LogConfiguration) async throws -> PipelineHarness {
        try await offPool { try PipelineHarness(log: logConfiguration) }
    }

    private init(log logConfiguration: LogConfiguration, dedup: DedupWindow = DedupWindow(maxEntries: 100_000, maxAgeMilliseconds: 3_600_000)) throws {
        scratch = try ScratchDirectory()
        configuration = AgentConfiguration(runtimeDirectory: scratch.appending("run"), dataDirectory: scratch.path,
                                           log: logConfiguration)
        var report = RecoveryReport()
        log = try SegmentedLog(directory: scratch.appending("segments"), configuration: logConfiguration, cursor: nil,
                               logger: quietLogger, recovered: &report) { _, _ in }
        wakeup = try SocketWakeup()
        acks = AckQueue(wakeup: wakeup)
        bus = EventBus(wakeup: wakeup)
        // As a subscriber to `dropped` would: the pipeline publishes dropped events only then.
        bus.updateSubscription(Array("dropped".utf8), subscribe: true)
        pipeline = CommitPipeline(log: log, configuration: configuration, counters: counters, bus: bus,
                                  committedSignals: [], logger: quietLogger)
        let (_, worker, seeded) = try AgentStartup.loadConsent(configuration: configuration, log: log, dedup: dedup,
                                                             bus: bus, logger: quietLogger)
        try pipeline.start(dedup: seeded, sessions: AgentStartup.emptySessionTable(configuration.dedup), consent: worker.take())
    }

    /// Moves what the queues hold into `pending` (acks) and `droppedOnBus`, waiting up to
    /// `timeout` on their wake-up pipe when the acks are empty.
    private static func drain(_ acks: AckQueue, _ bus: EventBus, _ wakeup: SocketWakeup, into pending: Locked<[CommittedBatch]>,
                              dropped: Locked<[EventID]>, timeout: Int32) {
        var answers = acks.take()
        if answers.isEmpty {
            var descriptor = pollfd(fd: wakeup.pipe.readEnd, events: Int16(POLLIN), revents: 0)
            _ = poll(&descriptor, 1, timeout)
            wakeup.pipe.drain()
            answers = acks.take()
        }
        for batches in answers { pending.withLock { $0 += batches } }
        bus.take { topic, json in
            guard topic == .dropped else { return }
            let object = try? JSONSerialization.jsonObject(with: Data(json)) as? [String: Any]
            if let text = object?["id"] as? String, let id = EventID(text) { dropped.withLock { $0.append(id) } }
        }
    }

    /// Submits one message of `frames` and waits for its result.
    func submit(_ frames: [[UInt8]]) async throws -> [AckEntry] {
        let request = nextRequest.add(1, ordering: .relaxed).oldValue
        let items: [IngestBatch.Item] = try frames.map { .event(try EventHeader($0), frame: $0) }
        #expect(pipeline.submit(IngestBatch(replyTo: acks, route: AckRoute(peer: [1, 2, 3], requestID: request), items: items)))
        let acks = self.acks, bus = self.bus, wakeup = self.wakeup, pending = self.pending, dropped = droppedOnBus
        let batch = try await offPool { () throws -> CommittedBatch in
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline {
                if let hit = pending.withLock({ list -> CommittedBatch? in
                    guard let index = list.firstIndex(where: { $0.route.requestID == request }) else { return nil }
                    return list.remove(at: index)
                }) { return hit }
                Self.drain(acks, bus, wakeup, into: pending, dropped: dropped, timeout: 200)
            }
            throw TestFailure("no commit result for request \(request)")
        }
        #expect(batch.route.peer == [1, 2, 3])
        #expect(batch.entries.count == frames.count)
        #expect(batch.entries.map(\.id) == frames.map(Events.id(of:)))
        return batch.entries
    }

    /// Commits one message of `frames` as an arriving thread does (``CommitPipeline/commit(_:)``,
    /// on this thread); returns how many batches it took and the answers queued for the socket
    /// thread by the time it returned (none when it handed the message to the commit thread).
    func commitHere(_ frames: [[UInt8]]) throws -> (taken: Int, answered: [CommittedBatch]) {
        let request = nextRequest.add(1, ordering: .relaxed).oldValue
        let items: [IngestBatch.Item] = try frames.map { .event(try EventHeader($0), frame: $0) }
        let taken = pipeline.commit([IngestBatch(replyTo: acks, route: AckRoute(peer: [1, 2, 3], requestID: request), items: items)])
        return (taken, acks.take().flatMap { $0 })
    }

    func stop() async {
        await pipeline.stop()
        scratch.remove()
    }

    var segmentBytesOnDisk: Int64 { segmentFiles(scratch.appending("segments")).map(fileSize).reduce(0, +) }
}

@Suite("Retention and the commit pipeline")
struct RetentionTests {
    static let segment: Int64 = 4096
    static let cap: Int64 = 8192

    @Test("reject: once the cap is reached new events are rejected `full`; nothing accepted is lost",
          arguments: [60, 150, 333])
    func rejectWhenFull(padding: Int) async throws {
        let harness = try await PipelineHarness.start(log: LogConfiguration(segmentMaxBytes: Self.segment, retentionMaxBytes: Self.cap,
                                                                fullPolicy: .reject))
        var accepted: [[UInt8]] = []
        var rejected: [[UInt8]] = []
        for i in 1...200 {
            let frame = Events.make(UInt64(i), padding: padding).encoded()
            let entry = try #require(try await harness.submit([frame]).first)
            switch entry.status {
            case .accepted:
                #expect(rejected.isEmpty, "an event was accepted after the queue was full")
                accepted.append(frame)
            case .rejected:
                #expect(entry.reason == .full)
                rejected.append(frame)
            default:
                Issue.record("unexpected status \(entry.status)")
            }
            #expect(harness.log.status().bytes <= Self.cap, "log holds \(harness.log.status().bytes) bytes after event \(i)")
            #expect(harness.segmentBytesOnDisk <= Self.cap, "segment files hold \(harness.segmentBytesOnDisk) bytes after event \(i)")
            if rejected.count >= 5 { break }
        }
        #expect(accepted.count > 10)
        #expect(rejected.count == 5)
        let counters = harness.counters.snapshot
        #expect(counters["rejected"] == 5)
        #expect(counters["rejected_full"] == 5)
        #expect(counters["accepted"] == accepted.count)
        #expect(counters["dropped"] == 0)
        #expect(try readAll(harness.log).map(\.decodedID) == idsOf(accepted))

        // A rejected event was not remembered by dedup: re-sent, it is rejected again (not duplicate).
        #expect(try await harness.submit([rejected[0]]).map(\.status) == [.rejected])
        // Once delivered segments are deleted there is room again, and it is accepted.
        let all = try harness.log.read(from: harness.log.cursor, maxEvents: 10_000, maxBytes: 1 << 30)
        harness.log.markDelivered(all.events, next: all.next)
        #expect(try await harness.submit([rejected[0]]).map(\.status) == [.accepted])
        #expect(harness.log.status().bytes <= Self.cap)
        // The ids of the deleted segment live on in the dedup snapshot.
        let snapshot = try #require(DedupWindow.parseSnapshot(try readBytes(harness.scratch.appending("dedup.snapshot"))))
        #expect(Set(snapshot.map { $0.id }).isSuperset(of: accepted.map(Events.id(of:))))
        #expect(try await harness.submit([accepted[0]]).map(\.status) == [.duplicate])
        await harness.stop()
    }

    @Test("drop-oldest: the queue never exceeds the cap, the oldest events go and are counted",
          arguments: [60, 150, 333])
    func dropOldest(padding: Int) async throws {
        let harness = try await PipelineHarness.start(log: LogConfiguration(segmentMaxBytes: Self.segment, retentionMaxBytes: Self.cap,
                                                                fullPolicy: .dropOldest))
        var sent: [[UInt8]] = []
        for i in 1...40 {
            let frames = (0..<3).map { Events.make(UInt64(i * 3 + $0), padding: padding).encoded() }
            let entries = try await harness.submit(frames)
            #expect(entries.allSatisfy { $0.status == .accepted }, "batch \(i): \(entries.map(\.status))")
            sent += frames
            #expect(harness.log.status().bytes <= Self.cap, "log holds \(harness.log.status().bytes) bytes after batch \(i)")
            #expect(harness.segmentBytesOnDisk <= Self.cap, "segment files hold \(harness.segmentBytesOnDisk) bytes after batch \(i)")
        }
        let dropped = (harness.counters.snapshot["dropped"] ?? 0)
        let status = harness.log.status()
        #expect(dropped > 0)
        #expect(status.droppedEvents == dropped)
        #expect(harness.counters.snapshot["accepted"] == sent.count)
        #expect(status.undeliveredEvents + dropped == sent.count)
        // What is left is the newest events, in order, with nothing missing in between.
        let left = try readAll(harness.log, from: harness.log.cursor).map(\.decodedID)
        #expect(left == idsOf(Array(sent.suffix(left.count))))
        #expect(left.count == status.undeliveredEvents)
        // The bus was told exactly which events were dropped.
        #expect(harness.droppedOnBus.withLock { $0 } == sent.prefix(dropped).map(Events.id(of:)))
        // Dropped ids stay in the dedup window (a re-send is still a duplicate).
        #expect(try await harness.submit([sent[0]]).map(\.status) == [.duplicate])
        await harness.stop()
    }

    /// Paddings for which the event that no longer fits in the active segment still fits under
    /// the cap by its own size, but not with the header of the segment it opens.
    @Test("the cap also holds when the next event opens a new segment",
          arguments: [LogConfiguration.FullPolicy.reject, .dropOldest], [88, 191])
    func capIncludesNewSegmentHeader(policy: LogConfiguration.FullPolicy, padding: Int) async throws {
        let harness = try await PipelineHarness.start(log: LogConfiguration(segmentMaxBytes: Self.segment, retentionMaxBytes: Self.cap,
                                                                fullPolicy: policy))
        var worst: Int64 = 0
        for i in 1...80 {
            let entries = try await harness.submit([Events.make(UInt64(i), padding: padding).encoded()])
            if entries.first?.status != .accepted { break }
            worst = max(worst, harness.segmentBytesOnDisk)
        }
        #expect(worst <= Self.cap, "the segment files reached \(worst) bytes with retentionMaxBytes \(Self.cap)")
        await harness.stop()
    }

    @Test("an event that alone exceeds what the queue may hold is rejected `full` even under drop-oldest")
    func tooBigForTheQueue() async throws {
        let harness = try await PipelineHarness.start(log: LogConfiguration(segmentMaxBytes: Self.segment, retentionMaxBytes: Self.cap,
                                                                fullPolicy: .dropOldest))
        let small = Events.make(1).encoded()
        #expect(try await harness.submit([small]).map(\.status) == [.accepted])
        let huge = Events.make(2, padding: Int(Self.cap)).encoded()
        let entry = try #require(try await harness.submit([huge]).first)
        #expect(entry.status == .rejected)
        #expect(entry.reason == .full)
        #expect(try readAll(harness.log).map(\.decodedID) == idsOf([small]))
        await harness.stop()
    }

    @Test("within one message: duplicates of earlier events and of each other are answered `duplicate`")
    func dedupWithinAndAcrossMessages() async throws {
        let harness = try await PipelineHarness.start(log: LogConfiguration())
        let a = Events.make(1).encoded(), b = Events.make(2).encoded()
        #expect(try await harness.submit([a]).map(\.status) == [.accepted])
        #expect(try await harness.submit([b, a, b]).map(\.status) == [.accepted, .duplicate, .duplicate])
        #expect(try readAll(harness.log).map(\.decodedID) == idsOf([a, b]))
        #expect(harness.counters.snapshot["duplicate"] == 2)
        #expect(harness.counters.snapshot["commits"] == 2)
        // A message of only duplicates needs no fsync.
        #expect(try await harness.submit([a, b]).map(\.status) == [.duplicate, .duplicate])
        #expect(harness.counters.snapshot["commits"] == 2)
        await harness.stop()
    }

    @Test("a failed group commit rejects the whole group and forgets its ids; a re-send is accepted",
          .enabled(if: FileManager.default.fileExists(atPath: "/dev/full")))
    func failedCommitRejectsGroup() async throws {
        let harness = try await PipelineHarness.start(log: LogConfiguration())
        let first = Events.frames(2)
        #expect(try await harness.submit(first).map(\.status) == [.accepted, .accepted])
        let path = harness.scratch.appending("segments") + "/" + SegmentedLog.fileName(for: 1)
        let fds = openDescriptors(of: path)
        try #require(fds.count == 1, "expected the commit thread's descriptor on \(path), found \(fds)")
        try breakWrites(fd: fds[0])
        let group = Events.frames(3)
        let failed = try await harness.submit(group + [group[0]])
        try restoreWrites(fd: fds[0], path: path)
        #expect(failed.map(\.status) == [.rejected, .rejected, .rejected, .rejected])
        #expect(failed.allSatisfy { $0.reason == .full }, "ENOSPC maps to `full`: \(failed.map(\.reason))")
        #expect(try readAll(harness.log).map(\.decodedID) == idsOf(first))
        #expect(harness.log.status().undeliveredEvents == 2)

        // The ids were forgotten: the client's re-send is accepted, once.
        #expect(try await harness.submit(group).map(\.status) == [.accepted, .accepted, .accepted])
        #expect(try readAll(harness.log).map(\.decodedID) == idsOf(first + group))
        let reopened = try openLog(harness.scratch.appending("segments"))
        #expect(reopened.report.isClean)
        #expect(try readAll(reopened.log).map(\.decodedID) == idsOf(first + group))
        await harness.stop()
    }
}
