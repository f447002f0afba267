import ArgumentParser
import Ferry
import FerryProtocol
import FerryStorage
import Foundation

/// `ferry quarantine`: events that broke the host's tracking plan under `"onViolation":
/// "quarantine"`, kept in `<data>/quarantine/` (docs/QUALITY.md, "Quarantine").
struct QuarantineCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "quarantine",
        abstract: "List, show, replay or drop events quarantined by the tracking plan.",
        discussion: """
            An event that breaks the tracking plan (quality.plan) while quality.onViolation is \
            "quarantine" is kept in <data>/quarantine/<event id>.q, acked accepted with reason \
            quarantined, and never delivered until released. list and show read the directory: \
            --data-dir when given, else the one the running agent reports (found like every other \
            command, by --runtime-dir or FERRY_RUNTIME_DIR), else the default (no agent needed); replay asks the running agent to judge each event again against the plan \
            in effect (fix the plan, reload ferryd with SIGHUP, then replay): an event that passes is \
            stored once and leaves the quarantine, one that still breaks the plan stays. drop deletes \
            events for good.
            """,
        subcommands: [List.self, Show.self, Replay.self, Drop.self]
    )

    /// Options of the commands that read the directory.
    struct Location: ParsableArguments {
        @Option(name: .long, help: "Data directory. Default: the running agent's (asked over its control socket); with no agent running, $XDG_STATE_HOME/ferry or ~/.local/state/ferry.")
        var dataDir: String?

        @OptionGroup var agent: AgentOptions

        /// The quarantine of `--data-dir`, else of the running agent, else of the default directory.
        func store() throws -> QuarantineStore {
            QuarantineStore(dataDirectory: try Control.dataDirectory(explicit: dataDir, runtimeDirectory: agent.runtimeDirectory))
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List quarantined events, oldest first.")
        @OptionGroup var location: Location
        @Flag(name: .long, help: "Print a JSON array instead of text.")
        var json = false

        func run() throws {
            let store = try location.store()
            var rows: [[String: Any]] = []
            for id in try store.ids() {
                var row: [String: Any] = ["id": id.description, "path": store.path(id)]
                do {
                    if let entry = try store.load(id) {
                        row["quarantined_at"] = Int(entry.quarantinedAt)
                        row["violations"] = (try? JSONSerialization.jsonObject(with: Data(entry.violations.utf8))) ?? entry.violations
                        if let event = try? WireEvent(decoding: entry.frame, checkingFields: false) {
                            row["type"] = event.type.description
                            row["name"] = event.name
                        }
                    }
                } catch {
                    row["unreadable"] = "\(error)"
                }
                rows.append(row)
            }
            // Oldest first by when each was quarantined (the ids sort by when the client made
            // the event, which a client's clock or a Segment messageId need not follow).
            rows.sort { ($0["quarantined_at"] as? Int ?? 0, $0["id"] as! String) < ($1["quarantined_at"] as? Int ?? 0, $1["id"] as! String) }
            if try printedJSONOrNone(rows, json: json, none: "no quarantined events in \(store.directory)") { return }
            for row in rows {
                if let unreadable = row["unreadable"] {
                    print("\(row["id"]!)  UNREADABLE: \(unreadable)")
                    continue
                }
                let count = (row["violations"] as? [Any])?.count ?? 0
                let rules = ((row["violations"] as? [[String: Any]]) ?? []).compactMap { $0["rule"] as? String }
                print("\(row["id"]!)  \(DeadLetterCommand.List.time(row["quarantined_at"] as? Int ?? 0))  \(row["type"] ?? "?") \"\(row["name"] ?? "")\"  \(counted(count, "violation")) (\(Set(rules).sorted().joined(separator: ", ")))")
            }
            print(counted(rows.count, "quarantined event"))
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show one quarantined event: what it broke, and the event as stored.")
        @Argument(help: "The event's id (see `ferry quarantine list`).")
        var id: String
        @OptionGroup var location: Location

        func run() throws {
            guard let eventID = EventID(id) else { throw ValidationError("'\(id)' is not an event id") }
            let store = try location.store()
            guard let entry = try store.load(eventID) else { throw CLIError.message("no quarantined event \(id) in \(store.directory)") }
            print("quarantined event \(entry.id)")
            print("  quarantined  \(DeadLetterCommand.List.time(Int(entry.quarantinedAt)))")
            let origin = entry.origin.withUnsafeBytes { EventOrigin(metadata: RecordMetadata(decoding: $0)) }
            if let origin, let uid = origin.uid { print("  sender uid   \(uid)\(origin.exe.map { " (\($0))" } ?? "")") }
            print("  violations")
            let violations = (try? JSONSerialization.jsonObject(with: Data(entry.violations.utf8))) as? [[String: Any]] ?? []
            for violation in violations {
                print("    \(violation["path"] ?? "") [\(violation["rule"] ?? "")]: \(violation["message"] ?? "")")
            }
            var line: [UInt8] = []
            let stored = StoredEvent(position: LogPosition(segment: 0, offset: 0),
                                     size: LogRecord.framedSize(frameSize: entry.frame.count, metadataSize: entry.origin.count),
                                     acceptedAt: entry.quarantinedAt, frame: entry.frame,
                                     metadata: entry.origin.withUnsafeBytes { RecordMetadata(decoding: $0) })
            JSONWriter.appendLine(for: stored, to: &line)
            print("  event        \(String(decoding: line, as: UTF8.self).trimmingCharacters(in: .newlines))")
        }
    }

    /// Prints a reply's results; exits 1 unless every event is settled.
    static func report(_ reply: QuarantineReply, json: Bool, text: String) throws {
        if json {
            print(text)
        } else {
            for result in reply.results {
                var line = "\(result.id)  \(result.outcome)"
                if let error = result.error { line += ": \(error)" }
                print(line)
                for violation in result.violations ?? [] { print("    \(violation)") }
            }
            let settled = reply.results.count { ["stored", "duplicate", "blocked", "dropped"].contains($0.outcome) }
            print("\(settled) of \(reply.results.count) settled; \(reply.results.count - settled) still quarantined")
        }
        if !reply.settled { throw ExitCode(1) }
    }

    struct Replay: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Ask the running agent to judge quarantined events again and store those that pass.",
            discussion: """
                Each event is judged against the plan in effect now: stored (once: a replay cut short \
                and run again answers duplicate) and removed when it passes; kept, with its violations \
                printed, when it does not (exit status 1).
                """
        )
        @OptionGroup var events: QuarantinedEvents
        @Option(name: .long, help: "Seconds to wait for the agent's answer.")
        var timeout: Double = 60
        @Flag(name: .long, help: "Print the agent's reply as JSON.")
        var json = false
        @OptionGroup var agent: AgentOptions

        func run() throws {
            let runtime = agent.runtimeDirectory
            let reply = try Control.request(.quarantineReplay(id: events.id), runtimeDirectory: runtime, timeout: .milliseconds(Int(timeout * 1000)))
            try QuarantineCommand.report(try Control.decode(QuarantineReply.self, from: reply), json: json, text: reply.text)
        }
    }

    struct Drop: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete quarantined events for good (they are never delivered).",
            discussion: "Asks the running agent, which owns the quarantine (its size and the ferry_quarantined_events gauge)."
        )
        @OptionGroup var events: QuarantinedEvents
        @Flag(name: .long, help: "Print the agent's reply as JSON.")
        var json = false
        @OptionGroup var agent: AgentOptions

        func run() throws {
            let runtime = agent.runtimeDirectory
            let reply = try Control.request(.quarantineDrop(id: events.id), runtimeDirectory: runtime, timeout: .seconds(30))
            try QuarantineCommand.report(try Control.decode(QuarantineReply.self, from: reply), json: json, text: reply.text)
        }
    }
}

/// Which quarantined events a command acts on: one, by its id, or every one (`--all`).
struct QuarantinedEvents: ParsableArguments {
    @Argument(help: "The event's id.")
    var id: String?
    @Flag(name: .long, help: "Every quarantined event.")
    var all = false

    func validate() throws {
        guard (id != nil) != all else { throw ValidationError("give an event id or --all") }
        if let id, EventID(id) == nil { throw ValidationError("'\(id)' is not an event id") }
    }
}
