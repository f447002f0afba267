import FerryProtocol
import FerryStorage
import Foundation
import Logging

/// A consent change or action requested on the control socket.
enum ConsentCommand: Sendable {
    case setTracking(Bool)
    case setConsent(category: String, status: ConsentStatus)
    case setPersistence(ConsentStatus)
    case setGDPR([String: GDPRValue])
    case enableFeatures([String])
    case disableFeatures([String])
    case purge(category: String?)
    case forget(userID: String)
    case start
    /// An upstream erasure's outcome at one sink (from its ``ErasureSender``): audited and
    /// settled in the erasure outbox.
    case erasureOutcome(ErasureOutcome)
}

/// The result of a consent command.
struct ConsentOutcome: Sendable {
    var snapshot: ConsentSnapshot
    var purged: PurgeReport?
}

/// The consent side of the commit thread: it owns the once-key marks, the held area's writer,
/// the state file, the audit log and the journal of unfinished changes, and applies every consent
/// change between two groups. Not `Sendable`: it lives on the commit thread only.
///
/// A change and its effects are one durable unit (docs/CONSENT.md, "Durable changes"): the change
/// is planned first (the new state, its audit entry, the exact records, dead letters and held
/// events it covers, the `consent_updated` event it queues), the plan is written to
/// `consent/pending` (the moment the change happens), and only then carried out, every step
/// idempotent. If anything interrupts it, ``finish(_:writer:)`` completes it: at start before
/// anything is accepted or delivered, before the next consent request, or on the next tick.
final class ConsentWorker {
    let engine: ConsentEngine
    let onceKeys: OnceKeyStore
    let heldLog: SegmentedLog
    private let heldWriter: LogWriter
    private let stateFile: ConsentStateFile
    private let auditLog: AuditLog
    private let journalFile: ConsentJournalFile
    private let deadLetters: DeadLetterStore
    /// The quarantine, which erasures reach like the queue (nil: none).
    let quarantine: QuarantineStore?
    let mainLog: SegmentedLog
    private let logger: Logger
    private let ids = EventIDGenerator()
    private var consentSequence: UInt64 = 0
    private var lastExpiryCheck: UInt64 = 0
    private var lastPendingRetry: UInt64 = 0
    /// When the oldest live held event was accepted (`nil`: the held area is empty), so hold
    /// expiry reads the held area only when something has actually expired.
    private var oldestHeldAt: UInt64?
    /// Where the `consent` and `purged` bus messages go.
    private let bus: EventBus
    /// The upstream erasures `forget` records (``ErasureOutbox``); `nil`: none are recorded.
    let erasures: ErasureOutbox?
    /// A change that happened (its journal is on disk) whose effects are not all done yet.
    private(set) var pending: ConsentJournal?
    /// Since when each category has not been granted (``RecipientHistory``), noted after every
    /// change of state.
    let history: RecipientHistory

    init(engine: ConsentEngine, heldLog: SegmentedLog, onceKeys: OnceKeyStore, mainLog: SegmentedLog,
         stateFile: ConsentStateFile, auditLog: AuditLog, journalFile: ConsentJournalFile, deadLetters: DeadLetterStore,
         pending: ConsentJournal?, bus: EventBus, erasures: ErasureOutbox? = nil, quarantine: QuarantineStore? = nil,
         history: RecipientHistory = RecipientHistory(), logger: Logger) throws {
        self.quarantine = quarantine
        self.history = history
        self.bus = bus
        self.erasures = erasures
        self.engine = engine
        self.heldLog = heldLog
        self.onceKeys = onceKeys
        self.mainLog = mainLog
        self.stateFile = stateFile
        self.auditLog = auditLog
        self.journalFile = journalFile
        self.deadLetters = deadLetters
        self.pending = pending
        self.logger = logger
        heldWriter = try LogWriter(log: heldLog)
        let live = try liveHeldEvents()
        engine.setHeldEvents(live.count)
        oldestHeldAt = live.first?.acceptedAt
        noteConsent()
    }

