import FerryProtocol
import FerryStorage
import FerryThreads
import Foundation
import Synchronization

/// The agent's erasure outbox, `<data>/consent/erasures.json`: every upstream erasure
/// `ferry forget --user` recorded, and where it stands with each sink it is for (docs/CONSENT.md,
/// "Erasure upstream").
///
/// It is the one owner of that state: the consent worker adds requests and settles outcomes
/// (on the commit thread, each within a journaled consent change), each sink's
/// ``ErasureSender`` reads its pending requests and counts its attempts (on the sink's thread),
/// `forget_status` reads it (on the control thread). Every change is written whole, atomically
/// (temp file, fsync, rename, fsync of the directory), under its lock, before it is visible.
///
/// The user id is kept only while a request is pending with some sink (it has to be sent); once
/// every sink is done it is removed, and the request is kept, without it, to be shown (the newest
/// ``ErasureStatusReply/keptFinished``).
package final class ErasureOutbox: Sendable {
    /// A sink erasures can be sent to, as the outbox knows it.
    package struct SinkInfo: Sendable, Hashable {
        /// Its name.
        package var name: String
        /// Its `batch.maxBytes` (``ErasureTargets``).
        package var batchMaxBytes: Int

        /// Creates the entry.
        package init(name: String, batchMaxBytes: Int) {
            self.name = name
            self.batchMaxBytes = batchMaxBytes
        }
    }

    /// One request on disk: its status, and the user while any sink has it pending.
    struct Entry: Codable, Sendable, Hashable {
        var userID: String?
        var request: ErasureRequestStatus

        private enum CodingKeys: String, CodingKey { case userID = "user_id", request }
    }

    private struct Contents: Codable, Sendable {
        var version = 1
        var entries: [Entry] = []
    }

    /// The file's path.
    package let path: String
    /// The configured sinks, in order.
    package let sinks: [SinkInfo]
    private let contents: Mutex<Contents>
    /// Signalled when a request is added (one signal per sender).
    private let listeners = Mutex<[AsyncSignal]>([])

    /// Opens the outbox at `path` (empty when the file does not exist). A file that cannot be
    /// read stops the agent (``AgentError`` code `corrupt`), like the consent journal: dropping it
    /// would drop erasures owed to upstreams.
    package init(path: String, sinks: [SinkInfo]) throws {
        self.path = path
        self.sinks = sinks
        try FileIO.unlink(path + ".tmp")
        var loaded = Contents()
        if let bytes = try FileIO.readFile(path) {
            do {
                loaded = try JSONDecoder().decode(Contents.self, from: Data(bytes))
            } catch {
                throw AgentError(code: .corrupt, message: "the erasure outbox \(path) is unreadable: \(error)")
            }
        }
        contents = Mutex(loaded)
    }

    /// Wakes `signal` whenever a request is added.
    package func subscribe(_ signal: AsyncSignal) {
        listeners.withLock { $0.append(signal) }
    }

    // MARK: Reading

    /// Every request, oldest first.
    package var statuses: [ErasureRequestStatus] { contents.withLock { $0.entries.map(\.request) } }

    /// How many (request, sink) pairs are pending: `ferry_erasures_pending`.
    package var pendingCount: Int {
        contents.withLock { $0.entries.reduce(0) { $0 + $1.request.sinks.count { $0.state == .pending } } }
    }

    /// Whether request `id` is in the outbox (pending or finished).
    package func contains(_ id: String) -> Bool { contents.withLock { $0.entries.contains { $0.request.id == id } } }

    /// The requests pending with `sink`, oldest first.
    package func pending(for sink: String) -> [SinkErasure] {
        contents.withLock { contents in
            contents.entries.compactMap { entry in
                guard let user = entry.userID, entry.request.sinks.contains(where: { $0.sink == sink && $0.state == .pending }) else {
                    return nil
                }
                return SinkErasure(id: entry.request.id, userID: user, requestedAt: entry.request.requestedAt)
            }
        }
    }

    /// Request `id`'s state with `sink`, if it has one.
    package func status(of id: String, sink: String) -> ErasureSinkStatus? {
        contents.withLock { $0.entries.first { $0.request.id == id }?.request.sinks.first { $0.sink == sink } }
    }

    // MARK: Changing

    /// Adds `request` for `sinks`, unless a request with its id is already there (finishing a
    /// forget again after a crash adds it once). A request for no sink is not kept. Returns
    /// whether it added.
    @discardableResult
    package func add(_ request: SinkErasure, sinks: [String]) throws -> Bool {
        guard !sinks.isEmpty else { return false }
        let added = try change { contents in
            guard !contents.entries.contains(where: { $0.request.id == request.id }) else { return false }
            contents.entries.append(Entry(userID: request.userID, request: ErasureRequestStatus(
                id: request.id, requestedAt: request.requestedAt, sinks: sinks.map { ErasureSinkStatus(sink: $0) })))
            return true
        }
        if added { listeners.withLock { $0 }.forEach { $0.signal() } }
        return added
    }

    /// Counts a failed attempt of request `id` at `sink` that will be retried.
    package func recordAttempt(_ id: String, sink: String, error: String, at now: UInt64) throws {
        try change { contents in
            guard let (entry, index) = Self.locate(id, sink, in: contents), contents.entries[entry].request.sinks[index].state == .pending else {
                return false
            }
            contents.entries[entry].request.sinks[index].attempts += 1
            contents.entries[entry].request.sinks[index].lastError = error
            contents.entries[entry].request.sinks[index].updatedAt = now
            return true
        }
    }

    /// Records the outcome of request `id` at `sink` (its last attempt included), unless it
    /// already has one (settling again after a crash changes nothing). Once every sink is done
    /// the user id is removed. Returns whether it changed anything.
    @discardableResult
    package func settle(_ outcome: ErasureOutcome) throws -> Bool {
        try change { contents in
            guard let (entry, index) = Self.locate(outcome.id, outcome.sink, in: contents),
                  contents.entries[entry].request.sinks[index].state == .pending else { return false }
            var status = contents.entries[entry].request.sinks[index]
            status.state = outcome.state
            status.attempts = max(status.attempts, outcome.attempts)
            status.lastError = outcome.error ?? status.lastError
            status.reference = outcome.reference
            status.updatedAt = outcome.at
            contents.entries[entry].request.sinks[index] = status
            if contents.entries[entry].request.done {
                contents.entries[entry].userID = nil
                Self.trimFinished(&contents)
            }
            return true
        }
    }

    /// Keeps the newest ``ErasureStatusReply/keptFinished`` finished requests.
    private static func trimFinished(_ contents: inout Contents) {
        var finished = contents.entries.count { $0.request.done }
        guard finished > ErasureStatusReply.keptFinished else { return }
        contents.entries.removeAll { entry in
            guard entry.request.done, finished > ErasureStatusReply.keptFinished else { return false }
            finished -= 1
            return true
        }
    }

    private static func locate(_ id: String, _ sink: String, in contents: Contents) -> (Int, Int)? {
        guard let entry = contents.entries.firstIndex(where: { $0.request.id == id }),
              let index = contents.entries[entry].request.sinks.firstIndex(where: { $0.sink == sink }) else { return nil }
        return (entry, index)
    }

    /// Applies `body` to a copy; when it reports a change, writes the copy durably and only then
    /// makes it the state.
    @discardableResult
    private func change(_ body: (inout Contents) -> Bool) throws -> Bool {
        try contents.withLock { (current: inout Contents) throws -> Bool in
            var copy = current
            guard body(&copy) else { return false }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            try FileIO.writeAtomically(Array(try encoder.encode(copy)), to: path)
            current = copy
            return true
        }
    }
}

