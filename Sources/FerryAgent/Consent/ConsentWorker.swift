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
}

/// The result of a consent command.
struct ConsentOutcome: Sendable {
    var snapshot: ConsentSnapshot
    var purged: PurgeReport?
}

/// The consent side of the commit thread: it owns the once-key marks, the held area's writer,
/// the state file and the audit log, and applies every consent change between two groups.
/// Not `Sendable`: it lives on the commit thread only.
final class ConsentWorker {
    let engine: ConsentEngine
    let onceKeys: OnceKeyStore
    let heldLog: SegmentedLog
    private let heldWriter: LogWriter
    private let stateFile: ConsentStateFile
    private let auditLog: AuditLog
    private let mainLog: SegmentedLog
    private let logger: Logger
    private let ids = EventIDGenerator()
    private var consentSequence: UInt64 = 0
    private var lastExpiryCheck: UInt64 = 0
    /// When the oldest live held event was accepted (`nil`: the held area is empty), so hold
    /// expiry reads the held area only when something has actually expired.
    private var oldestHeldAt: UInt64?
    /// Where the `consent` and `purged` bus messages go.
    private let mailbox: SocketMailbox

    init(engine: ConsentEngine, heldLog: SegmentedLog, onceKeys: OnceKeyStore, mainLog: SegmentedLog,
         stateFile: ConsentStateFile, auditLog: AuditLog, mailbox: SocketMailbox, logger: Logger) throws {
        self.mailbox = mailbox
        self.engine = engine
        self.heldLog = heldLog
        self.onceKeys = onceKeys
        self.mainLog = mainLog
        self.stateFile = stateFile
        self.auditLog = auditLog
        self.logger = logger
        heldWriter = try LogWriter(log: heldLog)
        let live = try liveHeldEvents()
        engine.setHeldEvents(live.count)
        oldestHeldAt = live.first?.acceptedAt
    }

    // MARK: Ingest

    /// Appends a held event to the held area's current group.
    func hold(frame: [UInt8], acceptedAt: UInt64, encodedMetadata: [UInt8] = []) throws {
        try heldWriter.append(frame: frame, acceptedAt: acceptedAt, encodedMetadata: encodedMetadata)
        if oldestHeldAt == nil { oldestHeldAt = acceptedAt }
    }

    /// Commits the held group (after the main log's) and the once-key marks.
    func commitGroup(heldAppended: Int) throws {
        if heldAppended > 0 {
            try heldWriter.commit()
            engine.addHeldEvents(heldAppended)
        }
    }

    /// Bytes in the held area, for its size cap.
    var heldBytes: Int64 { heldWriter.totalBytes }

    // MARK: Commands

    /// Applies one command: persist (audit entry, then state file), apply, then side effects
    /// (purge, release of held events, a `consent_updated` event). Runs on the commit thread.
    func apply(_ command: ConsentCommand, by actor: ConsentActor, writer: LogWriter) throws -> ConsentOutcome {
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
        }

        let oldText = action ? "null" : Self.describe(before, change: change)
        let newText: String
        switch command {
        case .purge(let category): newText = Self.json(["category": category ?? "*"])
        case .forget: newText = Self.json(["user": "<erased>"])  // the id itself is not kept in the audit log
        case .start: newText = "true"
        default: newText = Self.describe(after, change: change)
        }
        if !action && oldText == newText && before.persistence == after.persistence {
            return ConsentOutcome(snapshot: engine.snapshot(), purged: nil)
        }

        // Persist: the audit entry first (intent), then the state that reflects it.
        let entry = AuditEntry(seq: before.auditSeq + 1, at: WallClock.unixMilliseconds(), who: actor,
                               change: change, old: oldText, new: newText, prev: before.auditHead)
        try auditLog.append(entry)
        after.auditSeq = entry.seq
        after.auditHead = entry.hash
        let anonymousID = engine.snapshot().anonymousID
        if after.persistence == .granted {
            after.anonymousID = anonymousID
        } else {
            after.anonymousID = nil
            if before.persistence == .granted { engine.setAnonymousID(EventIDGenerator().next().description) }
        }
        try stateFile.save(after)
        engine.apply(after)
        if case .start = command { engine.startDelivery() }

