import FerryProtocol
import FerryQuality
import FerryStorage
import FerryThreads
import Synchronization

/// `quarantine_replay` and `quarantine_drop` (docs/QUALITY.md, "Quarantine"): judges quarantined
/// events again against the plan in effect (their frames were redacted when they were
/// quarantined, and are not redacted twice) and hands those that pass to the commit
/// thread like any ingested event (consent, the id window, the group commit), or deletes
/// entries for good.
///
/// A replayed event is removed from the quarantine only once its ack says the log holds it
/// (`accepted`, or `duplicate`: an earlier replay stored it) or consent refuses it for good
/// (`blocked`, `suppressed`). `kill -9` between the log's write and the removal (crash point
/// `quarantine.replayed`) leaves the entry, and the replay marker written before the events were
/// submitted (the log's end then, and their ids): the next replay finds them in the log after
/// that position and removes them (`duplicate`) before anything is submitted — stored once,
/// however much later it runs (within the window the id window would answer `duplicate` too).
struct QuarantineReplayer: Sendable {
    /// Events per batch handed to the commit thread.
    static let batchSize = 256

    /// Replays `id` (nil: every entry) of `running`'s quarantine.
    func replay(id: String?, running: RunningAgent) async -> QuarantineReply {
        let store = running.quarantine
        let ids: [EventID]
        switch await Self.select(id, in: store) {
        case .ids(let selected): ids = selected
        case .refused(let refusal): return refusal
        }
        var results: [QuarantineReply.Result] = []
        // A replay cut short: the events it already stored leave the quarantine first.
        let settled = await Self.settleInterrupted(running)
        results += settled.results
        let stage = running.quality.stage
        var passing: [(QuarantinedEvent, IngestBatch.Item)] = []
        for id in ids where !settled.removed.contains(id) {
            let loaded: QuarantinedEvent?
            do {
                loaded = try await BlockingExecutor.runDetached(name: "ferry-quarantine-read") { try store.load(id) }
            } catch {
                results.append(.init(id: id.description, outcome: "corrupt", error: "\(error)"))
                continue
            }
            guard let entry = loaded else { continue }
            switch Self.judge(entry, stage: stage) {
            case .kept(let result): results.append(result)
            case .passes(let item): passing.append((entry, item))
            }
        }
        var start = 0
        while start < passing.count {
            let chunk = Array(passing[start..<min(start + Self.batchSize, passing.count)])
            start += chunk.count
            results += await commit(chunk, running: running)
        }
        results.sort { $0.id < $1.id }
        return QuarantineReply(ok: true, results: results)
    }

    /// Deletes `id` (nil: every entry) of `running`'s quarantine.
    func drop(id: String?, running: RunningAgent) async -> QuarantineReply {
        let store = running.quarantine
        let ids: [EventID]
        switch await Self.select(id, in: store) {
        case .ids(let selected): ids = selected
        case .refused(let refusal): return refusal
        }
        do {
            _ = try await BlockingExecutor.runDetached(name: "ferry-quarantine-drop") { try store.remove(ids) }
        } catch {
            return QuarantineReply(ok: true, results: ids.map { .init(id: $0.description, outcome: "failed", error: "\(error)") })
        }
        return QuarantineReply(ok: true, results: ids.map { .init(id: $0.description, outcome: "dropped") })
    }

    /// The entries a request names, or its refusal.
    private enum Selection {
        case ids([EventID])
        case refused(QuarantineReply)
    }

    /// The ids a request names: `id`, or every entry.
    private static func select(_ id: String?, in store: QuarantineStore) async -> Selection {
        if let id {
            guard let parsed = EventID(id) else { return .refused(.refused("\"\(id)\" is not an event id")) }
            let exists = (try? await BlockingExecutor.runDetached(name: "ferry-quarantine-read") { try store.ids().contains(parsed) }) ?? false
            return exists ? .ids([parsed]) : .refused(.refused("no quarantined event \(id) in \(store.directory)"))
        }
        do {
            return .ids(try await BlockingExecutor.runDetached(name: "ferry-quarantine-read") { try store.ids() })
        } catch {
            return .refused(.refused("cannot read \(store.directory): \(error)"))
        }
    }

    /// One entry judged again.
    enum Judged {
        /// It passes: the item to store.
        case passes(IngestBatch.Item)
        /// It stays, with its result (`violating`, `corrupt`).
        case kept(QuarantineReply.Result)
    }

    /// One entry judged again by the plan in effect (not redacted again: it was when it was
    /// quarantined): the stored frame when it passes, else its `violating` result.
    static func judge(_ entry: QuarantinedEvent, stage: QualityStage?) -> Judged {
        let id = entry.id.description
        guard let header = try? EventHeader(entry.frame) else {
            return .kept(.init(id: id, outcome: "corrupt", error: "the stored frame does not decode"))
        }
        guard let stage else { return .passes(.event(header, frame: entry.frame)) }
        guard let event = try? WireEvent(decoding: entry.frame) else {
            return .kept(.init(id: id, outcome: "corrupt", error: "the stored frame does not decode"))
        }
        // The stored frame was redacted when it was quarantined: the plan alone judges it now.
        let violations = stage.planOnly.judge(event).violations
        guard violations.isEmpty else {
            return .kept(.init(id: id, outcome: "violating", violations: violations.map(\.json)))
        }
        return .passes(.event(header, frame: entry.frame))
    }

