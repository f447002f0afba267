import Logging

extension FerryAgent {
    /// What start would refuse in a loaded configuration, short of binding sockets and opening
    /// the log: every file a setting names opened and read as start reads it (each sink's
    /// credentials and CA file, ``SinkSettings/checkFiles()``; the plan, `quality.plan`; the
    /// redaction key file) and the ingest paths built from their settings. One message a
    /// problem, each naming its key path; empty when start would go on. `ferryd validate` lists
    /// them; start runs the same checks (a sink's `recover`, the quality stage's loading), so the
    /// two agree. Blocking (file reads).
    package static func preflight(_ configuration: AgentConfiguration, ingestPathKinds: IngestPathRegistry) -> [String] {
        var problems: [String] = []
        for (index, sink) in configuration.sinks.enumerated() {
            problems += sink.settings.checkFiles().map { "sinks[\(index)]: \($0)" }
        }
        let loads: [() throws -> Void] = [{ _ = try QualityStage.loadPlan(configuration) }, { _ = try QualityStage.loadRedactor(configuration) }]
        for load in loads {
            do { try load() } catch { problems.append((error as? AgentError)?.message ?? "\(error)") }
        }
        do {
            _ = try ingestPathKinds.paths(for: configuration, logger: Logger(label: "ferry-preflight", factory: { _ in SwiftLogNoOpLogHandler() }))
        } catch {
            problems.append((error as? AgentError)?.message ?? "\(error)")
        }
        return problems
    }
}