        // Side effects.
        var report: PurgeReport?
        for scope in purge {
            let result = try erase(scope, writer: writer)
            report = PurgeReport(queued: (report?.queued ?? 0) + result.queued, held: (report?.held ?? 0) + result.held)
        }
        for category in release { try releaseHeld(category: category, writer: writer) }
        if !action && engine.upstreamAllowed {
            try enqueueConsentUpdated(change: change, old: oldText, new: newText, writer: writer)
        }
        mailbox.publish(.consent, Self.jsonBytes([
            "topic": "consent", "change": change, "old": oldText, "new": newText, "at": Int(entry.at), "seq": entry.seq,
        ]))
        if let report {
            var message: [String: Any] = ["topic": "purged", "queued": report.queued, "held": report.held, "total": report.total]
            message["reason"] = change
            mailbox.publish(.purged, Self.jsonBytes(message))
            logger.notice("purged events", metadata: ["reason": "\(change)", "queued": "\(report.queued)", "held": "\(report.held)"])
        }
        return ConsentOutcome(snapshot: engine.snapshot(), purged: report)
    }

    // MARK: Purge, release, expiry

    /// Erases matching events from the queue and the held area, and tells the send-time gate.
    private func erase(_ scope: ConsentEngine.Erasure.Scope, writer: LogWriter) throws -> PurgeReport {
        let engine = self.engine
        func matches(_ event: StoredEvent) -> Bool {
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
        // The end of the committed log: everything before it is erased now; the gate refuses
        // matching events read before this moment that are not yet on the wire.
        let end = mainLog.endPosition
        engine.recordErasure(ConsentEngine.Erasure(scope: scope, upTo: end))
        let cursor = mainLog.cursor
        // Delivered records still on disk are erased too: nothing of theirs should remain.
        let queued = try mainLog.erase(from: mainLog.startPosition, matching: matches)
        let held = try eraseHeld(matches)
        return PurgeReport(queued: queued.count { $0.position >= cursor }, held: held)
    }

    /// The held events that are not erased, oldest first.
    private func liveHeldEvents() throws -> [StoredEvent] {
        var events: [StoredEvent] = []
        var position = heldLog.startPosition
        while true {
            let (batch, next) = try heldLog.read(from: position, maxEvents: 4096, maxBytes: 4 << 20)
            events += batch.filter { !$0.isErased }
            if batch.isEmpty || next == position { break }
            position = next
        }
        return events
    }

    private func eraseHeld(_ matches: (StoredEvent) -> Bool) throws -> Int {
        let erased = try heldLog.erase(from: heldLog.startPosition, matching: matches)
        if !erased.isEmpty { try compactHeld() }
        return erased.count
    }

    /// Deletes held segments that hold nothing live any more and refreshes the count.
    private func compactHeld() throws {
        let live = try liveHeldEvents()
        let liveSegments = Set(live.map(\.position.segment))
        try heldWriter.deleteSegments(keeping: liveSegments)
        engine.setHeldEvents(live.count)
        oldestHeldAt = live.first?.acceptedAt
    }

    /// Moves held events of `category` to the queue (committed there first, then erased from
    /// the held area; a crash in between re-queues them once more, and the event ids make that
    /// harmless upstream).
    private func releaseHeld(category: String, writer: LogWriter) throws {
        let engine = self.engine
        let released = try liveHeldEvents().filter { event in
            guard let header = try? event.header() else { return false }
            return engine.category(of: header) == category
        }
        guard !released.isEmpty else { return }
        for event in released { try writer.append(frame: event.frame, acceptedAt: event.acceptedAt, metadata: event.metadata) }
        try writer.commit()
        let ids = Set(released.map(\.decodedID))
        _ = try eraseHeld { ids.contains($0.decodedID) }
        logger.info("released held events", metadata: ["category": "\(category)", "events": "\(released.count)"])
    }

    /// Purges held events older than the configured maximum hold age (checked about once a second).
    func expireHeld(now: UInt64) {
        guard let maxAge = engine.configuration.undetermined.maxHoldAgeSeconds, now >= lastExpiryCheck + 1000 else { return }
        lastExpiryCheck = now
        let limit = now > UInt64(maxAge) * 1000 ? now - UInt64(maxAge) * 1000 : 0
        guard let oldest = oldestHeldAt, oldest < limit else { return }
        do {
            let erased = try eraseHeld { $0.acceptedAt < limit }
            if erased == 0 {
                // Only a rolled-back group can leave the mark stale: take it from the disk again.
                oldestHeldAt = try liveHeldEvents().first?.acceptedAt
            } else {
                mailbox.publish(.purged, Self.jsonBytes(["topic": "purged", "queued": 0, "held": erased, "total": erased, "reason": "hold_expired"]))
                logger.info("held events expired", metadata: ["events": "\(erased)"])
            }
        } catch {
            logger.error("could not expire held events", metadata: ["error": "\(error)"])
        }
    }

    /// Queues a `consent_updated` event (category `consent`) for the upstream.
    private func enqueueConsentUpdated(change: String, old: String, new: String, writer: LogWriter) throws {
        consentSequence += 1
        let snapshot = engine.snapshot()
        let properties = Self.jsonBytes([
            "change": change, "old": old, "new": new,
            "tracking_enabled": snapshot.trackingEnabled, "enabled_features": snapshot.enabledFeatures,
            "consent": snapshot.consent.mapValues(\.rawValue), "gdpr": snapshot.gdpr.stamp,
            "persistence": snapshot.persistence.rawValue, "anonymous_id": snapshot.anonymousID,
        ])
        let now = WallClock.unixMilliseconds()
        let event = WireEvent(
            id: ids.next(unixMilliseconds: now), timestamp: now, sequence: consentSequence, pid: UInt32(getpid()),
            type: .track, category: ConsentCategories.consentCode, source: "ferryd", name: "consent_updated",
            properties: properties)
        try writer.append(frame: event.encoded(), acceptedAt: now)
        try writer.commit()
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