    /// Notes the host's consent as it is now, from the log's end on (``RecipientHistory``).
    private func noteConsent() {
        history.noteConsent(engine.sinkConsent, categories: engine.configuration.categoryNames, at: mainLog.endPosition,
                            now: WallClock.unixMilliseconds())
    }

    // MARK: Ingest

    /// Appends a held event to the held area's current group.
    func hold(frame: [UInt8], acceptedAt: UInt64, encodedMetadata: [UInt8] = []) throws {
        try heldWriter.append(frame: frame, acceptedAt: acceptedAt, encodedMetadata: encodedMetadata)
        if oldestHeldAt == nil { oldestHeldAt = acceptedAt }
    }

    /// Commits the held group (after the main log's).
    func commitGroup(heldAppended: Int) throws {
        if heldAppended > 0 {
            try heldWriter.commit()
            engine.addHeldEvents(heldAppended)
        }
    }

    /// Bytes in the held area, for its size cap.
    var heldBytes: Int64 { heldWriter.totalBytes }

    /// The ingest gate's verdict on events of `key` under the current state.
    func decide(_ key: ConsentKey) -> IngestDecision { engine.decide(key) }

    /// Whether a once-key's mark was recorded (by an earlier group or an earlier run).
    func isMarked(_ mark: OnceKeyStore.Mark) -> Bool { onceKeys.contains(mark) }

    /// Records a once-key's mark (durable at the next ``commitOnceKeys()``).
    func mark(_ mark: OnceKeyStore.Mark) { onceKeys.insert(mark) }

    /// Writes the once-key marks recorded since the last call and `fdatasync`s them.
    func commitOnceKeys() throws { try onceKeys.commit() }

    // MARK: Commands

