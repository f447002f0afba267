@testable import FerryFileSink
@testable import FerryAgent
import Logging
import Testing

/// The reload decision: a pure function of the configuration in effect and the new one.
@Suite("ReloadPlan: what a reload changes, refuses and applies")
struct ReloadPlanTests {
    static func base(sinks: [AgentConfiguration.SinkConfiguration]? = nil) -> AgentConfiguration {
        AgentConfiguration(runtimeDirectory: "/tmp/ferry-plan/run", dataDirectory: "/tmp/ferry-plan/data", sinks: sinks ?? [
            .init(name: "a", settings: .file(directory: "/tmp/ferry-plan/a")),
            .init(name: "b", settings: .file(directory: "/tmp/ferry-plan/b")),
        ])
    }

    @Test("the same configuration: nothing changes, every sink is refreshed (credentials)")
    func unchanged() {
        let plan = ReloadPlan(from: Self.base(), to: Self.base())
        #expect(plan.restartOnly.isEmpty && plan.changed.isEmpty && plan.access == nil)
        #expect(plan.sinks.map(\.name) == ["a", "b"])
    }

    @Test("reloadable keys: listed in order, with the new settings to apply")
    func reloadable() {
        var new = Self.base()
        new.logLevel = .debug
        new.delivery.retryMaxMilliseconds += 1
        new.sinks[1].batch.maxEvents = 7
        new.sinks[1].circuit.failureThreshold = 9
        new.sinks[0].retry.initialMilliseconds = 5
        new.access.control = .init(users: ["root"])
        let plan = ReloadPlan(from: Self.base(), to: new)
        #expect(plan.restartOnly.isEmpty)
        #expect(plan.changed == ["access", "logLevel", "delivery", "sinks[0].retry", "sinks[1].batch", "sinks[1].circuit"])
        #expect(plan.access == new.access)
        #expect(plan.sinks[1] == .init(name: "b", batch: new.sinks[1].batch, retry: new.sinks[1].retry, circuit: new.sinks[1].circuit,
                                       disclose: .init()))
        #expect(plan.sinks[0].retry.initialMilliseconds == 5)
    }

    @Test("disclose reloads: the new choice applies from the sink's next attempt, without a restart")
    func discloseReloads() {
        var new = Self.base()
        new.sinks[1].disclose = .init(origin: false, dropContext: ["ip"])
        let plan = ReloadPlan(from: Self.base(), to: new)
        #expect(plan.restartOnly.isEmpty)
        #expect(plan.changed == ["sinks[1].disclose"])
        #expect(plan.sinks[1].disclose == new.sinks[1].disclose)
        #expect(ReloadPlan.reloadableKeys.contains("sinks[].disclose"))
    }

    @Test("keys that need a restart are named, and only those")
    func restartOnly() {
        var new = Self.base()
        new.dataDirectory = "/elsewhere"
        new.maxEventBytes *= 2
        new.access.events = .init(users: ["nobody"])
        new.sinks[0] = .init(name: "a", settings: .file(directory: "/tmp/ferry-plan/other"))
        let plan = ReloadPlan(from: Self.base(), to: new)
        #expect(plan.restartOnly == ["dataDirectory", "maxEventBytes", "access.events", "sinks[0] (a): settings of type file"])

        let renamed = Self.base(sinks: [.init(name: "b", settings: .file(directory: "/tmp/ferry-plan/b"))])
        #expect(ReloadPlan(from: Self.base(), to: renamed).restartOnly == ["sinks (names or order)"])
    }

    @Test("the reloadable keys the daemon prints are the plan's")
    func keys() {
        #expect(FerryAgent.reloadableKeys == ReloadPlan.reloadableKeys)
        #expect(ReloadPlan.reloadableKeys.contains("sinks[].circuit"))
    }
}
