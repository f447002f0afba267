import FerryProtocol
import FerryStorage
import Foundation

/// What `ferryd` reported through `FERRY_PROGRESS_FILE`: each crash point it reached, in order,
/// with how many times it had reached it (see `FerryStorage.CrashPoints`).
public struct CrashPointProgress: Sendable, CustomStringConvertible {
    /// `(name, n)` per line, in the order reached.
    public var reached: [(name: String, count: Int)]

    /// Reads the progress file at `path` (empty if it does not exist).
    public init(path: String) {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        reached = text.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: " ")
            guard parts.count == 2, let count = Int(parts[1]) else { return nil }
            return (String(parts[0]), count)
        }
    }

    /// How many times each point was reached.
    public var counts: [String: Int] {
        reached.reduce(into: [:]) { counts, point in counts[point.name] = max(counts[point.name] ?? 0, point.count) }
    }

    /// The point names in the order first reached.
    public var names: [String] {
        var seen = Set<String>()
        return reached.map(\.name).filter { seen.insert($0).inserted }
    }

    /// Where to crash to cover every point: each name's first and last reach, and with
    /// `everyReach` every reach in between, otherwise the middle one (a long run of identical
    /// steps, e.g. one erased record each, is sampled at its start, middle and end).
    public func killPoints(everyReach: Bool) -> [(name: String, count: Int)] {
        names.flatMap { name -> [(name: String, count: Int)] in
            let total = counts[name] ?? 1
            let picks = everyReach ? Array(1...total) : Array(Set([1, (total + 1) / 2, total])).sorted()
            return picks.map { (name, $0) }
        }
    }

    public var description: String {
        names.map { "\($0)×\(counts[$0] ?? 0)" }.joined(separator: " ")
    }
}

/// One record of a segmented log directory (`segments/` or `held/`), decoded for checks.
public struct LogRecordSummary: Sendable {
    /// The event id (kept by erased records too).
    public var id: String
    /// Whether the record was erased in place.
    public var erased: Bool
    /// The event's name, user id, category byte and properties (nil for an erased record).
    public var name: String?
    public var userID: String?
    public var category: UInt8?
    public var properties: String?
}

/// Every valid record in the segment files of `directory`, oldest first, read without changing
/// anything (a torn or damaged record is not a record and is not listed).
public func logRecords(in directory: String) throws -> [LogRecordSummary] {
    let names = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".seg") }.sorted()
    var records: [LogRecordSummary] = []
    for name in names {
        _ = try SegmentScanner.scan(path: directory + "/" + name, truncateTornTail: false) { offset, size, body in
            guard body.count >= LogRecord.bodyPrefixSize + 16 else { return }
            let stored = StoredEvent(position: LogPosition(segment: 0, offset: offset), size: size, body: body)
            var summary = LogRecordSummary(id: stored.decodedID.description, erased: stored.isErased)
            if !stored.isErased, let event = try? stored.decoded() {
                summary.name = event.name
                summary.userID = event.userID
                summary.category = event.category
                summary.properties = String(decoding: event.properties, as: UTF8.self)
            }
            records.append(summary)
        }
    }
    return records
}

/// Writes a dead letter for sink `sink` holding `events` (encoded frames) into the data
/// directory `dataDirectory`, as a sink that refused them would have; returns its id.
@discardableResult
public func writeDeadLetter(dataDirectory: String, sink: String, events: [WireEvent], reason: String = "permanent") throws -> String {
    let stored = events.map { StoredEvent(position: LogPosition(segment: 0, offset: 0), size: LogRecord.framedSize(frameSize: $0.encoded().count),
                                          acceptedAt: WallClock.unixMilliseconds(), frame: $0.encoded()) }
    let id = (events.first?.id.description ?? "empty") + "-\(events.count)"
    let letter = DeadLetter(id: id, sink: sink, createdAt: WallClock.unixMilliseconds(), reason: reason, error: "HTTP 400",
                            upstreamStatus: 400, upstreamBody: nil, attempts: 1, idempotencyKey: id, consent: [:], events: stored)
    try DeadLetterStore(dataDirectory: dataDirectory).write(letter)
    return id
}
