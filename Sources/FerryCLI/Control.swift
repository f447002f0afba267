import ArgumentParser
import Ferry
import FerryProtocol
import Foundation

/// Control-socket access for the CLI: one path, the client library's ``FerryControl``.
enum Control {
    /// Sends `request` and returns the agent's successful reply, or throws a clear "not running"
    /// (or "refused") error. Blocking: for the synchronous commands (`status`, `deadletter replay`).
    static func request(_ request: ControlRequest, runtimeDirectory: String, timeout: Duration = .seconds(3)) throws -> FerryControl.Reply {
        let control = FerryControl(runtimeDirectory: runtimeDirectory, timeout: timeout)
        do {
            return try control.sendBlocking(request)
        } catch {
            throw CLIError(error, runtimeDirectory: runtimeDirectory)
        }
    }

    /// Decodes `reply` as `type`, or says the agent's reply was unreadable.
    static func decode<T: Decodable>(_ type: T.Type, from reply: FerryControl.Reply) throws -> T {
        do {
            return try reply.decode(type)
        } catch {
            throw CLIError.message("the agent sent an unreadable control reply: \(error.message)")
        }
    }

    /// Whether an agent answers in `runtimeDirectory`. Asks `whoami`, which the agent answers to
    /// every caller: `status` needs the ingest right, and a refusal is not an absence.
    static func isRunning(runtimeDirectory: String) -> Bool {
        (try? request(.whoami(), runtimeDirectory: runtimeDirectory, timeout: .seconds(1))) != nil
    }

    /// The data directory of the commands that read the agent's files (`quarantine list|show`,
    /// `deadletter list|show|drop`): `explicit` (`--data-dir`) when given; else the one the agent
    /// answering in `runtimeDirectory` reports (its `status` reply's `data_dir`, so an agent
    /// started with another `--data-dir` or config is found the way every control command finds
    /// it); else, when no agent answers, the default data directory. An agent that answers but
    /// refuses (`status` needs the `ingest` right) is an error naming `--data-dir`, never a silent
    /// fall back to a directory the agent does not use.
    static func dataDirectory(explicit: String?, runtimeDirectory: String) throws -> String {
        if let explicit { return explicit }
        do {
            let reply = try request(.status(), runtimeDirectory: runtimeDirectory, timeout: .seconds(3))
            return try decode(StatusReply.self, from: reply).dataDirectory
        } catch CLIError.notRunning {
            return FerryPaths.dataDirectory()
        } catch {
            throw CLIError.message("could not ask the agent at \(runtimeDirectory) where its data directory is (\(error)); pass --data-dir")
        }
    }
}

extension AgentOptions {
    /// The runtime directory: `--runtime-dir`, else the agent's default.
    var runtimeDirectory: String { runtimeDir ?? FerryPaths.agentRuntimeDirectory() }

    /// Runs one or more control calls against the agent, turning client errors into messages for
    /// people (not running → how to start it; refused → the agent's reason and the valid values).
    func withControl<T>(actor: String? = nil, _ body: (FerryControl) async throws -> T) async throws -> T {
        let control = FerryControl(runtimeDirectory: runtimeDirectory, actor: actor)
        do {
            return try await body(control)
        } catch let error as FerryClientError {
            throw CLIError(error, runtimeDirectory: runtimeDirectory)
        }
    }
}

/// Options of the commands that change consent state.
struct ChangeOptions: ParsableArguments {
    @Option(name: .long, help: "Who asks, recorded in the consent audit log beside the calling uid, pid and process (at most 200 bytes).")
    var actor: String?

    @Flag(name: .long, help: "Print the agent's JSON reply instead of text.")
    var json = false
}

/// Errors the CLI reports to people; each has its row in ``ExitStatus``.
package enum CLIError: Error, CustomStringConvertible {
    case notRunning(String)
    case refused(String, valid: [String])
    /// The agent's access policy refused this caller (the message says so: "access denied: …").
    case accessDenied(String)
    case message(String)

    /// The CLI form of a client-library error.
    package init(_ error: any Error, runtimeDirectory: String) {
        switch error {
        case let error as FerryClientError where error.code == .agentNotRunning: self = .notRunning(runtimeDirectory)
        case let error as FerryClientError where error.code == .refused: self = .refused(error.message, valid: error.valid)
        case let error as FerryClientError where error.code == .accessDenied: self = .accessDenied(error.message)
        case let error as CLIError: self = error
        default: self = .message("\(error)")
        }
    }

    /// The status `ferry` exits with for this error.
    package var exitStatus: ExitStatus {
        switch self {
        case .notRunning: .notRunning
        case .accessDenied: .accessDenied
        case .refused, .message: .failure
        }
    }

    package var description: String {
        switch self {
        case .notRunning(let directory):
            "ferryd is not running (no answer on ipc://\(directory)/control). Start it with `ferryd`, or point --runtime-dir / FERRY_RUNTIME_DIR at the agent's runtime directory."
        case .refused(let message, let valid) where valid.isEmpty:
            "the agent refused: \(message)"
        case .refused(let message, let valid):
            "the agent refused: \(message)\nvalid: \(valid.joined(separator: ", "))"
        case .accessDenied(let message), .message(let message):
            message
        }
    }
}
