import FerryProtocol

/// The lines `ferryd validate` prints about data quality.
public enum QualityReport {
    /// Loads the plan and the redactor the configuration names (the key file too) and reports
    /// them; throws what is wrong with either. nil for a table the configuration does not have.
    public static func lines(quality: QualityConfiguration?, redaction: RedactionConfiguration?) throws(QualityError) -> [String] {
        var plan: (configuration: QualityConfiguration, plan: TrackingPlan)?
        if let quality, let path = quality.planPath { plan = (quality, try TrackingPlan.load(path: path)) }
        return lines(quality: plan, redaction: try redaction.map { configuration throws(QualityError) in try Redactor.load(configuration: configuration) })
    }

    /// One line per planned event and per redaction rule; empty when there is neither.
    public static func lines(quality: (configuration: QualityConfiguration, plan: TrackingPlan)?, redaction: Redactor?) -> [String] {
        var lines: [String] = []
        if let quality {
            let path = quality.configuration.planPath ?? "-"
            lines.append("quality: plan \(path): \(quality.plan.summary.count) events, onViolation \(quality.configuration.onViolation.rawValue), allowUnplanned \(quality.configuration.allowUnplanned)")
            lines += quality.plan.summary.map { "quality:   " + $0 }
        }
        if let redaction {
            let count = redaction.configuration.rules.count + redaction.configuration.detectors.count
            lines.append("redact: \(counted(count, "rule"))")
            lines += redaction.summary.map { "redact:   " + $0 }
        }
        return lines
    }
}
