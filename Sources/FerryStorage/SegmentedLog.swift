#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol
import Logging
import Synchronization

/// Sizes and policies of the durable log.
public struct LogConfiguration: Sendable, Hashable {
    /// A segment is closed and a new one started once it would grow past this size.
    public var segmentMaxBytes: Int64
    /// The most bytes the log may hold on disk (delivered segments are deleted).
    public var retentionMaxBytes: Int64
    /// What happens to new events once ``retentionMaxBytes`` is reached.
    public var fullPolicy: FullPolicy
    /// The most of ``retentionMaxBytes``, in percent, the events of one sender uid may hold, so
    /// one user's flood cannot fill the queue for everyone (answered `full` for that uid alone).
    /// `nil`: the agent's mode decides (50 for a system agent, 100 — no limit — per user).
    public var uidSharePercent: Int?

    /// What to do when the queue is full.
    public enum FullPolicy: String, Sendable, Hashable, Codable, CaseIterable {
        /// Reject new events with status `rejected`, reason `full` (nothing already accepted is lost).
        case reject
        /// Delete the oldest undelivered segment to make room (counted as `dropped`).
        case dropOldest = "drop-oldest"
    }

    /// Creates a configuration; the defaults suit a desktop or small server.
    public init(segmentMaxBytes: Int64 = 16 << 20, retentionMaxBytes: Int64 = 1 << 30, fullPolicy: FullPolicy = .reject,
                uidSharePercent: Int? = nil) {
        self.segmentMaxBytes = segmentMaxBytes
        self.retentionMaxBytes = retentionMaxBytes
        self.fullPolicy = fullPolicy
        self.uidSharePercent = uidSharePercent
    }
}

/// What recovery found when the log was opened.
public struct RecoveryReport: Sendable, Hashable {
    /// Segment files found.
    public var segments = 0
    /// Valid records found.
    public var records = 0
    /// Damaged regions skipped by resynchronising to the next valid record.
    public var corruptRegions = 0
    /// Bytes in the skipped regions.
    public var corruptBytes: Int64 = 0
    /// Bytes cut from the end of the last segment (a write torn by a crash).
    public var truncatedBytes: Int64 = 0

    /// An empty report.
    public init() {}

    /// Whether anything was damaged.
    public var isClean: Bool { corruptRegions == 0 && truncatedBytes == 0 }

    /// Adds what one segment's scan found.
    package mutating func add(_ scan: SegmentScanner.Result) {
        records += scan.records.count
        corruptRegions += scan.corruptRegions
        corruptBytes += scan.corruptBytes
        truncatedBytes += scan.truncatedBytes
    }

    /// Adds a later report (sealed segments verified after start); `segments` stays as counted.
    public mutating func merge(_ other: RecoveryReport) {
        records += other.records
        corruptRegions += other.corruptRegions
        corruptBytes += other.corruptBytes
        truncatedBytes += other.truncatedBytes
    }
}

/// The segment file format: `<directory>/<index, 20 digits>.seg`, each starting with a 16-byte
/// header (`FERRYSG1`, index as u64le) followed by ``LogRecord``s.
public enum SegmentFile {
    /// Size of the header.
    public static let headerSize: Int64 = 16
    /// The header's first 8 bytes.
    public static let magic = Array("FERRYSG1".utf8)

    /// The file name of segment `index`.
    public static func fileName(for index: UInt64) -> String {
        let digits = String(index)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits + ".seg"
    }

    /// The header of segment `index`.
    public static func header(index: UInt64) -> [UInt8] {
        var header = magic
        appendLE(index, to: &header)
        return header
    }
}