    /// Applies one command on the commit thread: plan, journal, then effects (see the type's
    /// documentation). A change left unfinished by an error is finished first, so repeating a
    /// request that failed completes it.
    func apply(_ command: ConsentCommand, by actor: ConsentActor, writer: LogWriter) throws -> ConsentOutcome {
        let unfinished = pending
        if let unfinished { try finish(unfinished, writer: writer) }

        let before = engine.persisted
        var after = before
        let configuration = engine.configuration
        var change: String
        var purge: [ConsentEngine.Erasure.Scope] = []
        var release: [String] = []
        var action = false

        func categories(_ name: String) throws -> [String] {
            if name == "all" { return configuration.categoryNames }
            guard configuration.categories[name] != nil else {
                throw AgentError(code: .invalidRequest, message: "unknown category \"\(name)\"",
                                 valid: configuration.categoryNames + ["all"])
            }
            return [name]
        }

        switch command {
        case .setTracking(let enabled):
            change = "tracking"
            after.trackingEnabled = enabled
        case .setConsent(let name, let status):
            let names = try categories(name)
            change = name == "all" ? "consent" : "consent." + name
            for name in names { after.consent[name] = status }
            let changed = names.filter { before.consent[$0] != status }
            switch status {
            case .denied: purge = changed.map { .category($0) }
            case .granted: release = changed
            case .undetermined: break
            }
        case .setPersistence(let status):
            change = "persistence"
            after.persistence = status
        case .setGDPR(let fields):
            change = "gdpr"
            for (field, value) in fields {
                guard GDPRRecord.fieldNames.contains(field) else {
                    throw AgentError(code: .invalidRequest, message: "unknown GDPR field \"\(field)\"", valid: GDPRRecord.fieldNames)
                }
                after.gdpr[field] = value
            }
            if after.gdpr.forbidsDataUsage && !before.gdpr.forbidsDataUsage { purge = [.everything] }
        case .enableFeatures(let names):
            change = "features"
            after.enabledFeatures = Array(Set(before.enabledFeatures).union(try configuration.featuresValidated(names))).sorted()
        case .disableFeatures(let names):
            change = "features"
            let removed = names.contains("all") ? Set(configuration.categoryNames) : try configuration.featuresValidated(names)
            after.enabledFeatures = Array(Set(before.enabledFeatures).subtracting(removed)).sorted()
            purge = removed.intersection(before.enabledFeatures).sorted().map { .category($0) }
        case .purge(let category):
            change = "purge"
            action = true
            if let category {
                purge = try categories(category).map { .category($0) }
            } else {
                purge = [.everything]
            }
        case .forget(let userID):
            guard !userID.isEmpty else { throw AgentError(code: .invalidRequest, message: "user_id must not be empty") }
            change = "forget"
            action = true
            purge = [.user(userID)]
        case .start:
            change = "start"
            action = true
        case .erasureOutcome:
            change = "erasure"
            action = true
        }

        let oldText = action ? "null" : Self.describe(before, change: change)
        let newText: String
        switch command {
        case .purge(let category): newText = Self.json(["category": category ?? "*"])
        case .forget: newText = Self.json(["user": "<erased>"])  // the id itself is not kept in the audit log
        case .start: newText = "true"
        case .erasureOutcome(let outcome): newText = Self.json(outcome.auditFields)
        default: newText = Self.describe(after, change: change)
        }
        if !action && oldText == newText && before.persistence == after.persistence {
            // Nothing changes; a repeated request still reports what finishing its first try erased.
            return ConsentOutcome(snapshot: engine.snapshot(), purged: unfinished?.purged)
        }

        let entry = AuditEntry(seq: before.auditSeq + 1, at: WallClock.unixMilliseconds(), who: actor,
                               change: change, old: oldText, new: newText, prev: before.auditHead)
        after.auditSeq = entry.seq
        after.auditHead = entry.hash
        var anonymousID = engine.snapshot().anonymousID
        if after.persistence == .granted {
            after.anonymousID = anonymousID
        } else {
            after.anonymousID = nil
            if before.persistence == .granted { anonymousID = EventIDGenerator().next().description }
        }

        // Plan: every effect, from what the logs hold now (the main log is stable between groups).
        var journal = ConsentJournal(entry: entry, state: after, change: change, old: oldText, new: newText,
                                     queueEnd: mainLog.endPosition)
        try plan(erasing: purge, into: &journal)
        try plan(releasing: release, into: &journal)
        if case .forget(let userID) = command { try planUpstreamErasure(userID: userID, into: &journal) }
        if case .erasureOutcome(let outcome) = command { journal.erasureOutcome = outcome }
        if !action && engine.upstreamAllowed(after) {
            journal.consentUpdated = makeConsentUpdated(journal, state: after, anonymousID: anonymousID)
        }

        // The change happens here: once the journal is durable it is finished, whatever happens.
        try journalFile.write(journal)
        pending = journal
        engine.apply(after)
        noteConsent()
        engine.setAnonymousID(anonymousID)
        if case .start = command { engine.startDelivery() }
        for scope in purge { engine.recordErasure(ConsentEngine.Erasure(scope: scope, upTo: journal.queueEnd)) }
        do {
            try CrashPoints.reach("consent.intent")
            try finish(journal, writer: writer)
        } catch {
            throw AgentError(code: .io, message: "the change is recorded but not all its effects are done (\(error)); "
                + "they are finished by the next consent request, within a second, or at the next start")
        }
        return ConsentOutcome(snapshot: engine.snapshot(), purged: journal.purged)
    }

    /// Finishes the change left unfinished at the last run, at start (before anything is accepted
    /// or delivered). Throws if it cannot: the agent must not start with refused events on disk.
    func finishPendingAtStart(writer: LogWriter) throws {
        guard let pending else { return }
        logger.notice("finishing an interrupted consent change", metadata: ["change": "\(pending.change)"])
        try finish(pending, writer: writer)
    }

