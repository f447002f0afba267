import FerryProtocol
import FerryStorage
import Logging

/// The retention side of the commit thread: making room under drop-oldest, deleting delivered
/// segments.
extension CommitPipeline {
    /// Drops the oldest segments until a record of `recordBytes` fits under the retention cap
    /// (the ``StateMachine`` asks for it only under drop-oldest). Returns false if it cannot:
    /// the event is answered `full`.
    func makeRoom(for recordBytes: Int64, writer: LogWriter, dedup: Dedup) -> Bool {
        // Count a segment header too: the append may start a new segment.
        let size = recordBytes + SegmentedLog.segmentHeaderSize
        let cap = configuration.log.retentionMaxBytes
        while writer.totalBytes + size > cap {
            do {
                // The dropped segment's ids leave the disk: persist the window first. It holds
                // committed state only (the group in flight is the state machine's), as the
                // snapshots' position, the end of the committed log, says.
                try persistSnapshots(dedup, covering: writer.committedEnd)
                let victim = writer.oldestSealedSegment
                if let victim, bus.wants(.dropped) {
                    // Tell the bus which events go, before their bytes do (rare path: only when
                    // the cap is hit under drop-oldest and someone listens).
                    let start = LogPosition(segment: victim.index, offset: SegmentedLog.segmentHeaderSize)
                    let cursor = log.cursor
                    if let events = try? log.read(from: max(start, cursor), maxEvents: victim.verified ? victim.records : .max, maxBytes: Int(victim.size)).events {
                        bus.publishEvents(.dropped, events.filter { $0.position.segment == victim.index },
                                          at: WallClock.unixMilliseconds(), reason: "retention")
                    }
                }
                guard let lost = try writer.dropOldestSegment() else { return false }
                counters.dropped.increment(by: lost)
                logger.warning("queue full: dropped the oldest segment", metadata: ["events": "\(lost)"])
            } catch {
                logger.error("could not drop the oldest segment", metadata: ["error": "\(error)"])
                return false
            }
        }
        return true
    }

    /// Deletes the segments every sink has delivered (never the active one), after persisting the
    /// snapshots their records helped build.
    func deleteDeliveredSegments(writer: LogWriter, dedup: Dedup) {
        let done = log.deliveredSegments().filter { $0.index != writer.activeIndex }
        guard !done.isEmpty else { return }
        do {
            try persistSnapshots(dedup, covering: writer.committedEnd)
            for segment in done { try writer.delete(segment: segment) }
            try FileIO.syncDirectory(log.directory)
        } catch {
            logger.error("could not delete delivered segments", metadata: ["error": "\(error)"])
        }
    }
}
