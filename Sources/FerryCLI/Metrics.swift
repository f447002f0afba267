import ArgumentParser
import FerryProtocol

/// `ferry metrics`: the agent's Prometheus text exposition, over the control socket.
struct Metrics: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the agent's metrics in the Prometheus text format (over the control socket; no network).",
        discussion: "The same text as GET /metrics when the agent serves it (configuration: \"metrics\": {\"listen\": \"127.0.0.1:9464\"})."
    )

    @OptionGroup var agent: AgentOptions

    func run() throws {
        let reply = try Control.request(.metrics(), runtimeDirectory: agent.runtimeDirectory)
        print(try Control.decode(MetricsReply.self, from: reply).text, terminator: "")
    }
}