    /// Periodic work on the commit thread: retries an unfinished change and expires held events
    /// (each about once a second).
    func tick(now: UInt64, writer: LogWriter) {
        if let pending, now >= lastPendingRetry + 1000 {
            lastPendingRetry = now
            do {
                try finish(pending, writer: writer)
            } catch {
                logger.error("could not finish a consent change; retrying", metadata: ["change": "\(pending.change)", "error": "\(error)"])
            }
        }
        expireHeld(now: now, writer: writer)
    }

    // MARK: Plan

    /// Whether `scope` covers `event`.
    private func covers(_ scope: ConsentEngine.Erasure.Scope, _ event: StoredEvent) -> Bool {
        switch scope {
        case .everything: return true
        case .category(let name):
            guard let header = try? event.header() else { return false }
            return engine.category(of: header) == name
        case .user(let id):
            guard let header = try? event.header(), header.userIDLength > 0 else { return false }
            return header.userID(in: event.frame) == id
        }
    }

    /// Records every event the scopes cover: in the queue (delivered records still on disk
    /// too), in the held area and in dead letters.
    private func plan(erasing scopes: [ConsentEngine.Erasure.Scope], into journal: inout ConsentJournal) throws {
        guard !scopes.isEmpty else { return }
        let matches = { (event: StoredEvent) in scopes.contains { self.covers($0, event) } }
        let cursor = mainLog.cursor
        var queued = 0
        try mainLog.forEachRecord { event in
            guard !event.isErased, matches(event) else { return }
            journal.eraseQueued.append(ErasedRecord(event))
            if event.position >= cursor { queued += 1 }
        }
        try heldLog.forEachRecord { event in
            guard !event.isErased, matches(event) else { return }
            journal.eraseHeld.append(ErasedRecord(event))
        }
        journal.deadLetters = try deadLetters.letters(holding: matches).map {
            ConsentJournal.DeadLetterErasure(sink: $0.sink, id: $0.id, events: $0.events.map(\.description))
        }
        journal.quarantine = try planQuarantineErasure(matching: matches)
        journal.purged = PurgeReport(queued: queued, held: journal.eraseHeld.count, quarantined: journal.quarantine.count)
    }

    /// Records the held events of `categories` to move to the queue.
    private func plan(releasing categories: [String], into journal: inout ConsentJournal) throws {
        guard !categories.isEmpty else { return }
        let wanted = Set(categories)
        journal.release = try liveHeldEvents().filter { event in
            guard let header = try? event.header(), let category = engine.category(of: header) else { return false }
            return wanted.contains(category)
        }.map(ErasedRecord.init)
    }

    /// The `consent_updated` event (category `consent`) a change queues for the upstream. Its
    /// `anonymousId` is the agent's anonymous id (random, the consent stamp's `anonymous_id`), so
    /// every upstream that needs a user (Segment's `userId` or `anonymousId`) accepts it, and
    /// nothing about the host goes with it (docs/HTTP-SINK.md, "Ferry's own events").
    private func makeConsentUpdated(_ journal: ConsentJournal, state: PersistedConsent, anonymousID: String) -> ConsentJournal.QueuedEvent {
        consentSequence += 1
        let properties = Self.jsonBytes([
            "change": journal.change, "old": journal.old, "new": journal.new,
            "tracking_enabled": state.trackingEnabled, "enabled_features": state.enabledFeatures.sorted(),
            "consent": state.consent.mapValues(\.rawValue), "gdpr": state.gdpr.stamp,
            "persistence": state.persistence.rawValue, "anonymous_id": anonymousID,
        ])
        let now = WallClock.unixMilliseconds()
        let id = ids.next(unixMilliseconds: now)
        let event = WireEvent(
            id: id, timestamp: now, sequence: consentSequence, pid: UInt32(getpid()),
            type: .track, category: ConsentCategories.consentCode, source: "ferryd", name: "consent_updated",
            properties: properties, anonymousID: anonymousID)
        return ConsentJournal.QueuedEvent(id: id.description, acceptedAt: now, frame: event.encoded())
    }

