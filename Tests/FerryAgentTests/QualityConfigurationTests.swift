@testable import FerryAgent
import FerryQuality
import Testing

/// The `quality` and `redact` keys of ferryd's configuration, and what a reload does with them.
@Suite("Quality configuration keys")
struct QualityConfigurationTests {
    @Test("the quality table sets the plan, the action, allowUnplanned and the quarantine's size; redact is parsed by FerryQuality")
    func keys() throws {
        let config = try ConfigurationTests.load("""
            {"quality": {"plan": "/etc/ferry/plan.json", "onViolation": "quarantine", "allowUnplanned": false, "quarantineMaxBytes": 1048576},
             "redact": {"rules": [{"path": "properties.email", "action": "mask"}]}}
            """)
        #expect(config.quality.configuration == QualityConfiguration(planPath: "/etc/ferry/plan.json", onViolation: .quarantine, allowUnplanned: false))
        #expect(config.quality.quarantineMaxBytes == 1 << 20)
        #expect(config.redact?.configuration.rules == [RedactionRule(path: "properties.email", action: .mask)])
        // Absent: no plan, block, unplanned events allowed, no redaction.
        let plain = try ConfigurationTests.load("{}")
        #expect(plain.quality == AgentConfiguration.Quality())
        #expect(plain.quality.configuration.onViolation == .block && plain.quality.configuration.allowUnplanned)
        #expect(plain.redact == nil)
    }

    @Test("a wrong value is refused naming its key", arguments: [
        (#"{"quality": {"onViolation": "drop"}}"#, "quality.onViolation"),
        (#"{"quality": {"allowUnplanned": "no"}}"#, "quality.allowUnplanned"),
        (#"{"quality": {"plan": 3}}"#, "quality.plan"),
        (#"{"quality": {"schema": "x"}}"#, "quality.schema"),
        (#"{"quality": {"quarantineMaxBytes": 10}}"#, "quality.quarantineMaxBytes"),
        (#"{"redact": []}"#, "redact"),
        (#"{"redact": {"rules": [{"path": "properties.email", "action": "shred"}]}}"#, "redact"),
    ])
    func errors(json: String, key: String) throws {
        let error = try ConfigurationTests.error(json)
        #expect(error.message.contains(key), "\(error.message)")
    }

    @Test("plan, action and redaction reload; the quarantine's size needs a restart")
    func reload() {
        let base = ReloadPlanTests.base()
        var new = base
        new.quality.configuration.planPath = "/etc/ferry/plan.json"
        new.quality.configuration.onViolation = .tag
        new.redact = .init(RedactionConfiguration(detectors: [DetectorRule(kind: .email, action: .hash)]))
        let plan = ReloadPlan(from: base, to: new)
        #expect(plan.restartOnly.isEmpty)
        #expect(plan.changed == ["quality", "redact"])
        new.quality.quarantineMaxBytes = 1 << 20
        #expect(ReloadPlan(from: base, to: new).restartOnly == ["quality.quarantineMaxBytes"])
    }
}
