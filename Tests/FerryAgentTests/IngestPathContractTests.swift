import FerryAgentTestKit
import Testing

/// The ingest-path contract (FerryAgentTestKit) for every path `ferryd` serves: the same events
/// over ZeroMQ and over the HTTP API give the same outcomes, bus messages and stored bytes.
@Suite("The ingest-path contract: ZeroMQ and HTTP are doors into the same stages")
struct IngestPathContractTests {
    @Test("the contract's events over one path: their outcomes, the bus, the log and the quarantine",
          arguments: IngestPathContract.Path.allCases)
    func contract(_ path: IngestPathContract.Path) async throws {
        let observed = try await IngestPathContract.observe(over: path)
        #expect(IngestPathContract.problems(observed).isEmpty, "\(IngestPathContract.problems(observed))\n\(observed)")
    }

    @Test("the same events over ZeroMQ and over HTTP: the same outcomes, bus messages and stored bytes")
    func samePathsSameResults() async throws {
        let zeromq = try await IngestPathContract.observe(over: .zeromq)
        let http = try await IngestPathContract.observe(over: .http)
        #expect(zeromq.outcomes == http.outcomes)
        #expect(zeromq.bus == http.bus, "ZeroMQ:\n\(zeromq.bus.joined(separator: "\n"))\nHTTP:\n\(http.bus.joined(separator: "\n"))")
        #expect(zeromq.stored == http.stored, "ZeroMQ:\n\(zeromq.stored.joined(separator: "\n"))\nHTTP:\n\(http.stored.joined(separator: "\n"))")
        #expect(zeromq.quarantined == http.quarantined)
    }
}
