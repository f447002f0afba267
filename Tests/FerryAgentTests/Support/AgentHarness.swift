@testable import FerryFileSink
import Foundation
@testable import FerryAgent
@testable import FerryStorage
import FerryTestKit
import FerryProtocol
import Synchronization
import ZeroMQ

/// Sends `messages` over one DEALER connection, one at a time, one reply each (FerryTestKit).
func exchange(runtimeDirectory: String, _ messages: [[[UInt8]]], timeout: Duration = .seconds(15)) async throws -> [IngestReply] {
    try await RawIngestClient.exchange(runtimeDirectory: runtimeDirectory, messages: messages, timeout: timeout)
}

func eventsHeader(_ requestID: UInt32, version: UInt8 = ferryProtocolVersion) -> [UInt8] {
    var header = MessageHeader(kind: .events, requestID: requestID).encoded()
    header[0] = version
    return header
}

/// A runtime and data directory pair for an in-process agent.
func agentConfiguration(
    _ scratch: ScratchDirectory, maxEventBytes: Int = 2048, log: LogConfiguration = LogConfiguration()
) -> AgentConfiguration {
    AgentConfiguration(
        runtimeDirectory: scratch.appending("run"), dataDirectory: scratch.appending("data"),
        maxEventBytes: maxEventBytes, log: log,
        delivery: AgentConfiguration.Delivery(retryInitialMilliseconds: 10, retryMaxMilliseconds: 200),
        sinks: [.defaultFile(delivery: AgentConfiguration.Delivery(retryInitialMilliseconds: 10, retryMaxMilliseconds: 200))])
}

/// The file sink's lines in `directory`, parsed as JSON objects, in write order.
func sinkLines(_ directory: String) throws -> [[String: Any]] {
    let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
        .filter { $0.hasPrefix("events-") && $0.hasSuffix(".jsonl") }.sorted()
    var objects: [[String: Any]] = []
    for name in names {
        let text = String(decoding: try readBytes(directory + "/" + name), as: UTF8.self)
        // A line still being written (no newline yet) is left out.
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        lines.removeLast()
        for line in lines {
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                throw TestFailure("sink line is not a JSON object: \(line)")
            }
            objects.append(object)
        }
    }
    return objects
}
