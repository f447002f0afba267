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
        let runtime = agent.runtimeDir ?? FerryPaths.agentRuntimeDirectory()
        let reply = try Control.request(.status(), runtimeDirectory: runtime)
        if json {
            print(reply.text)
            return
        }
        let status = try Control.decode(StatusReply.self, from: reply)
        let queue = status.queue
        let age = queue.oldestUndeliveredAgeMilliseconds.map { "\($0) ms" } ?? "-"
        print("ferryd pid \(status.pid), up \(status.uptimeMilliseconds / 1000) s")
        print("  runtime dir   \(status.runtimeDirectory)")
        print("  data dir      \(status.dataDirectory)")
        print("queue")
        print("  events        \(queue.events)")
        print("  bytes         \(queue.bytes) in \(queue.segments) segments")
        print("  oldest        \(age)")
        print("sinks")
        for sink in status.sinks {
            print("  \(sink.name) (\(sink.type)): \(sink.state), circuit \(sink.circuit)")
            print("    backlog     \(sink.backlogEvents) events")
            print("    delivered   \(sink.delivered), retried \(sink.retried), dead-lettered \(sink.deadLettered)")
            print("    failures    \(sink.consecutiveFailures) consecutive")
            if let at = sink.lastSuccessAt { print("    last ok     \(Self.time(at))") }
            if let at = sink.retryAt { print("    next try    \(Self.time(at))") }
            if let error = sink.lastError { print("    last error  \(error)") }
        }
        print("counters")
        for key in status.counters.keys.sorted() { print("  \(key.padding(toLength: 20, withPad: " ", startingAt: 0))\(status.counters[key]!)") }
    }

    static func time(_ ms: Int) -> String {
        ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }
}
