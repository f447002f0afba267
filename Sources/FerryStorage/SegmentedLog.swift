#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol
import Logging
import Synchronization

/// A segmented append-only log of events on disk.
///
/// Layout: `<directory>/<index, 20 digits>.seg`, each starting with a 16-byte header
/// (`FERRYSG1`, index). The writer thread appends through a ``LogWriter``; readers read committed
/// bytes only. All bookkeeping shared between threads lives behind one lock.
///
/// Every consumer (one per sink, by name) has its own delivery cursor; a segment can be deleted
/// only once every consumer's cursor has passed it.
package final class SegmentedLog: Sendable {
    /// The directory holding the segment files.
    package let directory: String
    package let configuration: LogConfiguration
    let logger: Logger
    // Internal, not private: the extensions in SegmentedLog+*.swift (reading, erasure, retention,
    // usage) work on the same state under the same lock.
    let state: Mutex<State>

    struct State {
        var segments: [SegmentInfo]
        /// Per consumer (sink name): everything before this position has been delivered to it.
        var cursors: [String: LogPosition]
        var nextIndex: UInt64
        var droppedRecords: Int = 0
        /// Per consumer: erased records it has not passed yet (they hold no event).
        var erasedPending: [String: Int] = [:]
        /// Bytes on disk by sender uid: the sum of the segments' ``SegmentInfo/uidBytes``.
        var uidBytes: [UInt32: Int64] = [:]

        mutating func forget(_ segment: SegmentInfo) {
            for (uid, bytes) in segment.uidBytes {
                uidBytes[uid, default: 0] -= bytes
                if uidBytes[uid]! <= 0 { uidBytes[uid] = nil }
            }
        }
    }

    /// The cursors recovery started from, for counting delivered records of segments verified later.
    let recoveredCursors: [String: LogPosition?]

    /// Size of the segment file header (``SegmentFile/headerSize``).
    package static let segmentHeaderSize = SegmentFile.headerSize
    package static let segmentMagic = SegmentFile.magic

    /// The file name of segment `index` (``SegmentFile/fileName(for:)``).
    package static func fileName(for index: UInt64) -> String { SegmentFile.fileName(for: index) }

    package static func segmentHeader(index: UInt64) -> [UInt8] { SegmentFile.header(index: index) }

    /// The consumer name used by the single-cursor API (the default file sink's name).
    package static let defaultConsumer = "file"

    /// Opens the log with one consumer, ``defaultConsumer``, resuming from `cursor`.
    package convenience init(
        directory: String, configuration: LogConfiguration, cursor: LogPosition?, logger: Logger,
        recovered report: inout RecoveryReport, dedupWindow: Int = .max, seedDedup: (EventID, UInt64) -> Void
    ) throws {
        try self.init(directory: directory, configuration: configuration, cursors: [Self.defaultConsumer: cursor],
                      logger: logger, recovered: &report, dedupWindow: dedupWindow, seedDedup: seedDedup)
    }

    /// A recovered record that belongs to a client session, for rebuilding the session table.
    package struct SessionRecord: Sendable {
        package var session: EventID
        package var sequence: UInt64
        package var acceptedAt: UInt64
        package var position: LogPosition
        /// The client's source name ("" for an erased record).
        package var source: String
    }

    /// Opens (or creates) the log in `directory` and recovers it: a torn tail of the last segment
    /// is truncated, damaged records elsewhere are skipped. `cursors` names every consumer (sink)
    /// with the position it resumes from (`nil`: the oldest segment). `seedDedup` is called with
    /// the id and acceptedAt of recovered events, oldest first.
    ///
    /// Start-up work does not grow with the backlog: segments are scanned newest first only until
    /// the last one and `dedupWindow` records have been seen (the most a dedup window can hold; only
    /// those are passed to `seedDedup`), and back to `sessionsFrom` (where the persisted session
    /// table stops covering the log; every record from there that carries a session is passed to
    /// `seedSession`, oldest first). Older sealed segments are opened unscanned, readable at once
    /// (every read CRC-checks its records and resynchronises past damage), and counted and checked
    /// by ``verifySealedSegments(shouldStop:)``, which the caller runs in the background. With the
    /// default `dedupWindow` every segment is scanned here. With `dedupFrom` (where the persisted
    /// dedup snapshot stops covering the log) only records from there on are passed to
    /// `seedDedup`, and segments before it are not scanned for them: after a clean stop, whose
    /// snapshots cover the whole log, only the last segment is scanned (for a torn tail).
    package init(
        directory: String, configuration: LogConfiguration, cursors: [String: LogPosition?], logger: Logger,
        recovered report: inout RecoveryReport, dedupWindow: Int = .max, dedupFrom: LogPosition? = nil,
        sessionsFrom: LogPosition? = nil,
        seedDedup: (EventID, UInt64) -> Void, seedSession: (SessionRecord) -> Void = { _ in }
    ) throws {
        self.directory = directory
        self.configuration = configuration
        self.logger = logger
        recoveredCursors = cursors
        try FileIO.makeDirectory(directory, mode: 0o700)

        let indices = try FileIO.listDirectory(directory).compactMap { name -> UInt64? in
            guard name.hasSuffix(".seg") else { return nil }
            return UInt64(name.dropLast(4))
        }.sorted()

        var segments: [SegmentInfo] = []
        var erasedPending: [String: Int] = [:]
        var seeds: [[(EventID, UInt64)]] = []
        var sessionSeeds: [[SessionRecord]] = []
        var seen = 0
        for (position, index) in indices.enumerated().reversed() {
            let path = directory + "/" + Self.fileName(for: index)
            let isLast = position == indices.count - 1
            report.segments += 1
            let sessionsNeeded = sessionsFrom.map { index >= $0.segment } ?? false
            let dedupNeeded = seen < dedupWindow && (dedupFrom.map { index >= $0.segment } ?? true)
            guard isLast || dedupNeeded || sessionsNeeded else {
                let fd = try FileIO.open(path, O_RDONLY)
                defer { close(fd) }
                segments.append(SegmentInfo(index: index, path: path, size: try FileIO.fileSize(fd, path: path),
                                            records: 0, deliveredRecords: [:], verified: false))
                continue
            }
            var ids: [(EventID, UInt64)] = []
            var sessions: [SessionRecord] = []
            var uidBytes: [UInt32: Int64] = [:]
            let scan = try SegmentScanner.scan(path: path, truncateTornTail: isLast) { offset, size, body in
                let record = RecordBody(body)
                if let uid = record.senderUID(in: body) { uidBytes[uid, default: 0] += Int64(size) }
                let position = LogPosition(segment: index, offset: offset)
                if record.kind == .erased {
                    Self.countErased(at: position, cursors: cursors, into: &erasedPending)
                }
                if dedupFrom.map({ position >= $0 }) ?? true { ids.append((record.eventID, record.acceptedAt)) }
                if let session = record.session, let from = sessionsFrom, position >= from {
                    sessions.append(SessionRecord(session: session, sequence: record.sequence, acceptedAt: record.acceptedAt,
                                                  position: position, source: record.source(in: body)))
                }
            }
            seen += ids.count
            seeds.append(ids)
            sessionSeeds.append(sessions)
            report.add(scan)
            segments.append(SegmentInfo(index: index, path: path, size: scan.size, records: scan.records.count,
                                        deliveredRecords: Self.delivered(scan.records, segment: index, before: cursors),
                                        uidBytes: uidBytes))
        }
        for records in sessionSeeds.reversed() {
            for record in records { seedSession(record) }
        }
        // Only the newest `dedupWindow` ids can stay in the window: skip the older ones.
        var skip = seen > dedupWindow ? seen - dedupWindow : 0
        for ids in seeds.reversed() {
            let dropped = min(skip, ids.count)
            skip -= dropped
            for (id, at) in ids.dropFirst(dropped) { seedDedup(id, at) }
        }
        segments.reverse()
        let first = segments.first?.index ?? 1
        let oldest = LogPosition(segment: first, offset: Self.segmentHeaderSize)
        let starts = cursors.mapValues { cursor in cursor.map { $0.segment < first ? oldest : $0 } ?? oldest }
        var totals: [UInt32: Int64] = [:]
        for segment in segments { totals.merge(segment.uidBytes, uniquingKeysWith: +) }
        state = Mutex(State(segments: segments, cursors: starts, nextIndex: (indices.last ?? 0) + 1,
                            erasedPending: erasedPending, uidBytes: totals))
    }

    /// How many of a segment's records (by offset) lie before each consumer's cursor.
    static func delivered(_ records: [Int64], segment index: UInt64, before cursors: [String: LogPosition?]) -> [String: Int] {
        var delivered: [String: Int] = [:]
        for (consumer, cursor) in cursors {
            guard let cursor else { continue }
            if index < cursor.segment {
                delivered[consumer] = records.count
            } else if index == cursor.segment {
                delivered[consumer] = records.prefix { $0 < cursor.offset }.count
            }
        }
        return delivered
    }

    /// Counts an erased record at `position` for every consumer that has not passed it.
    static func countErased(at position: LogPosition, cursors: [String: LogPosition?], into counts: inout [String: Int]) {
        for (consumer, cursor) in cursors where cursor.map({ position >= $0 }) ?? true {
            counts[consumer, default: 0] += 1
        }
    }

    /// Sealed segments whose records are not yet counted.
    package var unverifiedSegments: Int { state.withLock { $0.segments.count { !$0.verified } } }

    /// Counts and CRC-checks the sealed segments start-up recovery left out (oldest first),
    /// reporting damage as recovery would have. Safe to run on any thread while the log is in use:
    /// a segment deleted meanwhile is skipped. `shouldStop` is asked between segments.
    package func verifySealedSegments(shouldStop: () -> Bool = { false }) -> RecoveryReport {
        var report = RecoveryReport()
        let pending = state.withLock { $0.segments.filter { !$0.verified } }
        let cursors = recoveredCursors
        for segment in pending where !shouldStop() {
            var erased: [String: Int] = [:]
            var uidBytes: [UInt32: Int64] = [:]
            guard let scan = try? SegmentScanner.scan(path: segment.path, truncateTornTail: false, visit: { offset, size, body in
                if let uid = RecordBody(body).senderUID(in: body) { uidBytes[uid, default: 0] += Int64(size) }
                if body[0] == LogRecord.Kind.erased.rawValue {
                    Self.countErased(at: LogPosition(segment: segment.index, offset: offset), cursors: cursors, into: &erased)
                }
            }) else { continue }
            let delivered = Self.delivered(scan.records, segment: segment.index, before: cursors)
            let present = state.withLock { state -> Bool in
                guard let i = state.segments.firstIndex(where: { $0.index == segment.index }) else { return false }
                state.segments[i].records = scan.records.count
                // Deliveries since start were already counted by markDelivered.
                state.segments[i].deliveredRecords.merge(delivered) { $0 + $1 }
                state.segments[i].verified = true
                state.segments[i].uidBytes.merge(uidBytes, uniquingKeysWith: +)
                state.uidBytes.merge(uidBytes, uniquingKeysWith: +)
                state.erasedPending.merge(erased) { $0 + $1 }
                return true
            }
            if present { report.add(scan) }
        }
        return report
    }

    // MARK: Delivery bookkeeping

    /// The oldest position some consumer still needs (the smallest cursor): everything before it
    /// has been delivered to every sink.
    package var cursor: LogPosition { state.withLock { Self.oldestCursor($0) } }

    /// The smallest cursor, or the oldest segment's start with no consumer.
    static func oldestCursor(_ state: State) -> LogPosition {
        state.cursors.values.min() ?? LogPosition(segment: state.segments.first?.index ?? 1, offset: segmentHeaderSize)
    }

    /// The position `consumer` resumes from (the oldest segment for an unknown consumer).
    package func cursor(for consumer: String) -> LogPosition {
        state.withLock { state in
            state.cursors[consumer]
                ?? LogPosition(segment: state.segments.first?.index ?? 1, offset: Self.segmentHeaderSize)
        }
    }

    /// The consumers (sink names) the log keeps segments for.
    package var consumers: [String] { state.withLock { $0.cursors.keys.sorted() } }

    /// Records that `events` were delivered to `consumer` and moves its cursor to `next` (never
    /// backwards: a segment dropped meanwhile may already have moved it further).
    package func markDelivered(_ events: [StoredEvent], next: LogPosition, consumer: String = SegmentedLog.defaultConsumer) {
        state.withLock { state in
            let first = LogPosition(segment: state.segments.first?.index ?? 1, offset: Self.segmentHeaderSize)
            let current = state.cursors[consumer] ?? first
            guard next > current else { return }
            // Counted per run of events in one segment (a whole batch, mostly): one segment
            // lookup and one count update per run, not per event.
            let (runs, erased) = Self.deliveredRuns(events, from: current)
            for run in runs {
                if let i = state.segments.firstIndex(where: { $0.index == run.segment }) {
                    state.segments[i].deliveredRecords[consumer, default: 0] += run.count
                }
            }
            if erased > 0 { state.erasedPending[consumer] = max(0, (state.erasedPending[consumer] ?? 0) - erased) }
            state.cursors[consumer] = next
        }
    }

    /// The events of `events` at or after `current`, counted per run of consecutive events in the
    /// same segment, and how many of them are erased records.
    static func deliveredRuns(_ events: [StoredEvent], from current: LogPosition) -> (runs: [(segment: UInt64, count: Int)], erased: Int) {
        var runs: [(segment: UInt64, count: Int)] = []
        var erased = 0
        for event in events where event.position >= current {
            if let last = runs.indices.last, runs[last].segment == event.position.segment {
                runs[last].count += 1
            } else {
                runs.append((event.position.segment, 1))
            }
            if event.isErased { erased += 1 }
        }
        return (runs, erased)
    }

    // MARK: The writer's bookkeeping (``LogWriter`` is the only caller)

    /// The newest segment, if any.
    var lastSegment: SegmentInfo? { state.withLock { $0.segments.last } }

    /// The segment numbered `index`, if the log has it.
    func segment(_ index: UInt64) -> SegmentInfo? {
        state.withLock { state in state.segments.first { $0.index == index } }
    }

    /// Bytes of all segment files as last committed.
    var committedBytes: Int64 { state.withLock { $0.segments.reduce(0) { $0 + $1.size } } }

    /// Takes the next segment number and registers the new, empty segment `path` of that number;
    /// readers do not see it until ``publish(_:)``.
    func addSegment(path: (UInt64) -> String) -> (index: UInt64, path: String) {
        state.withLock { state in
            let index = state.nextIndex
            state.nextIndex += 1
            let file = path(index)
            state.segments.append(SegmentInfo(index: index, path: file, size: Self.segmentHeaderSize,
                                              records: 0, deliveredRecords: [:], visible: false))
            return (index, file)
        }
    }

    /// Makes committed bytes visible: each segment's durable size and record count.
    func publish(_ committed: [(index: UInt64, size: Int64, records: Int)]) {
        state.withLock { state in
            for segment in committed {
                if let i = state.segments.firstIndex(where: { $0.index == segment.index }) {
                    state.segments[i].size = segment.size
                    state.segments[i].records = segment.records
                    state.segments[i].visible = true
                }
            }
        }
    }
}
