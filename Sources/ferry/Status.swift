import ArgumentParser
import FerryProtocol
import Foundation

/// `ferry status`: what the agent is doing.
struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show queue depth, bytes, oldest undelivered age, delivery state and counters."
    )

    @Flag(name: .long, help: "Print the raw status document as JSON.")
    var json = false

    @OptionGroup var agent: AgentOptions

    func run() throws {
        let runtime = agent.runtimeDir ?? FerryPaths.runtimeDirectory()
        let status = try Control.request(.status(), runtimeDirectory: runtime)
        if json {
            let data = try JSONSerialization.data(withJSONObject: status, options: [.sortedKeys])
            print(String(decoding: data, as: UTF8.self))
            return
        }
        let queue = status["queue"] as? [String: Any] ?? [:]
        let sinks = status["sinks"] as? [[String: Any]] ?? []
        let counters = status["counters"] as? [String: Any] ?? [:]
        let age = (queue["oldest_undelivered_age_ms"] as? NSNumber).map { "\($0.intValue) ms" } ?? "-"
        print("ferryd pid \(status["pid"] ?? "?"), up \(((status["uptime_ms"] as? NSNumber)?.intValue ?? 0) / 1000) s")
        print("  runtime dir   \(status["runtime_dir"] ?? "?")")
        print("  data dir      \(status["data_dir"] ?? "?")")
        print("queue")
        print("  events        \(queue["events"] ?? 0)")
        print("  bytes         \(queue["bytes"] ?? 0) in \(queue["segments"] ?? 0) segments")
        print("  oldest        \(age)")
        print("sinks")
        for sink in sinks {
            print("  \(sink["name"] ?? "?") (\(sink["type"] ?? "?")): \(sink["state"] ?? "?"), circuit \(sink["circuit"] ?? "?")")
            print("    backlog     \(sink["backlog_events"] ?? 0) events")
            print("    delivered   \(sink["delivered"] ?? 0), retried \(sink["retried"] ?? 0), dead-lettered \(sink["dead_lettered"] ?? 0)")
            print("    failures    \(sink["consecutive_failures"] ?? 0) consecutive")
            if let at = sink["last_success_at"] as? NSNumber { print("    last ok     \(Self.time(at.intValue))") }
            if let at = sink["retry_at"] as? NSNumber { print("    next try    \(Self.time(at.intValue))") }
            if let error = sink["last_error"] as? String { print("    last error  \(error)") }
        }
        print("counters")
        for key in counters.keys.sorted() { print("  \(key.padding(toLength: 20, withPad: " ", startingAt: 0))\(counters[key]!)") }
    }

    static func time(_ ms: Int) -> String {
        ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }
}
