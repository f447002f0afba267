import FerryProtocol
import FerryStorage
import Logging

/// The dedup state's snapshot files and the session table's loss reports.
extension CommitPipeline {
    var dedupSnapshotPath: String { configuration.dataDirectory + "/dedup.snapshot" }
    var sessionsSnapshotPath: String { configuration.dataDirectory + "/" + Self.sessionsSnapshotName }
    /// The session table's snapshot file in the data directory.
    static let sessionsSnapshotName = "sessions.snapshot"

    /// Writes the id window, then the session table. Both hold committed state only (a group's
    /// decisions reach them after its writes), so they cover every record before `covering`, the
    /// end of the committed log (not ``SegmentedLog/endPosition``, which in the middle of a group
    /// that rotated names the new segment, past records of the group still to be committed).
    func persistSnapshots(_ dedup: Dedup, covering: LogPosition) throws {
        try FileIO.writeAtomically(dedup.window.snapshot(coveringUpTo: covering), to: dedupSnapshotPath)
        try persistSessions(dedup.sessions, covering: covering)
    }

    /// Writes the session table (committed state only, see ``persistSnapshots(_:covering:)``).
    private func persistSessions(_ sessions: SessionTable, covering: LogPosition) throws {
        try FileIO.writeAtomically(sessions.snapshot(coveringUpTo: covering), to: sessionsSnapshotPath)
    }

    /// After a group that moved the log to a new segment, persists the session table, so a
    /// restart scans at most the newest segments to rebuild it.
    func snapshotSessionsAfterRotation(writer: LogWriter, dedup: inout Dedup) {
        guard writer.activeIndex != dedup.snapshotSegment else { return }
        do {
            try persistSessions(dedup.sessions, covering: writer.committedEnd)
            dedup.snapshotSegment = writer.activeIndex
        } catch {
            logger.error("could not persist the session table", metadata: ["error": "\(error)"])
        }
    }

    /// Publishes and counts the client events the session table found lost.
    func reportLosses(_ losses: [SessionTable.Loss], at now: UInt64) {
        for loss in losses {
            let events = Int(clamping: loss.events)
            counters.recordLost(events, source: loss.source)
            logger.warning("client events lost", metadata: [
                "source": "\(loss.source)", "session": "\(loss.session)", "events": "\(events)",
            ])
            bus.publishLost(loss, at: now)
        }
    }
}