    // MARK: Finish

    /// Carries out every effect of `journal` that is not done yet, then deletes it. Each step
    /// checks what is already done, so running it again after a crash or an error, at any point,
    /// completes the change exactly once: the audit entry is appended once, recorded records are
    /// rewritten as erased (whatever their bytes now), released events and `consent_updated` are
    /// appended only if not found after the recorded end of the queue.
    private func finish(_ journal: ConsentJournal, writer: LogWriter) throws {
        if let state = journal.state, engine.persisted != state {
            engine.apply(state)
            noteConsent()
        }
        if let entry = journal.entry {
            try auditLog.appendOnce(entry)
            try CrashPoints.reach("consent.audit")
        }
        if let state = journal.state {
            if (try? stateFile.load()) != state { try stateFile.save(state) }
            try CrashPoints.reach("consent.state")
        }
        if !journal.eraseQueued.isEmpty {
            try mainLog.erase(at: journal.eraseQueued) { try CrashPoints.reach("consent.erase.queued") }
        }
        if !journal.eraseHeld.isEmpty {
            try heldLog.erase(at: journal.eraseHeld) { try CrashPoints.reach("consent.erase.held") }
        }
        for letter in journal.deadLetters {
            if try deadLetters.remove(events: Set(letter.events.compactMap(EventID.init)), sink: letter.sink, id: letter.id) > 0 {
                try CrashPoints.reach("consent.deadletter")
            }
        }
        try finishQuarantineErasure(journal)
        try recordUpstreamErasure(journal)
        if !journal.release.isEmpty || journal.consentUpdated != nil {
            do {
                try appendOnce(journal, writer: writer)
            } catch {
                writer.discardGroup()
                throw error
            }
        }
        if !journal.release.isEmpty {
            try heldLog.erase(at: journal.release) { try CrashPoints.reach("consent.release.held") }
        }
        if !journal.eraseHeld.isEmpty || !journal.release.isEmpty {
            try compactHeld()
            try CrashPoints.reach("consent.held.compact")
        }
        try CrashPoints.reach("consent.done")
        try journalFile.delete()
        pending = nil
        announce(journal)
    }

    /// Appends the released held events and `consent_updated`, each unless it is already in the
    /// queue after the recorded end (a crash after it was committed).
    private func appendOnce(_ journal: ConsentJournal, writer: LogWriter) throws {
        var present = Set<EventID>()
        try mainLog.forEachRecord(from: journal.queueEnd) { present.insert($0.decodedID) }
        var appended = 0
        for record in journal.release where !present.contains(record.eventID) {
            // Still held: the held copy is erased only after the queued one is committed.
            guard let event = try heldLog.record(at: record.position, size: record.size), !event.isErased else { continue }
            // With what the agent recorded about it when it was held (its origin).
            try writer.append(frame: event.frame, acceptedAt: event.acceptedAt, metadata: event.metadata)
            present.insert(record.eventID)
            appended += 1
            try CrashPoints.reach("consent.release.append")
        }
        if appended > 0 {
            try writer.commit()
            try CrashPoints.reach("consent.release.commit")
            logger.info("released held events", metadata: ["events": "\(appended)"])
        }
        if let event = journal.consentUpdated, let id = EventID(event.id), !present.contains(id) {
            try writer.append(frame: event.frame, acceptedAt: event.acceptedAt)
            try writer.commit()
            try CrashPoints.reach("consent.updated")
        }
    }

