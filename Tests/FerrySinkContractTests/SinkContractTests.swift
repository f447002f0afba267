@testable import FerryFileSink
import FerryIntegrationKit
import FerrySinkContractKit
import Testing

/// Every sink, with the upstream it delivers to. A new sink joins the contract here: one line.
let allContractSinks: [any SinkFixture] = [
    FileSinkFixture(),
    HTTPSinkFixture(format: .envelope),
    HTTPSinkFixture(format: .segment),
    JetStreamSinkFixture(eventsPerMessage: 1),
    JetStreamSinkFixture(eventsPerMessage: 4),
]

/// The sinks whose upstream this machine can run: each fixture gates on its own dependency (the
/// file and HTTP sinks run anywhere; JetStream needs nats-server).
let contractSinks = allContractSinks.runnable

/// The sink contract (FerrySinkContractKit's ``SinkContract``), run for every sink against the
/// real `ferryd` and the sink's real upstream. Each test has its own directories, agent and
/// upstream, so they run in parallel.
@Suite("Sink contract")
struct SinkContractTests {
    @Test("the file and HTTP sinks need nothing but ferryd; a sink left out for a missing dependency is named (skipped)")
    func dependencies() throws {
        let own = allContractSinks.filter { !($0 is JetStreamSinkFixture) }
        #expect(!own.isEmpty && own.allSatisfy { $0.missingDependency == nil })
        #expect(Set(contractSinks.map(\.name)).isSuperset(of: own.map(\.name)))
        let missing = allContractSinks.compactMap { fixture in fixture.missingDependency.map { "\(fixture.name): \($0)" } }
        if !missing.isEmpty { try Test.cancel(Comment(rawValue: "left out: " + missing.joined(separator: "; "))) }
    }

    @Test("every event delivered once, the cursor stored (a graceful restart re-sends nothing), the crash points reached are the declared ones",
          arguments: contractSinks.map(ContractFixture.init))
    func deliversEveryEventOnce(_ sink: ContractFixture) async throws {
        try await SinkContract.deliversEveryEventOnce(sink.fixture)
    }

    @Test("kill -9 at a crash point, restart: the upstream holds every event exactly once", arguments: contractSinks.crashCases)
    func exactlyOnceAcrossKill(_ sinkCase: SinkCase<String>) async throws {
        try await SinkContract.exactlyOnceAcrossKill(sinkCase.fixture, crashAt: sinkCase.detail)
    }

    @Test("a failing upstream: transient failures are retried, a 413 is split, permanent ones dead-lettered and replayed; every event once",
          arguments: contractSinks.faultCases)
    func survives(_ sinkCase: SinkCase<SinkFault>) async throws {
        try await SinkContract.survives(sinkCase.fixture, sinkCase.detail)
    }

    @Test("an upstream down past retry.maxElapsedMilliseconds: dead letters, delivery goes on, replay delivers each event once",
          arguments: contractSinks.map(ContractFixture.init))
    func deadLetterAndReplay(_ sink: ContractFixture) async throws {
        try await SinkContract.deadLetterAndReplay(sink.fixture)
    }

    @Test("kill -9 during a dead letter's replay, restart, replay again: every event once, no letter left",
          arguments: contractSinks.map(ContractFixture.init))
    func replayAcrossKill(_ sink: ContractFixture) async throws {
        try await SinkContract.replayExactlyOnceAcrossKill(sink.fixture)
    }

    @Test("what disclose withholds (origin, pid, seq, session, a context key) never reaches the upstream",
          arguments: contractSinks.map(ContractFixture.init))
    func disclosure(_ sink: ContractFixture) async throws {
        try await SinkContract.withholdsWhatDisclosureWithholds(sink.fixture)
    }

    @Test("SIGHUP with new sink settings (disclose, batch) applies them from the next batch, without a restart or a re-send",
          arguments: contractSinks.map(ContractFixture.init))
    func reload(_ sink: ContractFixture) async throws {
        try await SinkContract.reloadAppliesSinkSettings(sink.fixture)
    }
}

extension SinkContractTests {
    @Test("consent and routes per sink: the route and the event's own preferences skip, a revocation stops a batch in memory at its next attempt; skips counted, not dead-lettered",
          arguments: contractSinks.map(ContractFixture.init))
    func consentAndRoute(_ sink: ContractFixture) async throws {
        try await SinkContract.consentAndRoutePerSink(sink.fixture)
    }

    @Test("ferry forget --user reaches the upstream with the sink's documented effect, retried after a failure, not sent again after a restart",
          arguments: contractSinks.map(ContractFixture.init))
    func erasure(_ sink: ContractFixture) async throws {
        try await SinkContract.erasureReachesUpstream(sink.fixture)
    }
}

/// A fixture as a test argument, shown by its name.
struct ContractFixture: Sendable, CustomTestStringConvertible {
    let fixture: any SinkFixture
    init(_ fixture: any SinkFixture) { self.fixture = fixture }
    var testDescription: String { fixture.name }
}
