import FerryPeer
import FerryProtocol
import FerryStorage
import FerryThreads

/// Routes one control request (JSON in, JSON out; the types are FerryProtocol's
/// ``ControlRequest`` and replies): checks the caller's rights, answers the ops that read
/// (status, metrics, whoami, consent state, audit log) itself, hands dead-letter replays to the
/// ``DeadLetterReplayer``, quarantine replays and drops to the ``QuarantineReplayer`` and the consent changes (and `start`) to the commit thread, which
/// applies them between two groups.
struct ControlRouter: Sendable {
    /// The agent's mode (`whoami` tells it).
    let mode: AgentConfiguration.Mode
    /// The agent's metric store (refusals by the access policy are counted).
    let metrics: AgentMetrics
    /// The running agent's parts, nil while it starts.
    let running: @Sendable () -> RunningAgent?
    /// Builds the `status` reply.
    let status: AgentStatusReport
    /// Sets the gauges before the `metrics` exposition.
    let gauges: AgentGauges
    /// Answers `deadletter_replay`.
    let replayer: DeadLetterReplayer
    /// Answers `quarantine_replay` and `quarantine_drop`.
    let quarantine = QuarantineReplayer()
    /// Answers `reload`: reads the configuration again and applies it, as SIGHUP does.
    let reload: @Sendable () async -> ReloadReply

    /// Which right `operation` needs from a caller who may (or may not) send events: nil for
    /// none. Reading ops are open to whoever may send events; changes (and the audit log, which
    /// names callers) need the control policy; `whoami` is answered to everyone.
    static func requiredScope(for operation: ControlRequest.Operation, mayIngest: @autoclosure () -> Bool) -> AccessControl.Scope? {
        switch operation {
        case .whoami: nil
        case .status, .metrics, .consentState: mayIngest() ? nil : .control
        default: .control
        }
    }

    /// Answers `request` from `peer`; `reply` is called exactly once, from whichever thread
    /// finishes the work.
    func handle(_ request: [UInt8], peer: PeerCredentials?, reply: @escaping @Sendable ([UInt8]) -> Void) {
        @Sendable func fail(_ refusal: ControlRefusal) { reply(controlReplyJSON(refusal)) }
        let decoded: ControlRequest
        do {
            decoded = try ControlRequest.decode(json: request)
        } catch {
            return fail(error)
        }
        guard let running = running() else { return fail(ControlRefusal("agent starting")) }
        if let scope = Self.requiredScope(for: decoded.operation, mayIngest: running.access.allows(.ingest, peer)),
           !running.access.allows(scope, peer) {
            metrics.accessDenied.increment()
            return fail(ControlRefusal(running.access.refusal(scope, peer), code: ControlRefusal.accessDenied))
        }
        let engine = running.consent
        let command: ConsentCommand
        switch decoded.operation {
        case .status:
            return reply(controlReplyJSON(status.reply(running)))
        case .metrics:
            gauges.update(from: running)
            return reply(controlReplyJSON(MetricsReply(text: String(decoding: metrics.backend.exposition(), as: UTF8.self))))
        case .whoami:
            let rights = running.access.rights(of: peer)
            return reply(controlReplyJSON(WhoAmIReply(
                uid: peer?.uid, gid: peer?.gid, pid: peer?.pid, mode: mode.rawValue,
                ingest: rights[.ingest] ?? false, control: rights[.control] ?? false, events: rights[.events] ?? false)))
        case .consentState:
            return reply(controlReplyJSON(ConsentUpdate(consent: engine.snapshot())))
        case .forgetStatus:
            return reply(controlReplyJSON(ErasureStatusReply(erasures: running.erasures?.statuses ?? [])))
        case .deadLetterReplay(let id, let sink):
            let replayer = self.replayer, deliveries = running.deliveries
            Task { reply(controlReplyJSON(await replayer.replay(id: id, sink: sink, deliveries: deliveries))) }
            return
        case .quarantineReplay(let id):
            let quarantine = self.quarantine
            Task { reply(controlReplyJSON(await quarantine.replay(id: id, running: running))) }
            return
        case .quarantineDrop(let id):
            let quarantine = self.quarantine
            Task { reply(controlReplyJSON(await quarantine.drop(id: id, running: running))) }
            return
        case .recipients(let userID):
            // Reads the log: off the caller's thread and off the pool.
            let sinks = running.erasures?.sinks ?? running.sinks.map { ErasureOutbox.SinkInfo(name: $0.name, batchMaxBytes: $0.batch.maxBytes) }
            let log = running.log, history = running.history
            Task {
                do {
                    let inputs = try await BlockingExecutor.runDetached(name: "ferry-recipients") {
                        try RecipientInputs.gather(userID: userID, log: log, sinks: sinks, history: history,
                                                   deliveryStarted: engine.snapshot().deliveryStarted) { engine.category(of: $0) }
                    }
                    reply(controlReplyJSON(RecipientsReply(sinks: zip(inputs.sinks, inputs.verdicts).map { $1.status(sink: $0.name) })))
                } catch {
                    fail(ControlRefusal("cannot read the log: \(error)"))
                }
            }
            return
        case .reload:
            let reload = self.reload
            Task { reply(controlReplyJSON(await reload())) }
            return
        case .consentLog(let limit):
            let persisted = engine.persisted
            do {
                let verification = try running.auditLog.verify(expectedHead: (persisted.auditSeq, persisted.auditHead))
                var entries = verification.entries
                if let limit, limit >= 0, entries.count > limit { entries = Array(entries.suffix(limit)) }
                return reply(controlReplyJSON(ConsentAuditLog(entries: entries, verified: verification.problem == nil,
                                                              problem: verification.problem)))
            } catch {
                return fail(ControlRefusal("cannot read the audit log: \(error)"))
            }
        case .setTracking(let enabled): command = .setTracking(enabled)
        case .setConsent(let category, let status): command = .setConsent(category: category, status: status)
        case .setPersistence(let status): command = .setPersistence(status)
        case .setGDPR(let fields): command = .setGDPR(fields)
        case .enableFeatures(let names): command = .enableFeatures(names)
        case .disableFeatures(let names): command = .disableFeatures(names)
        case .purge(let category): command = .purge(category: category)
        case .forget(let userID): command = .forget(userID: userID)
        case .start: command = .start
        }
        var actor = ConsentActor(uid: peer?.uid, pid: peer?.pid, process: peer.flatMap { processName(of: $0.pid) })
        if let text = decoded.actor { actor.actor = String(decoding: text.utf8.prefix(200), as: UTF8.self) }
        let submitted = running.pipeline.submit(command, by: actor) { result in
            switch result {
            case .success(let outcome):
                var deliveryStarted: Bool?
                if case .start = command { deliveryStarted = true }
                reply(controlReplyJSON(ConsentUpdate(consent: outcome.snapshot, purged: outcome.purged, deliveryStarted: deliveryStarted)))
            case .failure(let error):
                fail(ControlRefusal(error.message, valid: error.valid))
            }
        }
        if !submitted { fail(ControlRefusal("the agent is shutting down")) }
    }
}