    /// Publishes a finished change on the `consent` and `purged` topics.
    private func announce(_ journal: ConsentJournal) {
        if let entry = journal.entry {
            bus.publishConsent(change: journal.change, old: journal.old, new: journal.new, at: Int(entry.at), seq: entry.seq)
        }
        if let report = journal.purged {
            bus.publishPurged(queued: report.queued, held: report.held, quarantined: report.quarantined, total: report.total, reason: journal.change,
                              at: Int(journal.entry.map { UInt64($0.at) } ?? WallClock.unixMilliseconds()))
            if journal.entry != nil {
                logger.notice("purged events", metadata: ["reason": "\(journal.change)", "queued": "\(report.queued)",
                                                          "held": "\(report.held)", "quarantined": "\(report.quarantined)",
                                                          "dead_letters": "\(journal.deadLetters.count)"])
            } else {
                logger.info("held events expired", metadata: ["events": "\(report.held)"])
            }
        }
    }

    // MARK: The held area

    /// The held events that are not erased, oldest first.
    private func liveHeldEvents() throws -> [StoredEvent] {
        var events: [StoredEvent] = []
        try heldLog.forEachRecord { if !$0.isErased { events.append($0) } }
        return events
    }

    /// Deletes held segments that hold nothing live any more and refreshes the count.
    private func compactHeld() throws {
        let live = try liveHeldEvents()
        let liveSegments = Set(live.map(\.position.segment))
        try heldWriter.deleteSegments(keeping: liveSegments)
        engine.setHeldEvents(live.count)
        oldestHeldAt = live.first?.acceptedAt
    }

    /// Erases held events older than the configured maximum hold age (checked about once a
    /// second), through a journal like any change.
    private func expireHeld(now: UInt64, writer: LogWriter) {
        guard pending == nil, let maxAge = engine.configuration.undetermined.maxHoldAgeSeconds,
              now >= lastExpiryCheck + 1000 else { return }
        lastExpiryCheck = now
        let limit = now > UInt64(maxAge) * 1000 ? now - UInt64(maxAge) * 1000 : 0
        guard let oldest = oldestHeldAt, oldest < limit else { return }
        do {
            let expired = try liveHeldEvents().filter { $0.acceptedAt < limit }
            guard !expired.isEmpty else {
                // Only a rolled-back group can leave the mark stale: take it from the disk again.
                oldestHeldAt = try liveHeldEvents().first?.acceptedAt
                return
            }
            var journal = ConsentJournal(entry: nil, state: nil, change: "hold_expired", old: "null", new: "null",
                                         queueEnd: mainLog.endPosition)
            journal.eraseHeld = expired.map(ErasedRecord.init)
            journal.purged = PurgeReport(queued: 0, held: expired.count)
            try journalFile.write(journal)
            pending = journal
            try CrashPoints.reach("consent.intent")
            try finish(journal, writer: writer)
        } catch {
            logger.error("could not expire held events", metadata: ["error": "\(error)"])
        }
    }

    // MARK: JSON helpers

    private static func describe(_ state: PersistedConsent, change: String) -> String {
        switch change {
        case "tracking": return state.trackingEnabled ? "true" : "false"
        case "persistence": return json(state.persistence.rawValue)
        case "gdpr": return json(state.gdpr.stamp)
        case "features": return json(state.enabledFeatures.sorted())
        case "consent": return json(state.consent.mapValues(\.rawValue))
        default:
            if change.hasPrefix("consent.") { return json((state.consent[String(change.dropFirst(8))] ?? .undetermined).rawValue) }
            return "null"
        }
    }

    static func json(_ value: Any) -> String {
        String(decoding: jsonBytes(value), as: UTF8.self)
    }

    static func jsonBytes(_ value: Any) -> [UInt8] {
        Array((try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .fragmentsAllowed])) ?? Data("null".utf8))
    }
}

extension ConsentConfiguration {
    /// ``features(_:)`` with the valid values attached to the error.
    func featuresValidated(_ names: [String]) throws -> Set<String> {
        do {
            return try features(names)
        } catch {
            throw AgentError(code: .invalidRequest, message: error.message.components(separatedBy: ";").first ?? error.message,
                             valid: categoryNames + ["all", "none"])
        }
    }
}
