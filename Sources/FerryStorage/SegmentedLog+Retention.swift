import Synchronization
// What retention needs: which segments every consumer has passed, how much an old segment still
// holds, and forgetting a segment once it is deleted (by delivery or the drop-oldest policy).
// ``LogWriter`` deletes the files.

extension SegmentedLog {
    /// Undelivered records in `segment` (the most any consumer lacks), counting an unverified one
    /// from its file (rare paths: the drop-oldest policy).
    func undeliveredRecords(of segment: SegmentInfo) -> Int {
        let consumers = state.withLock { Array($0.cursors.keys) }
        guard !segment.verified else { return segment.undelivered(consumers: consumers) }
        guard let scan = try? SegmentScanner.scan(path: segment.path, truncateTornTail: false) else { return 0 }
        let atStart = Self.delivered(scan.records, segment: segment.index, before: recoveredCursors)
        return consumers.map { scan.records.count - (atStart[$0] ?? 0) - (segment.deliveredRecords[$0] ?? 0) }.max().map { max(0, $0) } ?? 0
    }

    /// Segments wholly before every consumer's cursor, other than the active (last) one: safe to
    /// delete. With no consumer nothing is.
    package func deliveredSegments() -> [SegmentInfo] {
        state.withLock { state in
            guard let oldest = state.cursors.values.min() else { return [] }
            return state.segments.dropLast().filter { $0.index < oldest.segment }
        }
    }

    /// The oldest segment other than `index`.
    func oldestSegment(otherThan index: UInt64) -> SegmentInfo? {
        state.withLock { state in state.segments.first { $0.index != index } }
    }

    /// Segments other than `index` for which `isDead` is true.
    func segments(otherThan index: UInt64, where isDead: (SegmentInfo) -> Bool) -> [SegmentInfo] {
        state.withLock { state in state.segments.filter { $0.index != index && isDead($0) } }
    }

    /// Forgets a deleted segment.
    func removeSegment(_ index: UInt64) {
        state.withLock { state in
            if let segment = state.segments.first(where: { $0.index == index }) { state.forget(segment) }
            state.segments.removeAll { $0.index == index }
        }
    }

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
}