/// One segment file as the log tracks it.
package struct SegmentInfo: Sendable {
    package var index: UInt64
    package var path: String
    /// Bytes known durable (fsync'd) and readable.
    package var size: Int64
    package var records: Int
    /// Records before each consumer's cursor, by consumer (sink) name.
    package var deliveredRecords: [String: Int]
    /// False for a segment the writer created in a group not yet committed: readers must not
    /// move on to it, or they would skip that group's records still going into the one before.
    package var visible = true
    /// Whether ``records`` is known: a sealed segment left out of start-up recovery is counted
    /// (and CRC-checked) later by ``SegmentedLog/verifySealedSegments(shouldStop:)``.
    package var verified = true
    /// Framed bytes of the segment's events by the sender's uid (events with an origin), for the
    /// per-uid share of the retention cap.
    package var uidBytes: [UInt32: Int64] = [:]

    /// Records some consumer has not passed yet (the most any registered consumer lacks).
    package func undelivered(consumers: some Collection<String>) -> Int {
        consumers.map { records - (deliveredRecords[$0] ?? 0) }.max() ?? 0
    }
}

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
    private let state: Mutex<State>

    private struct State {
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
    private let recoveredCursors: [String: LogPosition?]

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
    private static func delivered(_ records: [Int64], segment index: UInt64, before cursors: [String: LogPosition?]) -> [String: Int] {
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
    private static func countErased(at position: LogPosition, cursors: [String: LogPosition?], into counts: inout [String: Int]) {
        for (consumer, cursor) in cursors where cursor.map({ position >= $0 }) ?? true {
            counts[consumer, default: 0] += 1
        }
    }

    /// Undelivered records in `segment` (the most any consumer lacks), counting an unverified one
    /// from its file (rare paths: the drop-oldest policy).
    func undeliveredRecords(of segment: SegmentInfo) -> Int {
        let consumers = state.withLock { Array($0.cursors.keys) }
        guard !segment.verified else { return segment.undelivered(consumers: consumers) }
        guard let scan = try? SegmentScanner.scan(path: segment.path, truncateTornTail: false) else { return 0 }
        let atStart = Self.delivered(scan.records, segment: segment.index, before: recoveredCursors)
        return consumers.map { scan.records.count - (atStart[$0] ?? 0) - (segment.deliveredRecords[$0] ?? 0) }.max().map { max(0, $0) } ?? 0
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

    // MARK: Reading

    /// Reads up to `maxEvents` events (and about `maxBytes`) starting at `position`, skipping any
    /// damaged region. Returns the events and the position after the last one. Only committed
    /// (fsync'd) bytes are read.
    package func read(from position: LogPosition, maxEvents: Int, maxBytes: Int) throws -> (events: [StoredEvent], next: LogPosition) {
        var position = position
        var events: [StoredEvent] = []
        events.reserveCapacity(min(maxEvents, 4096))
        var bytes = 0
        while events.count < maxEvents && bytes < maxBytes {
            let segments = state.withLock { $0.segments.filter(\.visible) }
            guard let segment = segments.first(where: { $0.index >= position.segment }) else { break }
            if segment.index != position.segment {
                position = LogPosition(segment: segment.index, offset: Self.segmentHeaderSize)
            }
            position.offset = max(position.offset, Self.segmentHeaderSize)
            if position.offset >= segment.size {
                // End of this segment: move on if a later one exists, else we are at the head.
                guard let next = segments.first(where: { $0.index > segment.index }) else { break }
                position = LogPosition(segment: next.index, offset: Self.segmentHeaderSize)
                continue
            }
            // One large sequential read, but not a whole `maxBytes` for `maxEvents` small records:
            // sized for 512 bytes a record (more reads follow when they are larger).
            let left = maxEvents - events.count
            let byCount = left >= 1 << 40 ? Int.max : left * 512
            let want = Int(min(Int64(max(min(maxBytes - bytes, byCount), 64 << 10)), segment.size - position.offset))
            let chunk = try readChunk(segment: segment, at: position.offset, count: want)
            // Committed bytes hold only complete records, so within the last chunk of a segment
            // "incomplete" means damage; before that it may be a record crossing the chunk's end.
            let reachesEnd = position.offset + Int64(chunk.count) >= segment.size
            var consumed = 0
            let parsed: Bool = chunk.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count && events.count < maxEvents && (bytes < maxBytes || events.isEmpty) {
                    switch LogRecord.parse(raw, at: offset) {
                    case .record(let body, let size):
                        events.append(StoredEvent(
                            position: LogPosition(segment: segment.index, offset: position.offset + Int64(offset)),
                            size: size, body: UnsafeRawBufferPointer(rebasing: raw[body])))
                        bytes += size
                        offset += size
                    case .incomplete where !reachesEnd:
                        consumed = offset
                        return offset > 0
                    case .incomplete, .invalid:
                        // Recovery already reported this region; skip it the same way, stopping
                        // where a record may start that this chunk cannot show whole.
                        offset = LogRecord.resynchronise(raw, after: offset, allowIncomplete: !reachesEnd) ?? raw.count
                    }
                }
                consumed = offset
                return true
            }
            if !parsed {
                // A record larger than the chunk: read exactly it (parse capped its length).
                let header = try readChunk(segment: segment, at: position.offset, count: LogRecord.headerSize)
                let length = header.count == LogRecord.headerSize ? Int(readLE(header, at: 4, as: UInt32.self)) : 0
                let whole = try readChunk(segment: segment, at: position.offset, count: LogRecord.headerSize + length)
                if case .record(let body, let size) = whole.withUnsafeBytes({ LogRecord.parse($0, at: 0) }) {
                    events.append(whole.withUnsafeBytes { raw in
                        StoredEvent(position: position, size: size, body: UnsafeRawBufferPointer(rebasing: raw[body]))
                    })
                    bytes += size
                    consumed = size
                } else {
                    // A damaged length made the "record" look long: resynchronise over the rest
                    // of the segment, exactly as recovery did, so only the damaged record is lost.
                    let rest = try readChunk(segment: segment, at: position.offset, count: Int(segment.size - position.offset))
                    consumed = rest.withUnsafeBytes { LogRecord.resynchronise($0, after: 0) } ?? rest.count
                }
            }
            position.offset += Int64(consumed)
        }
        return (events, position)
    }

    /// Erases, in place, every event from `position` on for which `matches` is true: each such
    /// record is rewritten as an ``LogRecord/Kind/erased`` record of the same size (the payload
    /// bytes are overwritten with zeros on disk, offsets stay valid), then the touched segments
    /// are `fdatasync`ed. Returns the erased events as they were.
    ///
    /// Call it where nothing else writes the log (the commit thread, between groups). A reader
    /// racing with it sees either the old record or the erased one, or a torn record it skips.
    package func erase(from position: LogPosition, matching matches: (StoredEvent) -> Bool) throws -> [StoredEvent] {
        var erased: [StoredEvent] = []
        var touched: [UInt64: (fd: CInt, path: String)] = [:]
        defer { for (_, file) in touched { close(file.fd) } }
        var position = position
        while true {
            let (events, next) = try read(from: position, maxEvents: 4096, maxBytes: 4 << 20)
            for event in events where !event.isErased && matches(event) {
                let file: (fd: CInt, path: String)
                if let open = touched[event.position.segment] {
                    file = open
                } else {
                    guard let segment = state.withLock({ $0.segments.first { $0.index == event.position.segment } }) else { continue }
                    file = (try FileIO.open(segment.path, O_WRONLY), segment.path)
                    touched[event.position.segment] = file
                }
                let record = ErasedRecord(event).bytes
                try record.withUnsafeBytes { try FileIO.pwriteAll(file.fd, $0, at: event.position.offset, path: file.path) }
                erased.append(event)
            }
            if events.isEmpty || next == position { break }
            position = next
        }
        for (_, file) in touched { try FileIO.fdatasync(file.fd, path: file.path) }
        if !erased.isEmpty {
            state.withLock { state in
                for (consumer, cursor) in state.cursors {
                    state.erasedPending[consumer, default: 0] += erased.count { $0.position >= cursor }
                }
            }
        }
        return erased
    }

    /// Writes each of `records` (erased records computed earlier, ``ErasedRecord``) at its
    /// recorded position, then `fdatasync`s the touched segments; `afterEach` runs after each
    /// write. The record on disk is not read to decide what to write, so a record torn by an
    /// earlier interrupted overwrite is erased whole too. A record whose segment is gone
    /// (delivered and deleted) or that lies past its segment's end (a torn tail that recovery cut
    /// off) has no bytes left and is skipped; one already erased is left as it is. Returns how
    /// many records were erased by this call.
    ///
    /// Call it where nothing else writes the log (the commit thread, between groups).
    @discardableResult
    package func erase(at records: [ErasedRecord], afterEach: () throws -> Void = {}) throws -> Int {
        var touched: [UInt64: (fd: CInt, path: String)] = [:]
        defer { for (_, file) in touched { close(file.fd) } }
        var erased: [LogPosition] = []
        var repaired: [UInt64: Int] = [:]
        for record in records {
            guard let segment = state.withLock({ $0.segments.first { $0.index == record.position.segment } }),
                  record.position.offset >= Self.segmentHeaderSize,
                  record.position.offset + Int64(record.size) <= segment.size else { continue }
            let file: (fd: CInt, path: String)
            if let open = touched[segment.index] {
                file = open
            } else {
                file = (try FileIO.open(segment.path, O_RDWR), segment.path)
                touched[segment.index] = file
            }
            let current = try FileIO.pread(file.fd, count: record.size, at: record.position.offset, path: file.path)
            let parsed = current.withUnsafeBytes { LogRecord.parse($0, at: 0) }
            if case .record(let body, let size) = parsed, size == record.size, current[body.lowerBound] == LogRecord.Kind.erased.rawValue {
                continue
            }
            let image = record.bytes
            try image.withUnsafeBytes { try FileIO.pwriteAll(file.fd, $0, at: record.position.offset, path: file.path) }
            erased.append(record.position)
            if case .record(_, let size) = parsed, size == record.size {} else {
                // Torn before: recovery did not count it as a record; now it is a valid one.
                repaired[segment.index, default: 0] += 1
            }
            try afterEach()
        }
        for (_, file) in touched { try FileIO.fdatasync(file.fd, path: file.path) }
        if !erased.isEmpty {
            state.withLock { state in
                for (consumer, cursor) in state.cursors {
                    state.erasedPending[consumer, default: 0] += erased.count { $0 >= cursor }
                }
                for (index, count) in repaired {
                    if let i = state.segments.firstIndex(where: { $0.index == index }) { state.segments[i].records += count }
                }
            }
        }
        return erased.count
    }

    /// The record at `position` if a valid one of `size` bytes is there (`nil` if its segment is
    /// gone, or the bytes there are not such a record).
    package func record(at position: LogPosition, size: Int) throws -> StoredEvent? {
        guard let segment = state.withLock({ $0.segments.first { $0.index == position.segment } }),
              position.offset + Int64(size) <= segment.size else { return nil }
        let bytes = try readChunk(segment: segment, at: position.offset, count: size)
        return bytes.withUnsafeBytes { raw -> StoredEvent? in
            guard case .record(let body, let parsedSize) = LogRecord.parse(raw, at: 0), parsedSize == size else { return nil }
            return StoredEvent(position: position, size: size, body: UnsafeRawBufferPointer(rebasing: raw[body]))
        }
    }

    private func readChunk(segment: SegmentInfo, at offset: Int64, count: Int) throws -> [UInt8] {
        let fd = try FileIO.open(segment.path, O_RDONLY)
        defer { close(fd) }
        return try FileIO.pread(fd, count: count, at: offset, path: segment.path)
    }

    /// The end of the log: the position after the last record of the newest segment. Between two
    /// group commits (where the commit thread asks) every byte before it is committed.
    package var endPosition: LogPosition {
        state.withLock { state in
            state.segments.last.map { LogPosition(segment: $0.index, offset: $0.size) }
                ?? LogPosition(segment: 0, offset: 0)
        }
    }

    /// The position of the oldest segment's first byte (its header), whatever any cursor says.
    package var startPosition: LogPosition {
        LogPosition(segment: state.withLock { $0.segments.first?.index } ?? 0, offset: 0)
    }

    // MARK: Delivery bookkeeping

    /// The oldest position some consumer still needs (the smallest cursor): everything before it
    /// has been delivered to every sink.
    package var cursor: LogPosition { state.withLock { Self.oldestCursor($0) } }

    private static func oldestCursor(_ state: State) -> LogPosition {
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
            for event in events where event.position >= current {
                if let i = state.segments.firstIndex(where: { $0.index == event.position.segment }) {
                    state.segments[i].deliveredRecords[consumer, default: 0] += 1
                }
                if event.isErased { state.erasedPending[consumer] = max(0, (state.erasedPending[consumer] ?? 0) - 1) }
            }
            state.cursors[consumer] = next
        }
    }

    /// Segments wholly before every consumer's cursor, other than the active (last) one: safe to
    /// delete. With no consumer nothing is.
    package func deliveredSegments() -> [SegmentInfo] {
        state.withLock { state in
            guard let oldest = state.cursors.values.min() else { return [] }
            return state.segments.dropLast().filter { $0.index < oldest.segment }
        }
    }

    // MARK: The writer's bookkeeping (``LogWriter`` is the only caller)

    /// The newest segment, if any.
    var lastSegment: SegmentInfo? { state.withLock { $0.segments.last } }

    /// The oldest segment other than `index`.
    func oldestSegment(otherThan index: UInt64) -> SegmentInfo? {
        state.withLock { state in state.segments.first { $0.index != index } }
    }

    /// The segment numbered `index`, if the log has it.
    func segment(_ index: UInt64) -> SegmentInfo? {
        state.withLock { state in state.segments.first { $0.index == index } }
    }

    /// Segments other than `index` for which `isDead` is true.
    func segments(otherThan index: UInt64, where isDead: (SegmentInfo) -> Bool) -> [SegmentInfo] {
        state.withLock { state in state.segments.filter { $0.index != index && isDead($0) } }
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

    /// Forgets a deleted segment.
    func removeSegment(_ index: UInt64) {
        state.withLock { state in
            if let segment = state.segments.first(where: { $0.index == index }) { state.forget(segment) }
            state.segments.removeAll { $0.index == index }
        }
    }

    /// Counts committed events' bytes by sender uid, by segment (the commit thread, after a
    /// group commit: one entry per segment and sender of the group).
    package func recordUsage(_ usage: [(segment: UInt64, uid: UInt32, bytes: Int64)]) {
        guard !usage.isEmpty else { return }
        state.withLock { state in
            for entry in usage {
                guard let i = state.segments.firstIndex(where: { $0.index == entry.segment }) else { continue }
                state.segments[i].uidBytes[entry.uid, default: 0] += entry.bytes
                state.uidBytes[entry.uid, default: 0] += entry.bytes
            }
        }
    }

    /// Bytes on disk of events sent by `uid` (sealed segments not yet verified after start count
    /// once they are).
    package func bytes(ofUID uid: UInt32) -> Int64 { state.withLock { $0.uidBytes[uid] ?? 0 } }

    /// Forgets the dropped segment `dropped` (deleted by the drop-oldest policy with `lost`
    /// undelivered events) and moves every cursor that was inside it to the next segment.
    func dropSegment(_ dropped: UInt64, lost: Int) {
        state.withLock { state in
            if let segment = state.segments.first(where: { $0.index == dropped }) { state.forget(segment) }
            state.segments.removeAll { $0.index == dropped }
            state.droppedRecords += lost
            if let next = state.segments.first {
                for (consumer, cursor) in state.cursors where cursor.segment <= dropped {
                    state.cursors[consumer] = LogPosition(segment: next.index, offset: Self.segmentHeaderSize)
                }
            }
        }
    }

    // MARK: Status

    /// A consistent snapshot of the log's size.
    package struct Status: Sendable {
        /// Events not yet delivered to every sink.
        package var undeliveredEvents: Int
        /// Events not yet delivered, per consumer (sink name).
        package var backlog: [String: Int]
        /// Bytes of all segment files.
        package var bytes: Int64
        /// Number of segment files.
        package var segments: Int
        /// Events deleted by the drop-oldest policy since start.
        package var droppedEvents: Int
        /// The oldest position some sink still needs.
        package var cursor: LogPosition
        /// Each consumer's cursor.
        package var cursors: [String: LogPosition]
        /// Sealed segments not yet counted since start (their events are missing from
        /// ``undeliveredEvents`` until then).
        package var unverifiedSegments: Int
    }

    /// The log's size now.
    package func status() -> Status {
        state.withLock { state in
            let consumers = state.cursors.keys
            var backlog: [String: Int] = [:]
            for consumer in consumers {
                let records = state.segments.reduce(0) { $0 + ($1.verified ? $1.records - ($1.deliveredRecords[consumer] ?? 0) : 0) }
                backlog[consumer] = max(0, records - (state.erasedPending[consumer] ?? 0))
            }
            return Status(
                undeliveredEvents: backlog.values.max() ?? 0,
                backlog: backlog,
                bytes: state.segments.reduce(0) { $0 + $1.size },
                segments: state.segments.count,
                droppedEvents: state.droppedRecords,
                cursor: Self.oldestCursor(state),
                cursors: state.cursors,
                unverifiedSegments: state.segments.count { !$0.verified })
        }
    }

    /// When the oldest undelivered event was accepted (agent ms), or `nil` if none is pending.
    package func oldestUndeliveredAcceptedAt() -> UInt64? {
        guard let first = try? read(from: cursor, maxEvents: 1, maxBytes: 1).events.first else { return nil }
        return first.acceptedAt
    }
}

/// Scans one segment file record by record, resynchronising past damage.
package enum SegmentScanner {
    /// What a scan found.
    package struct Result: Sendable {
        /// Offsets of the valid records, in order.
        package var records: [Int64] = []
        /// Damaged regions skipped.
        package var corruptRegions = 0
        /// Bytes in damaged regions (including a torn tail).
        package var corruptBytes: Int64 = 0
        /// Bytes cut off the end (only when truncation was asked for).
        package var truncatedBytes: Int64 = 0
        /// File size after the scan.
        package var size: Int64 = 0
        /// Whether the segment header was valid.
        package var headerValid = true
        /// Damaged regions as (offset, length), for `ferry queue inspect`.
        package var damage: [(offset: Int64, length: Int64)] = []
    }

    /// Bytes read per step: the scan holds one such window, not the whole segment (a record
    /// larger than it is read whole, up to ``LogRecord/maxBodySize``).
    package static let windowBytes = 1 << 20

    /// Scans `path`. With `truncateTornTail`, trailing bytes that hold no valid record are cut
    /// off (a write torn by a crash). `visit` sees each valid record's offset, size and body.
    /// The file is read in windows of ``windowBytes``; damage is found and resynchronised past
    /// exactly as if the whole file were read at once.
    package static func scan(
        path: String, truncateTornTail: Bool, windowBytes: Int = SegmentScanner.windowBytes,
        visit: (Int64, Int, UnsafeRawBufferPointer) -> Void = { _, _, _ in }
    ) throws -> Result {
        let fd = try FileIO.open(path, truncateTornTail ? O_RDWR : O_RDONLY)
        defer { close(fd) }
        let size = try FileIO.fileSize(fd, path: path)
        var result = Result()
        let headerSize = SegmentedLog.segmentHeaderSize
        let header = try FileIO.pread(fd, count: Int(min(headerSize, size)), at: 0, path: path)
        result.headerValid = header.count >= Int(headerSize) && Array(header[0..<8]) == SegmentedLog.segmentMagic
        var validEnd = min(headerSize, size)
        // Where the damaged region being crossed started (a region may span windows).
        var damageStart: Int64?
        func endDamage(at end: Int64) {
            guard let start = damageStart else { return }
            result.corruptRegions += 1
            result.corruptBytes += end - start
            result.damage.append((start, end - start))
            damageStart = nil
        }
        var base = headerSize
        var want = windowBytes
        while base < size {
            let chunk = try FileIO.pread(fd, count: Int(min(Int64(want), size - base)), at: base, path: path)
            guard !chunk.isEmpty else { break }
            let reachesEnd = base + Int64(chunk.count) >= size
            want = windowBytes
            let consumed: Int = chunk.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count {
                    switch LogRecord.parse(raw, at: offset) {
                    case .record(let body, let size):
                        if damageStart != nil { endDamage(at: base + Int64(offset)) }
                        result.records.append(base + Int64(offset))
                        visit(base + Int64(offset), size, UnsafeRawBufferPointer(rebasing: raw[body]))
                        offset += size
                        validEnd = base + Int64(offset)
                    case .incomplete(let needed) where !reachesEnd:
                        // Read on from here; a record larger than a window is read whole.
                        if offset == 0 { want = max(windowBytes, needed) }
                        return offset
                    case .incomplete, .invalid:
                        if damageStart == nil { damageStart = base + Int64(offset) }
                        // Stops early where a record may start that this window cannot show whole.
                        guard let next = LogRecord.resynchronise(raw, after: offset, allowIncomplete: !reachesEnd) else {
                            return raw.count
                        }
                        offset = next
                    }
                }
                return offset
            }
            base += Int64(consumed)
        }
        // Nothing valid follows the last damage: a torn tail (or damage reaching the end).
        endDamage(at: size)
        result.size = size
        if truncateTornTail && validEnd < size && validEnd >= headerSize {
            try FileIO.ftruncate(fd, validEnd, path: path)
            try FileIO.fdatasync(fd, path: path)
            result.truncatedBytes = size - validEnd
            result.corruptBytes -= result.truncatedBytes
            result.corruptRegions -= 1
            result.damage.removeLast()
            result.size = validEnd
        } else if truncateTornTail && size < headerSize {
            // A segment torn while its header was written: rewrite the header.
            let index = UInt64(path.split(separator: "/").last!.dropLast(4)) ?? 0
            let header = SegmentedLog.segmentHeader(index: index)
            try header.withUnsafeBytes { raw in try FileIO.pwriteAll(fd, raw, at: 0, path: path) }
            try FileIO.fdatasync(fd, path: path)
            result.truncatedBytes = size
            result.size = headerSize
            result.headerValid = true
        }
        return result
    }
}
