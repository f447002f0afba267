import ArgumentParser
import Foundation

/// `ferry`'s exit statuses: one table for every command (README.md, "Exit status", and the man
/// page's). A command that needs some of them says which in its `--help`; none uses a status for
/// anything but its row here.
package enum ExitStatus: Int32, CaseIterable, Sendable {
    /// Done; for `health`, healthy.
    case success = 0
    /// The command ran and the answer is no (`health`: degraded; `queue inspect`: damage found;
    /// `emit`: an event rejected; `plan check`: an event breaks the plan), or the agent refused
    /// the request, or any other error.
    case failure = 1
    /// No agent answered on the control socket (`emit`: some event unacknowledged).
    case notRunning = 2
    /// The agent's access policy refused this caller.
    case accessDenied = 3
    /// Bad arguments (refused before anything is sent).
    case usage = 64
    /// Input that is not valid: an `emit --stdin` line that is not an event, `plan check`'s plan or
    /// redact table.
    case invalidInput = 65
    /// The input could not be read.
    case unreadableInput = 74
    /// Nothing came within the time given (`tail --idle-timeout`).
    case timedOut = 75

    /// The row of the documented table: `  2  no agent answered …`.
    package var meaning: String {
        switch self {
        case .success: "done (health: healthy)"
        case .failure: "the answer is no (health: degraded; queue inspect: damage; an event rejected or breaking the plan), the agent refused, or another error"
        case .notRunning: "no agent answered on the control socket (emit: some event unacknowledged)"
        case .accessDenied: "the agent's access policy refused this caller"
        case .usage: "bad arguments, refused before anything is sent"
        case .invalidInput: "input that is not valid (an emit --stdin line that is not an event; plan check's plan or redact table)"
        case .unreadableInput: "the input could not be read"
        case .timedOut: "nothing came within the time given (tail --idle-timeout)"
        }
    }

    /// The table as `--help` and the docs print it, one row a line.
    package static var table: String {
        allCases.map { "  \(String($0.rawValue).padding(toLength: 3, withPad: " ", startingAt: 0)) \($0.meaning)" }.joined(separator: "\n")
    }

    /// Ends the process for `error`: a ``CLIError`` prints `Error: …` on standard error and exits
    /// with its row's status; every other error goes to ArgumentParser, which knows its own
    /// (`ExitCode`, usage errors: 64, anything else: 1).
    package static func exit(for error: any Error) -> Never {
        guard let error = error as? CLIError else { FerryCommand.exit(withError: error) }
        FileHandle.standardError.write(Data("Error: \(error)\n".utf8))
        FerryCommand.exit(withError: ExitCode(error.exitStatus.rawValue))
    }
}
