import FerryProtocol
import Synchronization

// Bytes on disk per sender uid (for the per-uid share) and the status snapshot.

extension SegmentedLog {
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