/// What became of one erasure request at one sink: the change the consent worker journals,
/// audits and settles in the outbox.
package struct ErasureOutcome: Sendable, Hashable, Codable {
    /// The request.
    package var id: String
    /// The sink.
    package var sink: String
    /// `sent` or `failed`.
    package var state: ErasureSinkStatus.State
    /// Attempts made, the last one included.
    package var attempts: Int
    /// The upstream's reference for the request (Segment's `regulateId`), when sent.
    package var reference: String?
    /// Why it failed, when failed.
    package var error: String?
    /// Unix ms of the outcome.
    package var at: UInt64

    /// Creates an outcome.
    package init(id: String, sink: String, state: ErasureSinkStatus.State, attempts: Int, reference: String? = nil,
                 error: String? = nil, at: UInt64 = WallClock.unixMilliseconds()) {
        self.id = id
        self.sink = sink
        self.state = state
        self.attempts = attempts
        self.reference = reference
        self.error = error
        self.at = at
    }

    /// The audit entry's `new` value: the request, the sink, the outcome and its detail, never
    /// the user.
    var auditFields: [String: Any] {
        var fields: [String: Any] = ["request": id, "sink": sink, "outcome": state.rawValue, "attempts": attempts]
        if let reference { fields["reference"] = reference }
        if let error { fields["error"] = error }
        return fields
    }
}
