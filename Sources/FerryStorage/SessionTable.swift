import FerryProtocol

/// What the agent knows of each live client session: the sequence numbers it has stored.
///
/// Kafka's idempotent producer keys each record by (producer id, sequence); Ferry's clients send
/// a random session id and a per-session sequence starting at 1 (protocol version 2). The table
/// keeps, per session, the *ranges* of sequences stored — not one high-water mark: a client's
/// drop-oldest outbox leaves gaps, and events answered `full`, `storage` or `blocked` are not
/// stored and must be judged again when re-sent. A re-send of a stored sequence is a duplicate
/// however many other events came in between, which the id window (bounded by count) cannot
/// promise.
///
/// Memory grows with the number of live sessions, not with traffic: a session that sends in
/// order has one range; a session idle for ``idleMilliseconds`` is evicted (every `ferry emit`
/// run is a session of its own), the table holds at most ``maxSessions`` (least recently seen
/// evicted first), and a session keeps at most ``maxRangesPerSession`` ranges (beyond, its oldest
/// sequences are no longer judged by the table but by the id window, as for clients without
/// sessions).
///
/// Gaps are losses the client could not avoid telling us about: a gap still open
/// ``lossGraceMilliseconds`` after it appeared, or when its session is evicted, is reported once
/// by ``collectLosses(now:)``.
///
/// Used by the commit thread only; persisted with ``snapshot(coveringUpTo:)`` before the segments
/// it was rebuilt from are deleted, and at every segment rotation, so a restart reads the
/// snapshot and scans only the log after the position it covers.
package struct SessionTable {
    /// One session's state.
    package struct Session: Sendable {
        /// Stored sequences, sorted, disjoint and not adjacent.
        package var ranges: [ClosedRange<UInt64>] = []
        /// Sequences at or below this are not judged by the table (evicted ranges, or a session
        /// that came back after eviction).
        package var floor: UInt64 = 0
        /// Gaps at or below this were already reported lost.
        package var reportedThrough: UInt64 = 0
        /// When a gap that is not yet reported was first seen open (agent ms), and the highest
        /// stored sequence then: gaps below it have been open at least since that moment.
        package var gapSince: (at: UInt64, mark: UInt64)?
        /// When the session last stored an event (agent ms).
        package var lastSeen: UInt64
        /// The client's source name, for loss reports ("" when only erased records told of it).
        package var source: String

        /// Whether `sequence` is known stored.
        package func contains(_ sequence: UInt64) -> Bool {
            guard sequence > floor, let last = ranges.last else { return false }
            if last.contains(sequence) { return true }
            if sequence > last.upperBound { return false }
            var low = 0, high = ranges.count - 1
            while low <= high {
                let mid = (low + high) / 2
                if ranges[mid].upperBound < sequence {
                    low = mid + 1
                } else if ranges[mid].lowerBound > sequence {
                    high = mid - 1
                } else {
                    return true
                }
            }
            return false
        }

        /// Adds `sequence`, merging neighbours. Returns false if it was present.
        @discardableResult
        package mutating func insert(_ sequence: UInt64) -> Bool {
            if let last = ranges.last {
                if sequence == last.upperBound + 1 {
                    // The common case: in order.
                    ranges[ranges.count - 1] = last.lowerBound...sequence
                    return true
                }
                if sequence > last.upperBound + 1 {
                    ranges.append(sequence...sequence)
                    return true
                }
            } else {
                ranges.append(sequence...sequence)
                return true
            }
            // Out of order: find the first range ending at or after `sequence - 1`.
            var low = 0, high = ranges.count
            while low < high {
                let mid = (low + high) / 2
                if ranges[mid].upperBound + 1 < sequence { low = mid + 1 } else { high = mid }
            }
            if ranges[low].contains(sequence) { return false }
            let joinsLeft = ranges[low].upperBound + 1 == sequence
            let joinsRight = ranges[low].lowerBound == sequence + 1
                || (low + 1 < ranges.count && joinsLeft && ranges[low + 1].lowerBound == sequence + 1)
            switch (joinsLeft, joinsRight) {
            case (true, true):
                ranges[low] = ranges[low].lowerBound...ranges[low + 1].upperBound
                ranges.remove(at: low + 1)
            case (true, false):
                ranges[low] = ranges[low].lowerBound...sequence
            case (false, true):
                ranges[low] = sequence...ranges[low].upperBound
            case (false, false):
                ranges.insert(sequence...sequence, at: low)
            }
            return true
        }

        /// Removes `sequence` (a group commit failed after it was added).
        package mutating func remove(_ sequence: UInt64) {
            guard let index = ranges.firstIndex(where: { $0.contains(sequence) }) else { return }
            let range = ranges[index]
            var pieces: [ClosedRange<UInt64>] = []
            if range.lowerBound < sequence { pieces.append(range.lowerBound...(sequence - 1)) }
            if sequence < range.upperBound { pieces.append((sequence + 1)...range.upperBound) }
            ranges.replaceSubrange(index...index, with: pieces)
        }

        /// The gaps between `reportedThrough` and the highest stored sequence.
        package var openGaps: [ClosedRange<UInt64>] {
            var gaps: [ClosedRange<UInt64>] = []
            var next = max(floor, reportedThrough) + 1
            for range in ranges where range.upperBound >= next {
                if range.lowerBound > next { gaps.append(next...(range.lowerBound - 1)) }
                next = range.upperBound + 1
            }
            return gaps
        }
    }

    /// Gaps reported lost for one session.
    package struct Loss: Hashable, Sendable {
        package var session: EventID
        package var source: String
        package var gaps: [ClosedRange<UInt64>]
        /// Events in the gaps.
        package var events: UInt64 { gaps.reduce(0) { $0 + ($1.upperBound - $1.lowerBound + 1) } }
    }

    private var sessions: [EventID: Session] = [:]
    /// Sessions with a gap not yet reported.
    private var gapped: Set<EventID> = []
    /// Recently evicted sessions, so one that comes back is resumed, not counted as having lost
    /// everything before its first new sequence. Bounded by ``maxSessions``.
    private var evicted: Set<EventID> = []
    private var evictedOrder: [EventID] = []
    /// Losses found at eviction, handed out by the next ``collectLosses(now:)``.
    private var pendingLosses: [Loss] = []

    package let idleMilliseconds: UInt64
    package let maxSessions: Int
    package let maxRangesPerSession: Int
    package let lossGraceMilliseconds: UInt64

    /// Creates an empty table.
    package init(idleMilliseconds: UInt64, maxSessions: Int, maxRangesPerSession: Int = 1024, lossGraceMilliseconds: UInt64) {
        self.idleMilliseconds = idleMilliseconds
        self.maxSessions = max(1, maxSessions)
        self.maxRangesPerSession = max(2, maxRangesPerSession)
        self.lossGraceMilliseconds = lossGraceMilliseconds
    }

    /// Live sessions.
    package var count: Int { sessions.count }

    /// The state of `session`, if live.
    package subscript(session: EventID) -> Session? { sessions[session] }

    /// Whether `sequence` of `session` is known stored. `nil` when the table cannot tell (unknown
    /// session, or a sequence below the session's floor): the caller falls back to the id window.
    package func contains(session: EventID, sequence: UInt64) -> Bool? {
        guard let state = sessions[session], sequence > state.floor else { return nil }
        return state.contains(sequence)
    }

    /// Records `sequence` of `session` as stored at `at` (agent ms).
    package mutating func insert(session: EventID, sequence: UInt64, at: UInt64, source: String) {
        if sessions[session] == nil {
            if sessions.count >= maxSessions { evictLeastRecent() }
            var state = Session(lastSeen: at, source: source)
            // A session seen before its eviction resumes where it is: what came before is not
            // known missing.
            if evicted.remove(session) != nil, sequence > 0 {
                state.floor = sequence - 1
                state.reportedThrough = sequence - 1
            }
            sessions[session] = state
        }
        sessions[session]!.lastSeen = max(sessions[session]!.lastSeen, at)
        if sessions[session]!.source.isEmpty { sessions[session]!.source = source }
        guard sequence > sessions[session]!.floor else { return }
        sessions[session]!.insert(sequence)
        if sessions[session]!.ranges.count > maxRangesPerSession {
            // Too fragmented: the oldest range and the gap before it leave the table's judgement.
            let dropped = sessions[session]!.ranges.removeFirst()
            sessions[session]!.floor = dropped.upperBound
            sessions[session]!.reportedThrough = max(sessions[session]!.reportedThrough, dropped.upperBound)
        }
        noteGaps(session)
    }

    /// Removes `sequence` of `session` (its group commit failed).
    package mutating func remove(session: EventID, sequence: UInt64) {
        sessions[session]?.remove(sequence)
        noteGaps(session)
    }

    private mutating func noteGaps(_ session: EventID) {
        guard let state = sessions[session] else { return }
        if state.openGaps.isEmpty {
            gapped.remove(session)
            sessions[session]!.gapSince = nil
        } else {
            gapped.insert(session)
        }
    }

    /// Evicts sessions idle longer than ``idleMilliseconds`` (their open gaps become losses) and
    /// returns every loss due: gaps open for ``lossGraceMilliseconds`` (first seen by an earlier
    /// call) and those of evicted sessions. Each gap is reported once.
    package mutating func collectLosses(now: UInt64) -> [Loss] {
        var losses = pendingLosses
        pendingLosses = []
        for (id, state) in sessions where state.lastSeen + idleMilliseconds < now {
            if let loss = evict(id) { losses.append(loss) }
        }
        for id in gapped {
            guard let state = sessions[id] else { continue }
            guard let since = state.gapSince else {
                sessions[id]!.gapSince = (now, state.ranges.last?.upperBound ?? 0)
                continue
            }
            guard since.at + lossGraceMilliseconds <= now else { continue }
            // Only gaps below the mark are known to have been open for the whole grace period.
            let gaps = state.openGaps.filter { $0.upperBound < since.mark }
            if !gaps.isEmpty { losses.append(Loss(session: id, source: state.source, gaps: gaps)) }
            sessions[id]!.reportedThrough = max(state.reportedThrough, since.mark)
            sessions[id]!.gapSince = nil
            noteGaps(id)
        }
        return losses
    }

    private mutating func evict(_ id: EventID) -> Loss? {
        guard let state = sessions.removeValue(forKey: id) else { return nil }
        gapped.remove(id)
        if evicted.insert(id).inserted {
            evictedOrder.append(id)
            if evictedOrder.count > maxSessions {
                evicted.remove(evictedOrder.removeFirst())
            }
        }
        let gaps = state.openGaps
        return gaps.isEmpty ? nil : Loss(session: id, source: state.source, gaps: gaps)
    }

    private mutating func evictLeastRecent() {
        guard let oldest = sessions.min(by: { $0.value.lastSeen < $1.value.lastSeen })?.key else { return }
        if let loss = evict(oldest) { pendingLosses.append(loss) }
    }

    /// Makes every session's idle clock start at `now` at the latest (after a restart: the agent
    /// was not there to hear the clients while it was down).
    package mutating func touchAll(now: UInt64) {
        for id in sessions.keys where sessions[id]!.lastSeen < now { sessions[id]!.lastSeen = now }
    }

    // MARK: Snapshot file

    /// `"FSES" version:u8 covered.segment:u64le covered.offset:i64le count:u32le` then per
    /// session `id[16] lastSeen:u64 floor:u64 reportedThrough:u64 sourceLength:u16 source
    /// rangeCount:u32 (lower:u64 upper:u64)…`, then `crc32c:u32le` of everything before it.
    package static let snapshotMagic = Array("FSES".utf8)
    private static let snapshotVersion: UInt8 = 1

    /// The table as a snapshot file that covers every log record before `covered`.
    package func snapshot(coveringUpTo covered: LogPosition) -> [UInt8] {
        var out = Self.snapshotMagic
        out.append(Self.snapshotVersion)
        appendLE(covered.segment, to: &out)
        appendLE(covered.offset, to: &out)
        appendLE(UInt32(sessions.count), to: &out)
        for (id, state) in sessions {
            id.append(to: &out)
            appendLE(state.lastSeen, to: &out)
            appendLE(state.floor, to: &out)
            appendLE(state.reportedThrough, to: &out)
            let source = Array(state.source.utf8.prefix(0xFFFF))
            appendLE(UInt16(source.count), to: &out)
            out += source
            appendLE(UInt32(state.ranges.count), to: &out)
            for range in state.ranges {
                appendLE(range.lowerBound, to: &out)
                appendLE(range.upperBound, to: &out)
            }
        }
        appendLE(CRC32C.checksum(out), to: &out)
        return out
    }

    /// Restores a snapshot into an empty table. Returns the position it covers, or `nil` for a
    /// damaged or unknown file (the caller then rebuilds from the whole log).
    package mutating func restore(snapshot bytes: [UInt8]) -> LogPosition? {
        guard bytes.count >= 29, Array(bytes[0..<4]) == Self.snapshotMagic, bytes[4] == Self.snapshotVersion,
              CRC32C.checksum(Array(bytes[..<(bytes.count - 4)])) == readLE(bytes, at: bytes.count - 4, as: UInt32.self)
        else { return nil }
        let end = bytes.count - 4
        var offset = 5
        func read<T: FixedWidthInteger>(_: T.Type) -> T? {
            guard offset + MemoryLayout<T>.size <= end else { return nil }
            defer { offset += MemoryLayout<T>.size }
            return readLE(bytes, at: offset, as: T.self)
        }
        guard let segment = read(UInt64.self), let position = read(Int64.self), let count = read(UInt32.self) else { return nil }
        var restored: [EventID: Session] = [:]
        for _ in 0..<count {
            guard offset + 16 <= end else { return nil }
            let id = EventID(bytes: bytes, at: offset)
            offset += 16
            guard let lastSeen = read(UInt64.self), let floor = read(UInt64.self), let reported = read(UInt64.self),
                  let sourceLength = read(UInt16.self), offset + Int(sourceLength) <= end else { return nil }
            let source = String(decoding: bytes[offset..<(offset + Int(sourceLength))], as: UTF8.self)
            offset += Int(sourceLength)
            guard let rangeCount = read(UInt32.self), Int(rangeCount) <= (end - offset) / 16 else { return nil }
            var ranges: [ClosedRange<UInt64>] = []
            ranges.reserveCapacity(Int(rangeCount))
            for _ in 0..<rangeCount {
                guard let lower = read(UInt64.self), let upper = read(UInt64.self), lower <= upper,
                      lower > (ranges.last?.upperBound ?? 0) else { return nil }
                ranges.append(lower...upper)
            }
            restored[id] = Session(ranges: ranges, floor: floor, reportedThrough: reported, lastSeen: lastSeen, source: source)
        }
        guard offset == end else { return nil }
        sessions = restored
        for id in restored.keys { noteGaps(id) }
        return LogPosition(segment: segment, offset: position)
    }
}
