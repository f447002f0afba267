import FerryProtocol
import FerryQuality
import FerryStorage
import Synchronization

/// The quality stage of the ingest chain (docs/QUALITY.md): the compiled ``QualityGate``
/// (redaction, then the tracking plan) and what happens to an event that breaks the plan.
/// Immutable; a reload builds a new one and swaps it in whole (``QualityStageHolder``).
final class QualityStage: Sendable {
    /// The gate, compiled once per load.
    let gate: QualityGate
    /// The plan's action (`quality.onViolation`).
    let action: ViolationAction
    /// The plan alone, without redaction: what a quarantined event (redacted when it was
    /// quarantined) is judged by again on replay — redacting it again would hash a hash.
    let planOnly: QualityGate

    /// A stage applying `gate` with `action`.
    init(gate: QualityGate, action: ViolationAction) {
        self.gate = gate
        self.action = action
        planOnly = QualityGate(plan: gate.plan, allowUnplanned: gate.allowUnplanned, redactor: nil)
    }

    /// What is in effect, for the reload's log line: `plan 2 events, redaction on, onViolation quarantine`.
    var description: String {
        "plan \(gate.plan.map { "\($0.summary.count) events" } ?? "none"), redaction \(gate.redactor == nil ? "off" : "on"), onViolation \(action.rawValue)"
    }

    /// Loads the plan and the redaction key the configuration names and compiles them (file
    /// reads: call it off the socket thread and the event loops). Nil when there is neither a
    /// plan nor a redaction table. Throws ``AgentError`` (`configuration`) naming the key.
    static func load(_ configuration: AgentConfiguration) throws -> QualityStage? {
        let plan = try loadPlan(configuration)
        let redactor = try loadRedactor(configuration)
        let gate = QualityGate(plan: plan, allowUnplanned: configuration.quality.configuration.allowUnplanned, redactor: redactor)
        return gate.isEmpty ? nil : QualityStage(gate: gate, action: configuration.quality.configuration.onViolation)
    }

    /// The plan the configuration names (`quality.plan`), compiled; nil without one. Throws
    /// ``AgentError`` (`configuration`) starting with the key.
    static func loadPlan(_ configuration: AgentConfiguration) throws -> TrackingPlan? {
        do {
            return try configuration.quality.configuration.planPath.map { try TrackingPlan.load(path: $0) }
        } catch {
            throw AgentError(code: .configuration, message: "quality.plan: \(error)")
        }
    }

    /// The redactor of the configuration's `redact` table, its key file read; nil without the
    /// table. Throws ``AgentError`` (`configuration`) naming the key.
    static func loadRedactor(_ configuration: AgentConfiguration) throws -> Redactor? {
        do {
            return try configuration.redact.map { try Redactor.load(configuration: $0.configuration) }
        } catch {
            // The error names its key itself (`redact: rules[0].path: …`, `redact.keyFile …`).
            throw AgentError(code: .configuration, message: "\(error)")
        }
    }

    /// Whether the gate passes the event in `frame` untouched, judged from the frame's bytes in
    /// place without decoding it (``QualityGate/passesUntouched(frame:header:)``): the common
    /// case, stored as it came.
    @inline(__always)
    func passesUntouched(_ header: EventHeader, frame: [UInt8]) -> Bool {
        gate.passesUntouched(frame: frame, header: header)
    }

    /// A frame the gate does not pass untouched, decoded and judged: redacted events are
    /// re-encoded (the raw value never reaches the log, the quarantine or the bus); one that
    /// breaks the plan is refused (`block`: `rejected`/`plan_violation`), quarantined
    /// (`quarantine`: written by the commit thread before its ack) or tagged (`tag`:
    /// `context.ferry.violations`). Violations and redactions are counted.
    func judged(_ header: EventHeader, frame: [UInt8], metrics: AgentMetrics) -> IngestBatch.Item {
        let event: WireEvent
        do {
            event = try WireEvent(decoding: frame)
        } catch {
            return .refused(AckEntry(id: header.id, status: .rejected, reason: error.rejectReason), frame: frame)
        }
        let judgement = gate.judge(event)
        if judgement.redacted { metrics.redacted.increment() }
        for violation in judgement.violations { metrics.recordViolation(event: violation.event, rule: violation.rule) }
        if judgement.violations.isEmpty {
            return judgement.redacted ? Self.item(judgement.event) : .event(header, frame: frame)
        }
        let judged = judgement.redacted ? judgement.event.encoded() : frame
        switch action {
        case .block:
            return .refused(AckEntry(id: header.id, status: .rejected, reason: .planViolation), frame: judged)
        case .quarantine:
            guard let judgedHeader = try? EventHeader(judged) else {
                return .refused(AckEntry(id: header.id, status: .rejected, reason: .malformed), frame: judged)
            }
            return .quarantine(judgedHeader, frame: judged, violations: Self.json(judgement.violations))
        case .tag:
            return Self.item(judgement.event.tagged(with: judgement.violations))
        }
    }

    /// The violations as one JSON array.
    static func json(_ violations: [Violation]) -> String {
        "[" + violations.map(\.json).joined(separator: ",") + "]"
    }

    /// A changed event, encoded again and put through the fixed header's checks.
    private static func item(_ event: WireEvent) -> IngestBatch.Item {
        let frame = event.encoded()
        do {
            return .event(try EventHeader(frame), frame: frame)
        } catch {
            return .refused(AckEntry(id: event.id, status: .rejected, reason: error.rejectReason), frame: frame)
        }
    }
}

/// The one owner of the quality stage in effect: the ingest paths read it once per batch (a
/// lock held for a reference copy, never across any work), a reload swaps it whole.
final class QualityStageHolder: Sendable {
    private let current: Mutex<QualityStage?>

    /// A holder of `stage` (nil: no gate).
    init(_ stage: QualityStage?) {
        current = Mutex(stage)
    }

    /// The stage in effect (nil when the gate is empty).
    var stage: QualityStage? { current.withLock { $0 } }

    /// Puts `stage` in effect from the next batch on.
    func replace(with stage: QualityStage?) { current.withLock { $0 = stage } }
}
