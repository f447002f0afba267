import ArgumentParser
import Ferry
import FerryStorage
import FerryProtocol
import Foundation

/// `ferry deadletter`: batches a sink refused for good, kept in `<data>/deadletter/<sink>/`.
struct DeadLetterCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "deadletter",
        abstract: "List, show, replay or drop dead-lettered batches.",
        discussion: """
            A batch lands in <data>/deadletter/<sink>/<id>.json when its sink refuses it for good \
            (for HTTP: 400/401/403/404/422) or keeps failing past the sink's retry.maxElapsedMilliseconds; \
            a single event lands there (reason rejected) when its sink can never take it (HTTP segment \
            format: no userId or anonymousId, over 32 KB). \
            list, show and drop read the directory: --data-dir when given, else the one the running \
            agent reports (found by --runtime-dir or FERRY_RUNTIME_DIR), else the default (no agent \
            needed); replay asks the running agent to \
            hand the batch to its sink once more: on success the file is deleted, on failure it is kept.
            """,
        subcommands: [List.self, Show.self, Replay.self, Drop.self]
    )

    /// Options of the commands that read the directory.
    struct Location: ParsableArguments {
        @Option(name: .long, help: "Data directory. Default: the running agent's (asked over its control socket); with no agent running, $XDG_STATE_HOME/ferry or ~/.local/state/ferry.")
        var dataDir: String?

        @Option(name: .long, help: "Only this sink's dead letters.")
        var sink: String?

        @OptionGroup var agent: AgentOptions

        /// The dead letters of `--data-dir`, else of the running agent, else of the default directory.
        func store() throws -> DeadLetterStore {
            DeadLetterStore(dataDirectory: try Control.dataDirectory(explicit: dataDir, runtimeDirectory: agent.runtimeDirectory))
        }

        /// The sink holding `id` in `store`: `--sink` if given, else the only one that has it.
        func sink(holding id: String, in store: DeadLetterStore) throws -> String {
            guard DeadLetterStore.isValidID(id) else { throw ValidationError("'\(id)' is not a dead-letter id") }
            if let sink {
                guard store.load(exists: id, sink: sink) else { throw CLIError.message("no dead letter \(id) for sink \(sink) in \(store.directory)") }
                return sink
            }
            let holders = try store.sinks(holding: id)
            guard !holders.isEmpty else { throw CLIError.message("no dead letter \(id) in \(store.directory)") }
            guard holders.count == 1 else {
                throw CLIError.message("dead letter \(id) exists for sinks \(holders.joined(separator: ", ")); pass --sink")
            }
            return holders[0]
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List dead letters, oldest first.")
        @OptionGroup var location: Location
        @Flag(name: .long, help: "Print a JSON array instead of text.")
        var json = false

        func run() throws {
            let store = try location.store()
            let sinks = try location.sink.map { [$0] } ?? store.sinks()
            var rows: [[String: Any]] = []
            for sink in sinks {
                for id in try store.ids(sink: sink) {
                    var row: [String: Any] = ["sink": sink, "id": id, "path": store.path(sink: sink, id: id)]
                    do {
                        if let letter = try store.load(sink: sink, id: id) {
                            row["created_at"] = Int(letter.createdAt)
                            row["events"] = letter.events.count
                            row["reason"] = letter.reason
                            row["error"] = letter.error
                            row["attempts"] = letter.attempts
                            row["upstream_status"] = letter.upstreamStatus ?? NSNull()
                        }
                    } catch {
                        row["unreadable"] = "\(error)"
                    }
                    rows.append(row)
                }
            }
            if try printedJSONOrNone(rows, json: json, none: "no dead letters in \(store.directory)") { return }
            for row in rows {
                let status = (row["upstream_status"] as? Int).map { " status \($0)" } ?? ""
                if let unreadable = row["unreadable"] {
                    print("\(row["sink"]!)  \(row["id"]!)  UNREADABLE: \(unreadable)")
                } else {
                    print("\(row["sink"]!)  \(row["id"]!)  \(Self.time(row["created_at"] as? Int ?? 0))  \(counted(row["events"] as? Int ?? 0, "event"))  \(row["reason"]!)\(status): \(row["error"]!)")
                }
            }
            print(counted(rows.count, "dead letter"))
        }

        static func time(_ ms: Int) -> String {
            let formatter = ISO8601DateFormatter()
            return formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show one dead letter: why, and its events.")
        @Argument(help: "The dead letter's id (see `ferry deadletter list`).")
        var id: String
        @OptionGroup var location: Location
        @Flag(name: .long, help: "Print the stored JSON document.")
        var json = false

        func run() throws {
            let store = try location.store()
            let sink = try location.sink(holding: id, in: store)
            if json {
                let data = FileManager.default.contents(atPath: store.path(sink: sink, id: id)) ?? Data()
                print(String(decoding: data, as: UTF8.self))
                return
            }
            guard let letter = try store.load(sink: sink, id: id) else { throw CLIError.message("no dead letter \(id)") }
            print("dead letter \(letter.id)")
            print("  sink             \(letter.sink)")
            print("  created          \(List.time(Int(letter.createdAt)))")
            print("  reason           \(letter.reason)")
            print("  error            \(letter.error)")
            if let status = letter.upstreamStatus { print("  upstream status  \(status)") }
            if let body = letter.upstreamBody { print("  upstream body    \(body.prefix(500))") }
            print("  attempts         \(letter.attempts)")
            print("  idempotency key  \(letter.idempotencyKey)")
            print("  events           \(letter.events.count)")
            for event in letter.events {
                if let decoded = try? WireEvent(decoding: event.frame, checkingFields: false) {
                    print("    \(decoded.id) \(decoded.type) \"\(decoded.name)\" source=\(decoded.source) seq=\(decoded.sequence)")
                } else {
                    print("    undecodable frame (\(event.frame.count) bytes)")
                }
            }
        }
    }

    struct Replay: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Ask the running agent to deliver a dead letter to its sink once more.",
            discussion: "On success the dead letter is deleted; on failure it is kept and the error printed (exit status 1)."
        )
        @Argument(help: "The dead letter's id.")
        var id: String
        @Option(name: .long, help: "The sink (needed only if several sinks hold this id).")
        var sink: String?
        @Option(name: .long, help: "Seconds to wait for the agent's answer.")
        var timeout: Double = 60
        @Flag(name: .long, help: "Print the agent's reply as JSON.")
        var json = false
        @OptionGroup var agent: AgentOptions

        func run() throws {
            guard DeadLetterStore.isValidID(id) else { throw ValidationError("'\(id)' is not a dead-letter id") }
            let runtime = agent.runtimeDirectory
            let reply: FerryControl.Reply
            do {
                reply = try Control.request(.deadLetterReplay(id: id, sink: sink), runtimeDirectory: runtime,
                                            timeout: .milliseconds(Int(timeout * 1000)))
            } catch CLIError.refused(let message, _) {
                // The agent answered; the sink (or its upstream) is who failed, and says so.
                throw CLIError.message("replay of \(id) failed: \(message)")
            }
            if json {
                print(reply.text)
            } else {
                let result = try Control.decode(DeadLetterReplayReply.self, from: reply)
                print("replayed \(id) to \(result.sink ?? "?"): \(counted(result.events ?? 0, "event")) delivered; dead letter deleted")
            }
        }
    }

    struct Drop: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete one dead letter for good (its events are not delivered).",
            discussion: "Takes exactly one id, as printed by `ferry deadletter list`: nothing is dropped by pattern."
        )
        @Argument(help: "The dead letter's id.")
        var id: String
        @OptionGroup var location: Location

        func run() throws {
            let store = try location.store()
            let sink = try location.sink(holding: id, in: store)
            guard try store.remove(sink: sink, id: id) else { throw CLIError.message("no dead letter \(id)") }
            print("dropped \(id) (sink \(sink))")
        }
    }
}

extension DeadLetterStore {
    /// Whether dead letter `id` of `sink` exists.
    func load(exists id: String, sink: String) -> Bool {
        FileManager.default.fileExists(atPath: path(sink: sink, id: id))
    }
}
