import FerryProtocol
import FerryStorage

extension CommitPipeline {
    /// What the commit thread owns besides the group in flight: the dedup state, the consent
    /// worker (consent state, once-key marks, held area), the log and its writer. The
    /// ``StateMachine`` reads it through ``CommitBook`` and settles each group into it.
    struct Book: CommitBook {
        var dedup: Dedup
        let consent: ConsentWorker
        let log: SegmentedLog
        let writer: LogWriter

        func isStored(session: EventID, sequence: UInt64) -> Bool {
            dedup.sessions.contains(session: session, sequence: sequence) == true
        }

        func isRecent(_ id: EventID) -> Bool { dedup.window.contains(id) }

        func isMarked(_ mark: OnceKeyStore.Mark) -> Bool { consent.isMarked(mark) }

        func consent(_ key: ConsentKey) -> IngestDecision { consent.decide(key) }

        func bytes(ofUID uid: UInt32) -> Int64 { log.bytes(ofUID: uid) }

        var logBytes: Int64 { writer.totalBytes }

        var heldBytes: Int64 { consent.heldBytes }

        mutating func remember(_ id: EventID, at: UInt64) { dedup.window.insert(id, at: at) }

        mutating func remember(session: EventID, sequence: UInt64, source: String, at: UInt64) {
            dedup.sessions.insert(session: session, sequence: sequence, at: at, source: source)
        }

        mutating func mark(_ mark: OnceKeyStore.Mark) { consent.mark(mark) }
    }
}

extension CommitPipeline.StateMachine.Event {
    /// The decision's view of a validated event of a batch from `uid` with `origin` metadata.
    init(_ header: EventHeader, frame: [UInt8], origin: [UInt8], uid: UInt32?) {
        self.init(
            id: header.id, session: header.session, sequence: header.sequence, consent: ConsentKey(header),
            onceKey: header.onceKeyLength > 0 ? OnceKeyStore.Mark(key: header.onceKey(in: frame)) : nil,
            source: header.session == nil ? "" : header.source(in: frame),
            recordBytes: Int64(LogRecord.framedSize(frameSize: frame.count, metadataSize: origin.count)),
            heldBytes: Int64(LogRecord.framedSize(frameSize: frame.count)),
            uid: uid, countsUsage: uid != nil && !origin.isEmpty)
    }
}
