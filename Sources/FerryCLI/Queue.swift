import ArgumentParser
import FerryStorage
import FerryProtocol
import Foundation

/// `ferry queue`: look at the on-disk queue.
struct Queue: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Inspect the agent's on-disk queue.",
        subcommands: [Inspect.self, Migrate.self]
    )

    /// `ferry queue inspect`: offline dump of the segments with CRC verification.
    struct Inspect: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the queue's segments, verify every record's CRC and report damage.",
            discussion: "Read-only; safe while ferryd runs. Exit status 1 if any damage was found."
        )

        @Option(name: .long, help: "Data directory. Default: the running agent's (asked over the control socket, as deadletter does); with no agent, $XDG_STATE_HOME/ferry or ~/.local/state/ferry.")
        var dataDir: String?

        @OptionGroup var agent: AgentOptions

        @Flag(name: .long, help: "Also print one line per event.")
        var events = false

        @Flag(name: .long, help: "Print a JSON document instead of text.")
        var json = false

        func run() throws {
            let data = try Control.dataDirectory(explicit: dataDir, runtimeDirectory: agent.runtimeDirectory)
            let segmentsDir = data + "/segments"
            guard FileManager.default.fileExists(atPath: data) else {
                throw CLIError.message("no data directory at \(data) (pass --data-dir)")
            }
            // "Delivered" means delivered to every sink: the oldest of the sinks' cursors.
            let cursorNames = ((try? FileManager.default.contentsOfDirectory(atPath: data + "/cursors")) ?? [])
                .filter { $0.hasSuffix(".cursor") }.map { String($0.dropLast(7)) }
            let cursor = cursorNames.compactMap { try? CursorStore(dataDirectory: data, sink: $0).load()?.position }.min()
            let names = ((try? FileManager.default.contentsOfDirectory(atPath: segmentsDir)) ?? [])
                .filter { $0.hasSuffix(".seg") }.sorted()
            var totalRecords = 0, totalDamage = 0, undelivered = 0
            var segmentsJSON: [[String: Any]] = []
            for name in names {
                let path = segmentsDir + "/" + name
                var lines: [String] = []
                var eventsJSON: [[String: Any]] = []
                let index = UInt64(name.dropLast(4)) ?? 0
                let result = try SegmentScanner.scan(path: path, truncateTornTail: false) { offset, size, body in
                    let position = LogPosition(segment: index, offset: offset)
                    let delivered = cursor.map { position < $0 } ?? false
                    if !delivered { undelivered += 1 }
                    guard events else { return }
                    let record = StoredEvent(position: position, size: size, body: body)
                    let frame = record.frame, acceptedAt = record.acceptedAt
                    if record.isErased {
                        lines.append("    @\(offset) \(record.decodedID) erased")
                        eventsJSON.append(["offset": Int(offset), "id": record.decodedID.description, "erased": true,
                                           "accepted_at": Int(acceptedAt), "delivered": delivered])
                    } else if let event = try? WireEvent(decoding: frame, checkingFields: false) {
                        lines.append("    @\(offset) \(event.id) \(event.type) \"\(event.name)\" source=\(event.source) seq=\(event.sequence) \(delivered ? "delivered" : "pending")")
                        eventsJSON.append(["offset": Int(offset), "id": event.id.description, "type": event.type.description,
                                           "name": event.name, "source": event.source, "seq": Int(event.sequence),
                                           "accepted_at": Int(acceptedAt), "delivered": delivered])
                    } else {
                        lines.append("    @\(offset) undecodable event frame (\(frame.count) bytes)")
                    }
                }
                totalRecords += result.records.count
                totalDamage += result.damage.count
                let damage = result.damage.map { "offset \($0.offset), \($0.length) bytes" }
                if json {
                    var entry: [String: Any] = [
                        "file": name, "bytes": Int(result.size), "records": result.records.count,
                        "header_valid": result.headerValid,
                        "damage": result.damage.map { ["offset": Int($0.offset), "length": Int($0.length)] },
                    ]
                    if events { entry["events"] = eventsJSON }
                    segmentsJSON.append(entry)
                } else {
                    print("\(name)  \(result.size) bytes  \(result.records.count) records  \(result.damage.isEmpty ? "crc ok" : "DAMAGED")")
                    if !result.headerValid { print("    bad segment header") }
                    for region in damage { print("    skipped damaged region at \(region)") }
                    lines.forEach { print($0) }
                }
            }
            if json {
                let document: [String: Any] = [
                    "data_dir": data, "segments": segmentsJSON, "records": totalRecords,
                    "undelivered": undelivered, "damaged_regions": totalDamage,
                    "cursor": cursor?.description ?? NSNull(),
                ]
                let bytes = try JSONSerialization.data(withJSONObject: document, options: [.sortedKeys])
                print(String(decoding: bytes, as: UTF8.self))
            } else {
                print("\(names.count) segments, \(totalRecords) records (\(undelivered) undelivered), \(totalDamage) damaged regions; cursor \(cursor?.description ?? "none")")
            }
            if totalDamage > 0 { throw ExitCode(1) }
        }
    }
}
