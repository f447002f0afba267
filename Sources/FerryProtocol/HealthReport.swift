/// What `ferry health` answers: healthy, degraded (with every reason), not running, or not
/// allowed to ask; an exit status for each and one line for people.
///
/// ```swift
/// let report = HealthReport(status: status)      // from a `status` reply
/// report.state                                   // .degraded
/// report.line                                    // "degraded: sink collector: circuit open"
/// report.exitCode                                // 1
/// ```
public struct HealthReport: Sendable, Hashable, Codable {
    /// The verdict.
    public enum State: String, Sendable, Hashable, Codable {
        /// Nothing wrong: exit status 0.
        case healthy
        /// The agent runs but something needs attention (``HealthReport/reasons``): exit status 1.
        case degraded
        /// No agent answers on the control socket: exit status 2.
        case notRunning = "not_running"
        /// The agent refused to tell this caller (access policy): exit status 3.
        case accessDenied = "access_denied"
    }

    /// The verdict.
    public var state: State
    /// Why it is not healthy, most important first (empty when healthy).
    public var reasons: [String]

    /// The share of the retention cap above which the queue counts as degraded.
    public static let retentionThreshold = 0.9

    /// A report with `state` and `reasons`.
    public init(state: State, reasons: [String] = []) {
        self.state = state
        self.reasons = reasons
    }

    /// Judges a status document: degraded when a sink's circuit is not closed, dead letters are
    /// waiting, the queue holds more than 90% of its retention cap, recovery or the verification
    /// of older segments found damage, or client events were lost.
    public init(status: StatusReply) {
        var reasons: [String] = []
        for sink in status.sinks where sink.circuit != "closed" {
            reasons.append("sink \(sink.name): circuit \(sink.circuit.replacingUnderscores)"
                + (sink.lastError.map { " (\($0))" } ?? ""))
        }
        for sink in status.sinks {
            if let letters = sink.deadLetters, letters > 0 {
                reasons.append("sink \(sink.name): \(counted(letters, "dead letter")) waiting")
            }
        }
        if let cap = status.queue.retentionMaxBytes, cap > 0 {
            let share = Double(status.queue.bytes) / Double(cap)
            if share > Self.retentionThreshold {
                reasons.append("queue at \(Int(share * 100))% of its retention cap (\(status.queue.bytes) of \(cap) bytes)")
            }
        }
        if status.recovery.corruptRegions > 0 {
            reasons.append("damaged log: \(counted(status.recovery.corruptRegions, "corrupt region")) "
                + "(\(status.recovery.corruptBytes) bytes)")
        }
        let lost = status.counters["client_events_lost"] ?? 0
        if lost > 0 {
            let sources = status.clientEventsLost.keys.sorted().map { $0.isEmpty ? "(other)" : $0 }
            reasons.append("\(counted(lost, "client event")) lost" + (sources.isEmpty ? "" : " (\(sources.joined(separator: ", ")))"))
        }
        self.init(state: reasons.isEmpty ? .healthy : .degraded, reasons: reasons)
    }

    /// The process exit status: 0 healthy, 1 degraded, 2 not running, 3 access denied.
    public var exitCode: Int32 {
        switch state {
        case .healthy: 0
        case .degraded: 1
        case .notRunning: 2
        case .accessDenied: 3
        }
    }

    /// One line for people: the state, and for a degraded agent its reasons.
    public var line: String {
        switch state {
        case .healthy: "healthy"
        case .degraded: "degraded: " + reasons.joined(separator: "; ")
        case .notRunning: "not running" + (reasons.first.map { ": \($0)" } ?? "")
        case .accessDenied:
            // The agent's refusal already says "access denied: …".
            reasons.first.map { $0.lowercased().hasPrefix("access denied") ? $0 : "access denied: \($0)" } ?? "access denied"
        }
    }

    private enum CodingKeys: String, CodingKey { case state, reasons, exitCode = "exit_code", line }

    public init(from decoder: any Decoder) throws {
        let object = try decoder.container(keyedBy: CodingKeys.self)
        state = try object.decode(State.self, forKey: .state)
        reasons = try object.decodeIfPresent([String].self, forKey: .reasons) ?? []
    }

    /// `{"state", "exit_code", "line", "reasons"}`.
    public func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: CodingKeys.self)
        try object.encode(state, forKey: .state)
        try object.encode(exitCode, forKey: .exitCode)
        try object.encode(line, forKey: .line)
        try object.encode(reasons, forKey: .reasons)
    }
}

extension String {
    fileprivate var replacingUnderscores: String { String(map { $0 == "_" ? " " : $0 }) }
}
