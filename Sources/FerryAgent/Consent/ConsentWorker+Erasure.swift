import FerryProtocol
import FerryStorage

// The upstream side of `ferry forget --user` (docs/CONSENT.md, "Erasure upstream"): the
// request is planned into the forget's journal and added to the erasure outbox as one of the
// change's idempotent steps, so the local purge and the request are one durable unit.

extension ConsentWorker {
    /// Plans the upstream erasure of `userID` into `journal`: a new request for every sink that
    /// may have delivered the user's events (``ErasureTargets``, the rule `ferry recipients`
    /// reports, from the user's records in the log, each sink's cursor and policy and the consent
    /// history). No sink: nothing is recorded.
    func planUpstreamErasure(userID: String, into journal: inout ConsentJournal) throws {
        guard let erasures else { return }
        let targets = try recipients(userID: userID, sinks: erasures.sinks).targets
        guard !targets.isEmpty else { return }
        let now = journal.entry.map { UInt64($0.at) } ?? WallClock.unixMilliseconds()
        let request = SinkErasure(id: EventIDGenerator().next(unixMilliseconds: now).description, userID: userID, requestedAt: now)
        journal.erasure = ConsentJournal.UpstreamErasure(request: request, sinks: targets)
    }

    /// The inputs of ``ErasureTargets`` for `userID` as the log holds them now (on the commit
    /// thread the log is stable between two groups).
    func recipients(userID: String, sinks: [ErasureOutbox.SinkInfo]) throws -> RecipientInputs {
        let engine = self.engine
        return try RecipientInputs.gather(userID: userID, log: mainLog, sinks: sinks, history: history,
                                          deliveryStarted: engine.snapshot().deliveryStarted) { engine.category(of: $0) }
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
