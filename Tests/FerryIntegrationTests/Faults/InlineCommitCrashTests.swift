import FerryIntegrationKit
import FerryProtocol
import FerryTestKit
import Foundation
import Testing

/// The commit where the event arrives (docs/ARCHITECTURE.md, "Walk of one event"): with no commit
/// in flight, the thread that read a message — the ZeroMQ socket thread, an HTTP request's
/// thread-pool thread — appends, syncs and answers it itself; with work queued or a commit delay
/// configured it hands the message to the commit thread. The real `ferryd`, killed -9 at each
/// crash point of both ways (learnt from a run without a crash, driven by progress, not time),
/// then restarted: the sender re-sends what was not acknowledged, and the log holds every event
/// exactly once, in the order sent — nothing acknowledged is lost, nothing is stored twice.
@Suite("Faults: killed -9 in the commit where the event arrives", .serialized)
struct InlineCommitCrashTests {
    /// One message per step, each awaited before the next: the ZeroMQ socket (one event frame)
    /// or the HTTP API (one event, its id derived from its `messageId`). Event `i` is named `e-i`.
    static let steps: [Path] = [.zeroMQ, .http, .zeroMQ, .zeroMQ]

    enum Path { case zeroMQ, http }

    /// The two ways a message is committed, by configuration: on the arriving thread (the
    /// default), or handed to the commit thread (a commit delay makes every arrival hand off).
    enum Way: String, CaseIterable, CustomTestStringConvertible {
        case inline, handOff
        var testDescription: String { rawValue }
        var configuration: String {
            switch self {
            case .inline: #"{"consent": {"autoStart": false}}"#
            case .handOff: #"{"consent": {"autoStart": false}, "log": {"commitDelayMicroseconds": 1000}}"#
            }
        }
        /// The crash points each step of this way reaches.
        var points: [String] {
            switch self {
            case .inline: ["ingest.inline.appended", "ingest.inline.synced"]
            case .handOff: ["ingest.inline.handoff", "commit.appended", "commit.synced"]
            }
        }
    }

    /// The event frames of the ZeroMQ steps, fixed for a run (a re-send carries the same id).
    static func frames() -> [Int: [UInt8]] {
        var frames: [Int: [UInt8]] = [:]
        for (index, path) in steps.enumerated() where path == .zeroMQ {
            frames[index] = TestEvents.wireEvent(name: "e-\(index + 1)", source: "inline-crash", sequence: UInt64(index + 1)).encoded()
        }
        return frames
    }

    /// Sends the steps from `first` on, each awaited; returns the index of the first one not
    /// acknowledged (all accepted or duplicate), or `steps.count`.
    static func send(from first: Int, frames: [Int: [UInt8]], to agent: AgentProcess) async -> Int {
        for index in first..<steps.count {
            switch steps[index] {
            case .zeroMQ:
                let message = [TestEvents.header(requestID: UInt32(index + 1)), frames[index]!]
                guard let replies = try? await RawIngestClient.exchange(runtimeDirectory: agent.runtimeDirectory, messages: [message],
                                                                        timeout: .seconds(10)),
                      case .ack(_, let entries) = replies.first, entries.count == 1,
                      entries[0].status == .accepted || entries[0].status == .duplicate else { return index }
            case .http:
                let body = #"{"batch":[{"type":"track","event":"e-\#(index + 1)","userId":"u1","messageId":"m-\#(index + 1)"}]}"#
                guard let response = try? await httpPost(unixSocket: agent.runtimeDirectory + "/http", path: "/v1/batch", json: body),
                      response.status == 200 else { return index }
            }
        }
        return steps.count
    }

    /// The names of the events in the log, in log order.
    static func storedNames(_ agent: AgentProcess) throws -> [String] {
        try logRecords(in: agent.dataDirectory + "/segments").compactMap(\.name).filter { $0.hasPrefix("e-") }
    }

    @Test("kill -9 at each crash point of the commit, restarted: every acknowledged event stored once, in order", arguments: Way.allCases)
    func killedAtEachPoint(_ way: Way) async throws {
        let frames = Self.frames()
        // The run without a crash learns the points this way reaches.
        let progressDirectory = try TemporaryDirectory()
        defer { progressDirectory.remove() }
        let progressPath = progressDirectory.appending("progress")
        do {
            let dir = try TemporaryDirectory()
            defer { dir.remove() }
            let agent = try AgentProcess(in: dir, extraArguments: try AgentProcess.configurationArguments(way.configuration, in: dir),
                                         start: false)
            defer { agent.cleanup() }
            try agent.start(extraEnvironment: ["FERRY_PROGRESS_FILE": progressPath])
            try await agent.waitUntilReady()
            #expect(await Self.send(from: 0, frames: frames, to: agent) == Self.steps.count)
            #expect(try Self.storedNames(agent) == (1...Self.steps.count).map { "e-\($0)" })
            _ = try await agent.terminate()
        }
        let progress = CrashPointProgress(path: progressPath)
        for point in way.points {
            #expect((progress.counts[point] ?? 0) >= Self.steps.count, "\(way): \(point) reached once per step: \(progress)")
        }
        let kills = progress.killPoints(everyReach: FaultSettings.isSoak).filter { way.points.contains($0.name) && $0.count <= Self.steps.count }
        #expect(!kills.isEmpty)
        for kill in kills {
            let label = "\(way) \(kill.name):\(kill.count)"
            let dir = try TemporaryDirectory()
            defer { dir.remove() }
            let agent = try AgentProcess(in: dir, extraArguments: try AgentProcess.configurationArguments(way.configuration, in: dir),
                                         start: false)
            defer { agent.cleanup() }
            try agent.start(extraEnvironment: ["FERRY_CRASH_AT": "\(kill.name):\(kill.count)"])
            try await agent.waitUntilReady()
            let unacknowledged = await Self.send(from: 0, frames: frames, to: agent)
            #expect(unacknowledged < Self.steps.count, "\(label): the agent answered every step")
            try await eventually("ferryd to kill itself (\(label))", timeout: .seconds(30)) { agent.process?.exitStatus != nil }
            #expect(agent.process?.exitStatus == .signaled(SIGKILL), "\(label): \(agent.logs.suffix(2000))")
            // Every step acknowledged before the kill is in the log already.
            let before = try Self.storedNames(agent)
            #expect(Array(before.prefix(unacknowledged)) == (0..<unacknowledged).map { "e-\($0 + 1)" }, "\(label): \(before)")
            // The sender re-sends from the first step without an answer.
            try agent.start()
            try await agent.waitUntilReady()
            #expect(await Self.send(from: unacknowledged, frames: frames, to: agent) == Self.steps.count, "\(label)")
            let names = try Self.storedNames(agent)
            #expect(names == (1...Self.steps.count).map { "e-\($0)" }, "\(label): each event once, in order: \(names)")
            _ = try await agent.terminate()
        }
    }
}
