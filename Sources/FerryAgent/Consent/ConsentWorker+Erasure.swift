import FerryProtocol
import FerryStorage

// The upstream side of `ferry forget --user` (docs/CONSENT.md, "Erasure upstream"): the
// request is planned into the forget's journal and added to the erasure outbox as one of the
// change's idempotent steps, so the local purge and the request are one durable unit.

extension ConsentWorker {
    /// Plans the upstream erasure of `userID` into `journal`: a new request for every sink that
    /// may have delivered the user's events (``ErasureTargets``, from the queue records the
    /// journal already covers and each sink's cursor). No sink: nothing is recorded.
    func planUpstreamErasure(userID: String, into journal: inout ConsentJournal) throws {
        guard let erasures else { return }
        let sinks = erasures.sinks.map {
            ErasureTargets.Sink(name: $0.name, cursor: mainLog.cursor(for: $0.name), batchMaxBytes: $0.batchMaxBytes)
        }
        // The first record an earlier purge erased: whose it was is no longer known.
        var firstErased: LogPosition?
        try mainLog.forEachRecord { event in
            if event.isErased, firstErased == nil { firstErased = event.position }
        }
        let targets = ErasureTargets.sinks(sinks, covered: journal.eraseQueued.map(\.position),
                                           firstSegment: mainLog.startPosition.segment,
                                           deliveryStarted: engine.snapshot().deliveryStarted, firstErased: firstErased)
        guard !targets.isEmpty else { return }
        let now = journal.entry.map { UInt64($0.at) } ?? WallClock.unixMilliseconds()
        let request = SinkErasure(id: EventIDGenerator().next(unixMilliseconds: now).description, userID: userID, requestedAt: now)
        journal.erasure = ConsentJournal.UpstreamErasure(request: request, sinks: targets)
    }

    /// Adds the journal's upstream erasure to the outbox, or settles its outcome there; each at
    /// most once, whatever ran before a crash.
    ///
    /// Crash points (docs/FAULTS.md): `consent.erasure.recorded` once the request is in the
    /// outbox, `consent.erasure.settled` once an outcome is.
    func recordUpstreamErasure(_ journal: ConsentJournal) throws {
        guard let erasures else { return }
        if let erasure = journal.erasure {
            try erasures.add(erasure.request, sinks: erasure.sinks)
            try CrashPoints.reach("consent.erasure.recorded")
        }
        if let outcome = journal.erasureOutcome {
            try erasures.settle(outcome)
            try CrashPoints.reach("consent.erasure.settled")
        }
    }
}
