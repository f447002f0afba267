#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryAgent
import FerryFileSink
import FerryHTTPIngest
import FerryIntegrationKit
import FerryProtocol
import FerryStorage
import FerryTestKit
import FerryThreads
import Foundation
import Synchronization
import ZeroMQ

/// The ingest-path contract: every ingest path is a door into the same stages, so the same events
/// sent over any path give the same outcomes, the same bus messages and the same stored bytes.
///
/// ``observe(over:)`` runs one agent in this process (a fresh directory, both paths served) with a
/// tracking plan (`onViolation: quarantine`), redaction (emails hashed with a fixed key), a denied
/// consent category and a small `maxEventBytes`, sends ``requests`` over one path and returns what
/// it saw (``Observation``). The events are Segment messages; over ZeroMQ they go as the event
/// frames the HTTP API's mapping makes of them (`SegmentRequest`), so both paths carry the same
/// events. A suite runs it for every path, checks each against ``expectedOutcomes`` and the
/// observations against each other.
package enum IngestPathContract {
    /// An ingest path under the contract.
    package enum Path: String, CaseIterable, Sendable, CustomStringConvertible {
        /// The ZeroMQ socket (`FerryZeroMQIngest`), `<runtime>/ingest`.
        case zeromq
        /// The local HTTP API (`FerryHTTPIngest`) on its Unix socket, `<runtime>/http`.
        case http

        package var description: String { rawValue }
    }

    /// What one run saw.
    package struct Observation: Equatable, Sendable, CustomStringConvertible {
        /// Each message's outcome, in the order sent: `accepted`, `quarantined`, `duplicate`,
        /// `blocked:<reason>`, `refused:<code>` (an HTTP result's status and code; over ZeroMQ the
        /// same of its ack entry).
        package var outcomes: [String]
        /// The bus messages about the contract's events (outcome topics, not `delivered`), each
        /// as JSON with sorted keys and without its time (`at`), sorted.
        package var bus: [String]
        /// Every record of the log, in log order: its kind, event frame and metadata (the sender's
        /// origin), in hex — what is stored but for the time it was stored.
        package var stored: [String]
        /// The ids of the events in the quarantine, sorted.
        package var quarantined: [String]

        package var description: String {
            "outcomes \(outcomes)\nbus:\n" + bus.joined(separator: "\n") + "\nstored \(stored.count) records\nquarantined \(quarantined)"
        }
    }

    /// The outcomes every path must give ``requests``, in order.
    package static let expectedOutcomes = [
        "accepted", "quarantined", "accepted", "blocked:consent_denied", "refused:too_large", "accepted",
        "duplicate", "accepted",
    ]

    /// What breaks the contract in `observation` of one path (empty: nothing): the outcomes are
    /// ``expectedOutcomes``; the raw email is stored nowhere (it is hashed); one event is
    /// quarantined; the bus names every outcome but the duplicate's.
    package static func problems(_ observation: Observation) -> [String] {
        var problems: [String] = []
        if observation.outcomes != expectedOutcomes {
            problems.append("outcomes \(observation.outcomes), expected \(expectedOutcomes)")
        }
        let email = hex(Array("ada@example.com".utf8))
        if observation.stored.contains(where: { $0.contains(email) }) { problems.append("the raw email was stored") }
        if observation.quarantined.count != 1 { problems.append("quarantined \(observation.quarantined), expected one event") }
        // The probe, c-1, c-3, c-6, c-7 and the quarantined c-2 (kept in the quarantine, not the log).
        if observation.stored.count != 5 { problems.append("\(observation.stored.count) records stored, expected 5") }
        for topic in ["accepted", "blocked", "rejected"] where !observation.bus.contains(where: { $0.hasPrefix(topic + " ") }) {
            problems.append("no \(topic) message on the bus")
        }
        return problems
    }

    /// The requests sent, in order: Segment `batch` bodies.
    package static let requests: [String] = [
        batch([
            track("c-1", "Signed Up", properties: #"{"plan":"pro"}"#),
            // Breaks the plan (plan not in the enum): quarantined.
            track("c-2", "Signed Up", properties: #"{"plan":"gold"}"#),
            // Unplanned and allowed; its email is hashed before it is stored.
            track("c-3", "Contacted", properties: #"{"email":"ada@example.com","note":"x"}"#),
            // In the denied category: blocked by consent.
            track("c-4", "Ad Clicked", properties: "{}", context: #"{"ferry":{"category":"advertising"}}"#),
            // Larger than maxEventBytes.
            track("c-5", "Big", properties: #"{"pad":"\#(String(repeating: "x", count: 3000))"}"#),
            #"{"type":"identify","userId":"u1","messageId":"c-6","timestamp":"2026-01-02T03:04:05.000Z","traits":{"name":"Ada"}}"#,
        ]),
        batch([
            track("c-1", "Signed Up", properties: #"{"plan":"pro"}"#),
            track("c-7", "Later", properties: #"{"n":1}"#),
        ]),
    ]

    static func batch(_ messages: [String]) -> String { #"{"batch":["# + messages.joined(separator: ",") + "]}" }

    static func track(_ messageID: String, _ name: String, properties: String, context: String? = nil) -> String {
        let context = context.map { #","context":"# + $0 } ?? ""
        return #"{"type":"track","event":"\#(name)","userId":"u1","messageId":"\#(messageID)","timestamp":"2026-01-02T03:04:05.000Z","properties":\#(properties)\#(context)}"#
    }

    /// The configuration of every run (the directories come from the run).
    static let configurationJSON = """
        {"maxEventBytes": 2048,
         "consent": {"initialConsent": {"advertising": "denied"}},
         "quality": {"plan": "$DIR/plan.json", "onViolation": "quarantine", "allowUnplanned": true},
         "redact": {"keyFile": "$DIR/redact.key", "detect": [{"kind": "email", "action": "hash"}]}}
        """
    static let plan = """
        {"events": [{"type": "track", "name": "Signed Up", "properties": {"type": "object", "required": ["plan"],
          "properties": {"plan": {"type": "string", "enum": ["free", "pro", "team"]}}}}]}
        """
    /// The redaction key of every run: the same, so hashed values are the same bytes.
    static let key = [UInt8](repeating: 0x5a, count: 32)

    /// Runs the contract's requests over `path` on an agent of its own and returns what it saw.
    package static func observe(over path: Path) async throws -> Observation {
        let directory = try TemporaryDirectory(prefix: "fy-contract-")
        defer { directory.remove() }
        try writeText(plan, to: directory.appending("plan.json"))
        let keyPath = directory.appending("redact.key")
        try writeBytes(key, to: keyPath, mode: 0o600)
        let base = AgentConfiguration(runtimeDirectory: directory.appending("run"), dataDirectory: directory.appending("data"))
        let configuration = try AgentConfiguration.load(
            json: Array(configurationJSON.replacingOccurrences(of: "$DIR", with: directory.path).utf8), path: "contract.json",
            base: base, sinkKinds: .builtIn, ingestPathKinds: IngestPathRegistry([.http]))
        let http = try IngestPathRegistry([.http]).paths(for: configuration, logger: quietLogger)
        let running = try await InProcessAgent(configuration, paths: http)
        let runtimeDirectory = configuration.runtimeDirectory
        let bus: BusRecorder
        do {
            bus = try await runOffPool { try BusRecorder(runtimeDirectory: runtimeDirectory) }
        } catch {
            try? await running.stop()
            throw error
        }
        do {
            try await bus.waitUntilSubscribed()
            var outcomes: [String] = []
            for (index, body) in requests.enumerated() {
                switch path {
                case .http: outcomes += try await sendOverHTTP(body, runtimeDirectory: configuration.runtimeDirectory)
                case .zeromq:
                    outcomes += try await sendOverZeroMQ(body, requestID: UInt32(index + 1), configuration: configuration)
                }
            }
            // Each event's outcome is on the bus once its ack is out (a duplicate's is not
            // published: the first copy's was).
            let expected = outcomes.count { $0 != "duplicate" }
            try await eventually("the bus messages of \(expected) events", timeout: .seconds(20)) {
                bus.outcomeMessages().count >= expected
            }
            let observation = Observation(
                outcomes: outcomes, bus: bus.outcomeMessages().sorted(),
                stored: try storedRecords(dataDirectory: configuration.dataDirectory),
                quarantined: quarantinedIDs(dataDirectory: configuration.dataDirectory))
            await bus.stop()
            try await running.stop()
            return observation
        } catch {
            await bus.stop()
            try? await running.stop()
            throw error
        }
    }

    // MARK: The two paths

    static func sendOverHTTP(_ body: String, runtimeDirectory: String) async throws -> [String] {
        let response = try await httpPost(unixSocket: runtimeDirectory + "/http", path: "/v1/batch", json: body)
        guard response.status == 200,
              let object = try JSONSerialization.jsonObject(with: Data(response.body.utf8)) as? [String: Any],
              let results = object["results"] as? [[String: Any]]
        else { throw FerryTestKitError("the HTTP API answered \(response)") }
        return results.map { result in
            let status = result["status"] as? String ?? "?"
            if result["held"] as? Bool == true { return status + "(held)" }
            guard let code = result["code"] as? String else { return status }
            return status + ":" + code
        }
    }

    static func sendOverZeroMQ(_ body: String, requestID: UInt32, configuration: AgentConfiguration) async throws -> [String] {
        // The frames the HTTP API makes of the same body, for the same sender (this process).
        let peer = SegmentRequest.Peer(uid: getuid(), pid: UInt32(bitPattern: getpid()))
        let generator = EventIDGenerator()
        let bytes = Array(body.utf8)
        let admitted = try IngestVerdict.admit(method: "POST", uri: "/v1/batch", contentType: "application/json",
                                               contentEncoding: nil, contentLength: bytes.count).get()
        let messages: [SegmentRequest.Message]
        switch SegmentRequest.messages(
            body: bytes, admitted: admitted, authorization: nil,
            peer: peer, writeKeys: [:], categories: configuration.consent.categories,
            typeCategories: configuration.consent.typeCategories, now: WallClock.unixMilliseconds(), newID: { generator.next() }
        ) {
        case .success(let prepared): messages = prepared
        case .failure(let refusal): throw FerryTestKitError("the mapping refused the contract's request: \(refusal)")
        }
        let frames = try messages.map { message -> [UInt8] in
            guard case .event(let event) = message, event.deniedCategory == nil else {
                throw FerryTestKitError("the contract's message \(message.messageID ?? "?") is not an event both paths carry")
            }
            return event.frame
        }
        let replies = try await RawIngestClient.exchange(
            runtimeDirectory: configuration.runtimeDirectory, messages: [[TestEvents.header(requestID: requestID)] + frames])
        guard let entries = replies.first?.entries, entries.count == frames.count else {
            throw FerryTestKitError("the ZeroMQ socket answered \(replies)")
        }
        return entries.map { entry in
            switch EventOutcome(entry) {
            case .accepted(let held): held ? "accepted(held)" : "accepted"
            case .blocked(let reason): "blocked:" + reason
            case .refused(let code, _): "refused:" + code
            case let other: other.label
            }
        }
    }

    // MARK: What was stored

    /// Every record of the log under `dataDirectory`, oldest segment first.
    static func storedRecords(dataDirectory: String) throws -> [String] {
        let directory = dataDirectory + "/segments"
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).filter { !$0.hasPrefix(".") }.sorted()
        var records: [String] = []
        for name in names {
            _ = try SegmentScanner.scan(path: directory + "/" + name, truncateTornTail: false) { offset, size, body in
                let event = StoredEvent(position: LogPosition(segment: 0, offset: offset), size: size, body: body)
                records.append("\(event.kind) \(hex(event.frame)) \(hex(event.metadata.encoded))")
            }
        }
        return records
    }

    /// The ids of the quarantined events under `dataDirectory`.
    static func quarantinedIDs(dataDirectory: String) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dataDirectory + "/quarantine")) ?? []
        return names.filter { $0.hasSuffix(".q") }.map { String($0.dropLast(2)) }.sorted()
    }

    static func hex(_ bytes: [UInt8]) -> String {
        String(bytes.flatMap { byte in [byte >> 4, byte & 15].map { Character(String($0, radix: 16)) } })
    }
}

/// A subscriber to every bus topic, on a thread of its own that owns its SUB socket: it keeps each
/// message (`topic` frame, JSON frame) until stopped. Made off the concurrency pool (its
/// initialiser waits for the socket).
final class BusRecorder: Sendable {
    /// What the thread and the test share: each message received (its topic and JSON text), and
    /// whether to stop.
    private final class Shared: Sendable {
        let messages = Mutex<[(topic: String, json: [UInt8])]>([])
        let stopping = Atomic<Bool>(false)
    }

    private let shared = Shared()
    private let thread: DedicatedThread
    private let runtimeDirectory: String
    /// The probe event (one frame, the same bytes in every run, sent again until the bus shows it).
    private let probe = WireEvent(id: EventID(high: 0x0190_0000_0000_7000, low: 0x8000_0000_0000_0001), timestamp: 1_767_323_045_000,
                                  sequence: 0, pid: 4242, type: .track, source: "contract", name: "contract-probe").encoded()

    /// Connects to the bus of the agent in `runtimeDirectory` (throws if the socket cannot be made).
    init(runtimeDirectory: String) throws {
        self.runtimeDirectory = runtimeDirectory
        let endpoint = FerryPaths.eventsEndpoint(runtimeDirectory)
        let shared = self.shared
        let ready = ThreadInbox<Result<Void, ZMQError>>()
        thread = DedicatedThread(name: "contract-bus") {
            do {
                let context = try ZMQContext()
                defer { context.terminate() }
                let socket = try ZMQSocket(context: context, type: .sub)
                defer { socket.close() }
                try socket.subscribe("")
                try socket.connect(endpoint)
                ready.put(.success(()))
                while !shared.stopping.load(ordering: .acquiring) {
                    let readable = try ZMQPoller.poll([.socket(socket, .readable)], timeout: .milliseconds(50))
                    guard readable[0].contains(.readable) else { continue }
                    while let frames = try socket.receive(dontWait: true) {
                        guard frames.count == 2 else { continue }
                        shared.messages.withLock { $0.append((String(decoding: frames[0], as: UTF8.self), frames[1])) }
                    }
                }
            } catch let error as ZMQError {
                ready.put(.failure(error))
            } catch {}
        }
        guard let result = ready.takeAll(timeout: .seconds(10))?.first else { throw FerryTestKitError("the bus subscriber did not start") }
        try result.get()
    }

    /// Sends the probe event over ZeroMQ until the bus shows it (a subscription takes effect
    /// some time after it is made; the probe is stored once, every later send is a duplicate).
    func waitUntilSubscribed() async throws {
        let probeID = EventID(bytes: probe).description
        try await eventually("the bus subscription", timeout: .seconds(20)) {
            _ = try await RawIngestClient.exchange(runtimeDirectory: runtimeDirectory,
                                                   messages: [[TestEvents.header(requestID: 9999), probe]])
            return try await waitForValue("the probe on the bus", timeout: .milliseconds(500)) {
                self.objects().contains { $0.json["id"] as? String == probeID } ? true : nil
            }
        }
    }

    /// The outcome messages (not `delivered` ones, nor the probe's), each as JSON text with sorted
    /// keys and without `at`.
    func outcomeMessages() -> [String] {
        let probeID = EventID(bytes: probe).description
        return objects().compactMap { topic, json -> String? in
            guard topic != "delivered", json["id"] as? String != probeID else { return nil }
            var object = json
            object["at"] = nil
            guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return nil }
            return topic + " " + String(decoding: data, as: UTF8.self)
        }
    }

    /// The messages received so far, their JSON parsed (a message that is not an object: left out).
    private func objects() -> [(topic: String, json: [String: Any])] {
        shared.messages.withLock { $0 }.compactMap { topic, json in
            (try? JSONSerialization.jsonObject(with: Data(json)) as? [String: Any]).map { (topic, $0) }
        }
    }

    /// Stops the thread (its socket is closed there).
    func stop() async {
        shared.stopping.store(true, ordering: .releasing)
        await thread.joinAsync()
    }
}
