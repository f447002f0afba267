import FerryIntegrationKit
import Foundation
import FerryTestKit
import Synchronization
import Testing

/// The real `ferryd` with the HTTP sink, posting to a real HTTP server in the test process.
@Suite("HTTP sink end to end")
struct HTTPSinkIntegrationTests {
    /// Writes a configuration selecting the http sink to `<dir>/ferryd.json` and returns the
    /// `--config` arguments.
    static func configure(_ dir: TemporaryDirectory, url: String, token: String, extra: String = "") throws -> [String] {
        let tokenPath = dir.appending("token")
        try Data((token + "\n").utf8).write(to: URL(fileURLWithPath: tokenPath))
        let path = dir.appending("ferryd.json")
        let json = """
        {"delivery": {"batchMaxEvents": 100, "retryInitialMilliseconds": 20, "retryMaxMilliseconds": 200},
         "sink": {"type": "http", "url": "\(url)", "tokenFile": "\(tokenPath)", "gzip": true,
                  "requestTimeoutMilliseconds": 30000\(extra)}}
        """
        try Data(json.utf8).write(to: URL(fileURLWithPath: path))
        return ["--config", path]
    }

    /// Emits `count` events named `<prefix>-<i>` with `ferry emit --stdin --wait`.
    static func emit(_ count: Int, prefix: String, first: Int = 1, agent: AgentProcess) async throws {
        let result = try await runCLI(["emit", "--stdin", "--wait", "--source", "http-e2e"],
                                      stdin: TestEvents.jsonLines(count: count, namePrefix: prefix, first: first),
                                      environment: agent.environment)
        #expect(result.status == .exited(0), "\(result)")
        #expect(result.stdout == "accepted=\(count) duplicate=0 rejected=0\n", "\(result)")
    }

    /// The names of the events in answered-with-2xx requests (or all requests), in order.
    static func names(_ requests: [HTTPTestServer.Request]) -> [String] {
        requests.flatMap { $0.batchEvents.compactMap { $0["name"] as? String } }
    }

    @Test("ferryd posts what ferry emit sends: gzip, bearer token, idempotency key, every event once")
    func emitToCollector() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try await HTTPTestServer.start()
        let token = "e2e-" + UUID().uuidString
        let agent = try AgentProcess(in: dir, extraArguments: try Self.configure(dir, url: server.url(), token: token))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        try await Self.emit(25, prefix: "e2e", agent: agent)
        try await eventually("25 events posted") { Self.names(server.requests).count >= 25 }
        let requests = server.requests
        #expect(Self.names(requests) == (1...25).map { "e2e-\($0)" })
        for request in requests {
            #expect(request.method == "POST" && request.path == "/v1/batch")
            #expect(request.header("Content-Encoding") == "gzip" && request.decodingError == nil)
            #expect(request.header("Authorization") == "Bearer \(token)")
            let ids = request.batchEventIDs
            #expect(request.header("Idempotency-Key") == "\(ids.first ?? "")-\(ids.count)")
            #expect(request.json?["batch_id"] as? String == request.header("Idempotency-Key"))
            #expect(request.batchEvents.allSatisfy { $0["source"] as? String == "http-e2e" })
        }
        try await eventually("the agent to count them delivered") {
            let status = try await agent.status()
            return status.counters["delivered"] == 25 && status.queuedEvents == 0
        }
        let wire = requests.reduce(0) { $0 + $1.rawBody.count }, json = requests.reduce(0) { $0 + $1.body.count }
        print("[measure] 25 emitted events in \(requests.count) request(s): \(json) JSON bytes, \(wire) gzip bytes on the wire")
        let status = try await agent.status()
        #expect(status.object["delivery"].flatMap { ($0 as? [String: Any])?["sink"] as? String } == "http")
        #expect(!agent.logs.contains(token), "the token must not be logged")
        try await agent.terminate()
        await server.shutdown()
    }

    // A collector answering 503 then 200 (retried, the same key and ids, every event once): the
    // sink contract's `survives` for `http-envelope` and `http-segment` (FerrySinkContractTests).

    @Test("kill -9 of ferryd while a request is in flight, restart: every event arrives; the re-sent batch keeps its key and ids")
    func killedInFlight() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // The first two requests are never answered: ferryd is killed while waiting for each.
        let server = try await HTTPTestServer.start()
        server.enqueue(.never, .never)
        let agent = try AgentProcess(in: dir, extraArguments: try Self.configure(dir, url: server.url(), token: "t"))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        try await Self.emit(60, prefix: "crash", agent: agent)
        // Run 1: the first batch may have been read before all 60 were stored; kill it in flight.
        _ = try await waitForValue("run 1's request in flight") { server.requests.first }
        agent.kill9()
        // Run 2 reads all 60 stored events as its first batch; kill it in flight too.
        try await agent.restart()
        let inFlight = try await waitForValue("run 2's request in flight") { server.requests.dropFirst().first }
        #expect(inFlight.batchEventIDs.count == 60)
        agent.kill9()

        // Run 3: the collector answers now.
        try await agent.restart()
        try await Self.emit(20, prefix: "crash", first: 61, agent: agent)
        try await eventually("everything posted and acknowledged") {
            let status = try await agent.status()
            return status.queuedEvents == 0 && Set(server.requests.dropFirst(2).flatMap(\.batchEventIDs)).count == 80
        }
        let requests = server.requests
        let acknowledged = Array(requests.dropFirst(2))
        // The batch cut short is sent again first, identical: same key, same ids.
        let resent = try #require(acknowledged.first)
        #expect(resent.header("Idempotency-Key") == inFlight.header("Idempotency-Key"))
        #expect(resent.batchEventIDs == inFlight.batchEventIDs)
        // Everything arrived, once per id among the acknowledged requests.
        let delivered = acknowledged.flatMap(\.batchEventIDs)
        #expect(delivered.count == 80 && Set(delivered).count == 80)
        #expect(Set(Self.names(acknowledged)) == Set((1...80).map { "crash-\($0)" }))
        let allIDs = requests.flatMap(\.batchEventIDs)
        let rawResends = allIDs.count - Set(allIDs).count
        #expect(rawResends == requests[0].batchEventIDs.count + 60)
        print("[measure] two kill -9s with a request in flight: \(allIDs.count) ids posted, \(rawResends) raw re-sends (\(requests[0].batchEventIDs.count) + 60 from the two cut-short batches), 0 duplicates after dedup by id")
        try await agent.terminate()
        await server.shutdown()
    }

    @Test("SIGTERM while a request is unanswered: ferryd cancels it and exits 0; after restart the batch is sent again")
    func gracefulStopInFlight() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try await HTTPTestServer.start()
        server.enqueue(.never)
        let agent = try AgentProcess(in: dir, extraArguments: try Self.configure(dir, url: server.url(), token: "t"))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        try await Self.emit(5, prefix: "term", agent: agent)
        let inFlight = try await waitForValue("a request in flight") { server.requests.first }
        // The request timeout is 30 s: a prompt exit means the request was cancelled.
        #expect(try await agent.terminate(timeout: .seconds(10)) == .exited(0), "\(agent.logs.suffix(2000))")
        try await agent.restart()
        try await eventually("the five events acknowledged") {
            Set(server.requests.dropFirst().flatMap(\.batchEventIDs)).count == 5
        }
        #expect(server.requests[1].batchEventIDs.starts(with: inFlight.batchEventIDs.prefix(1)))
        try await agent.terminate()
        await server.shutdown()
    }
}
