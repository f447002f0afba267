import ArgumentParser
import Ferry
import FerryProtocol
import Foundation

/// `ferry health`: one line and an exit status for scripts and service managers.
struct Health: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Say whether the agent is healthy: exit 0 healthy, 1 degraded, 2 not running, 3 access denied.",
        discussion: """
            Degraded means the agent runs but needs attention: a sink's circuit is open, dead letters \
            are waiting, the queue holds more than 90% of its retention cap, recovery or the check of \
            older segments found damage, or client events were lost. One line says why (--json: an \
            object with state, exit_code, line and reasons).
            """
    )

    @Flag(name: .long, help: "Print {\"state\", \"exit_code\", \"line\", \"reasons\"} as JSON.")
    var json = false

    @Option(name: .long, help: "Seconds to wait for the agent's answer.")
    var timeout: Double = 3

    @OptionGroup var agent: AgentOptions

    func run() throws {
        let report = Self.check(runtimeDirectory: agent.runtimeDirectory, timeout: .milliseconds(Int(timeout * 1000)))
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            print(String(decoding: (try? encoder.encode(report)) ?? Data(), as: UTF8.self))
        } else {
            print(report.line)
        }
        throw ExitCode(report.exitCode)
    }

    /// Asks the agent for its status and judges it.
    static func check(runtimeDirectory: String, timeout: Duration) -> HealthReport {
        let control = FerryControl(runtimeDirectory: runtimeDirectory, timeout: timeout)
        do throws(FerryClientError) {
            let status = try control.sendBlocking(.status()).decode(StatusReply.self)
            return HealthReport(status: status)
        } catch where error.code == .accessDenied {
            return HealthReport(state: .accessDenied, reasons: [error.message])
        } catch where error.code == .agentNotRunning {
            return HealthReport(state: .notRunning, reasons: ["no answer on ipc://\(runtimeDirectory)/control"])
        } catch {
            return HealthReport(state: .notRunning, reasons: [error.message])
        }
    }
}
