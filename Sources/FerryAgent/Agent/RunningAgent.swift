import FerryStorage

/// The parts of a running agent that control requests, the status report, the gauges and
/// reloads use. ``FerryAgent`` builds it once start-up is done and owns it (under its lock);
/// the others get a copy per call.
struct RunningAgent: Sendable {
    /// The configured sinks, in order (the same order as ``deliveries``).
    var sinks: [AgentConfiguration.SinkConfiguration]
    /// The main log.
    var log: SegmentedLog
    /// One delivery loop per configured sink.
    var deliveries: [DeliveryLoop]
    /// What recovery found at start, plus the background check of older segments when it ends.
    var recovery: RecoveryReport
    /// The commit thread, where consent changes go.
    var pipeline: CommitPipeline
    /// The consent state.
    var consent: ConsentEngine
    /// The consent audit log.
    var auditLog: AuditLog
    /// Who may send events, control the agent and subscribe.
    var access: AccessControl
    /// The upstream erasures `forget` recorded (`forget_status`).
    var erasures: ErasureOutbox? = nil
    /// One erasure sender per configured sink (same order as ``sinks``).
    var erasureSenders: [ErasureSender] = []
    /// The quality stage in effect (a reload swaps it).
    var quality: QualityStageHolder
    /// The quarantine area.
    var quarantine: QuarantineStore
    /// Since when each sink's policy and each category's refusal hold (`forget`, `recipients`).
    var history: RecipientHistory = RecipientHistory()
}
