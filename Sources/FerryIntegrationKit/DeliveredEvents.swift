import FerryTestKit
import Foundation

/// One line of the file sink (`<sink dir>/events-*.jsonl`).
public struct DeliveredEvent: Sendable, Hashable {
    /// The event id (UUIDv7 text).
    public var id: String
    /// `track`, `screen`, …
    public var type: String
    /// The event name.
    public var name: String
    /// The emitting client's source name.
    public var source: String
    /// The emitting process id.
    public var pid: Int
    /// The per-client sequence number.
    public var seq: Int
    /// Client timestamp, ms since the epoch.
    public var timestamp: Int
    /// When the agent stored it, ms since the epoch.
    public var acceptedAt: Int
    /// The whole line as written.
    public var line: String

    /// The line decoded as a JSON object.
    public var object: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]) ?? [:]
    }

    /// The `properties` object.
    public var properties: [String: Any] { object["properties"] as? [String: Any] ?? [:] }
}

/// The sink's files in `directory`, in delivery order (file names sort in write order).
public func deliveredFiles(in directory: String) -> [String] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
    return names.filter { $0.hasPrefix("events-") && $0.hasSuffix(".jsonl") }.sorted().map { directory + "/" + $0 }
}

/// Every complete line of the file sink in `directory`, parsed as a JSON object. A missing
/// directory is no events; a line still being written (no newline yet) is left out; a complete
/// line that is not a JSON object throws.
public func deliveredEventObjects(in directory: String) throws -> [[String: Any]] {
    try deliveredLines(in: directory).map { line in
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
            throw FerryTestKitError("file sink line is not a JSON object: \(line.prefix(300))")
        }
        return object
    }
}

/// Every complete line of the file sink in `directory` as a ``DeliveredEvent``.
public func deliveredEvents(in directory: String) throws -> [DeliveredEvent] {
    try deliveredLines(in: directory).map { line in
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
            throw FerryTestKitError("file sink line is not a JSON object: \(line.prefix(300))")
        }
        func int(_ key: String) -> Int? { (object[key] as? NSNumber)?.intValue }
        guard let id = object["id"] as? String, let type = object["type"] as? String,
              let name = object["name"] as? String, let source = object["source"] as? String,
              let timestamp = int("timestamp"),
              let acceptedAt = int("accepted_at") else {
            throw FerryTestKitError("file sink line lacks a required field: \(line.prefix(300))")
        }
        // `pid` and `seq` are left out when not known (events of the HTTP API): 0 here.
        return DeliveredEvent(id: id, type: type, name: name, source: source, pid: int("pid") ?? 0, seq: int("seq") ?? 0,
                              timestamp: timestamp, acceptedAt: acceptedAt, line: line)
    }
}

private func deliveredLines(in directory: String) throws -> [String] {
    var lines: [String] = []
    for path in deliveredFiles(in: directory) {
        guard let data = FileManager.default.contents(atPath: path) else { continue }
        lines += ChildProcess.completeLines(String(decoding: data, as: UTF8.self))
    }
    return lines
}

/// Checks over a set of delivered events: duplicates and per-source sequence gaps.
public struct DeliveryReport: Sendable, CustomStringConvertible {
    /// The events, in sink order.
    public let events: [DeliveredEvent]

    /// Builds a report.
    public init(_ events: [DeliveredEvent]) { self.events = events }

    /// Reads the sink in `directory`.
    public init(sinkDirectory directory: String) throws { self.init(try deliveredEvents(in: directory)) }

    /// The distinct ids.
    public var uniqueIDs: Set<String> { Set(events.map(\.id)) }

    /// Ids that appear more than once.
    public var duplicateIDs: [String] {
        Dictionary(grouping: events, by: \.id).filter { $0.value.count > 1 }.keys.sorted()
    }

    /// Events from `source`.
    public func events(source: String) -> [DeliveredEvent] { events.filter { $0.source == source } }

    /// Sequence numbers delivered for `source`, sorted.
    public func sequences(source: String) -> [Int] { events(source: source).map(\.seq).sorted() }

    /// `nil` if `source` delivered exactly sequence numbers `1...count`, once each; otherwise a
    /// description of the missing and repeated numbers.
    public func sequenceProblem(source: String, count: Int) -> String? {
        let seqs = sequences(source: source)
        if seqs == Array(1...max(count, 1)).prefix(count).map({ $0 }) { return nil }
        return describe(seqs, source: source, expected: count)
    }

    /// `nil` if `source` delivered exactly `1...n` for some `n` (a gap-free prefix, as after a
    /// client that died mid-stream), once each; otherwise a description of the problem.
    public func prefixProblem(source: String) -> String? {
        let seqs = sequences(source: source)
        if seqs == Array(0..<seqs.count).map({ $0 + 1 }) { return nil }
        return describe(seqs, source: source, expected: seqs.max() ?? 0)
    }

    private func describe(_ seqs: [Int], source: String, expected: Int) -> String {
        let counts = Dictionary(grouping: seqs, by: { $0 }).mapValues(\.count)
        let missing = (1...max(expected, 1)).filter { counts[$0] == nil && $0 <= expected }
        let repeated = counts.filter { $0.value > 1 }.keys.sorted()
        let extra = seqs.filter { $0 > expected || $0 < 1 }
        return "source \(source): \(seqs.count) events, expected seq 1...\(expected); missing \(missing.count) \(missing.prefix(20)), repeated \(repeated.count) \(repeated.prefix(20)), out of range \(extra.prefix(20))"
    }

    public var description: String {
        let bySource = Dictionary(grouping: events, by: \.source).mapValues(\.count)
        return "\(events.count) events, \(uniqueIDs.count) unique ids, \(duplicateIDs.count) duplicated; by source \(bySource.sorted { $0.key < $1.key })"
    }
}