    /// The marker of a replay cut short (``QuarantineStore/ReplayMarker``): each of its events
    /// still quarantined that the log holds after the marker's position is removed (answered
    /// `duplicate`); then the marker is deleted.
    static func settleInterrupted(_ running: RunningAgent) async -> (results: [QuarantineReply.Result], removed: Set<EventID>) {
        let store = running.quarantine, log = running.log
        let found = try? await BlockingExecutor.runDetached(name: "ferry-quarantine-marker") { () throws -> [EventID] in
            guard let marker = try store.loadMarker() else { return [] }
            let waiting = Set(marker.ids).intersection(try store.ids())
            var stored: [EventID] = []
            if !waiting.isEmpty {
                try log.forEachRecord(from: marker.from) { event in
                    if !event.isErased, waiting.contains(event.decodedID) { stored.append(event.decodedID) }
                }
                try store.remove(stored)
            }
            try store.clearMarker()
            return stored
        }
        let removed = found ?? []
        return (removed.map { .init(id: $0.description, outcome: "duplicate") }, Set(removed))
    }

    /// Hands `chunk` to the commit thread (each event with its own origin), waits for the
    /// answer, publishes the outcomes on the bus and removes what the log now holds. A marker
    /// naming the chunk is durable before it is submitted and deleted once it is settled.
    private func commit(_ chunk: [(QuarantinedEvent, IngestBatch.Item)], running: RunningAgent) async -> [QuarantineReply.Result] {
        let pipeline = running.pipeline
        let store = running.quarantine
        let marker = QuarantineStore.ReplayMarker(from: running.log.endPosition, ids: chunk.map(\.0.id))
        do {
            try await BlockingExecutor.runDetached(name: "ferry-quarantine-marker") { try store.writeMarker(marker) }
        } catch {
            return chunk.map { .init(id: $0.0.id.description, outcome: "failed", error: "cannot write the replay marker: \(error)") }
        }
        let answers: [CommittedBatch] = await withCheckedContinuation { continuation in
            let destination = ReplayDestination(expected: chunk.count) { continuation.resume(returning: $0) }
            for (index, (entry, item)) in chunk.enumerated() {
                let origin = entry.origin.withUnsafeBytes { EventOrigin(metadata: RecordMetadata(decoding: $0)) }
                let batch = IngestBatch(replyTo: destination, route: AckRoute(address: [], tag: UInt64(index)), origin: entry.origin,
                                        uid: origin?.uid, items: [item])
                if !pipeline.submit(batch) { destination.fail(index) }
            }
        }
        var results: [QuarantineReply.Result] = []
        var settled: [EventID] = []
        for (index, (entry, _)) in chunk.enumerated() {
            let id = entry.id.description
            guard let answer = answers.first(where: { $0.route.tag == UInt64(index) }), let ack = answer.entries.first else {
                results.append(.init(id: id, outcome: "failed", error: "the agent is shutting down"))
                continue
            }
            pipeline.bus.publishOutcomes(of: answer)
            switch ack.status {
            case .accepted:
                results.append(.init(id: id, outcome: "stored"))
                settled.append(entry.id)
            case .duplicate:
                results.append(.init(id: id, outcome: "duplicate"))
                settled.append(entry.id)
            case .blocked, .suppressed:
                results.append(.init(id: id, outcome: "blocked", error: ack.reason.description))
                settled.append(entry.id)
            case .rejected:
                results.append(.init(id: id, outcome: "failed", error: "rejected: \(ack.reason.description)"))
            }
        }
        let removing = settled
        do {
            try await BlockingExecutor.runDetached(name: "ferry-quarantine-remove") {
                if !removing.isEmpty {
                    try CrashPoints.reach("quarantine.replayed")
                    try store.remove(removing)
                }
                try store.clearMarker()
            }
        } catch {
            let failed = Set(settled.map(\.description))
            for index in results.indices where failed.contains(results[index].id) {
                results[index] = .init(id: results[index].id, outcome: "failed",
                                       error: "stored, but not removed from the quarantine (a replay answers it duplicate): \(error)")
            }
        }
        return results
    }
}

/// The destination of a replay's batches: gathers their answers and resumes the replay once
/// every one is back (answers come on the commit thread; the completion only resumes).
private final class ReplayDestination: AckDestination {
    private struct State {
        var answers: [CommittedBatch] = []
        var missing: Int
        var completion: (@Sendable ([CommittedBatch]) -> Void)?
    }

    private let state: Mutex<State>

    init(expected: Int, completion: @escaping @Sendable ([CommittedBatch]) -> Void) {
        state = Mutex(State(missing: expected, completion: completion))
        if expected == 0 { finish() }
    }

    func deliver(_ answers: [CommittedBatch]) {
        state.withLock {
            $0.answers += answers
            $0.missing -= answers.count
        }
        finish()
    }

    /// Batch `index` was not taken (the pipeline is stopping): no answer will come for it.
    func fail(_ index: Int) {
        state.withLock { $0.missing -= 1 }
        finish()
    }

    private func finish() {
        let done = state.withLock { state -> ([CommittedBatch], @Sendable ([CommittedBatch]) -> Void)? in
            guard state.missing <= 0, let completion = state.completion else { return nil }
            state.completion = nil
            return (state.answers, completion)
        }
        if let (answers, completion) = done { completion(answers) }
    }
}
