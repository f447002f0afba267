import ArgumentParser
import FerryProtocol

/// `ferry`'s entry point: installs ``CLIExecutor`` (so libdispatch starts no thread, see there),
/// then runs ``FerryCommand`` on it. ArgumentParser's `main()` parses, runs the command and exits
/// with its status, as it would from an async `main`. The `ferry` executable calls only this.
package enum FerryMain {
    /// Runs `ferry` with the process's arguments and exits with its status.
    package static func main() {
        CLIExecutorFactory.install()
        Task {
            await FerryCommand.run(arguments: nil)
            CLIExecutor.shared.stop()
        }
        do {
            try CLIExecutor.shared.run()
        } catch {
            FerryCommand.exit(withError: error)
        }
    }
}

/// `ferry`: observe and drive the local Ferry agent.
package struct FerryCommand: AsyncParsableCommand {
    package init() {}

    package static let configuration = CommandConfiguration(
        commandName: "ferry",
        abstract: "Emit events to, watch, inspect and control consent of the local Ferry agent (ferryd).",
        version: FerryVersion.current,
        subcommands: [
            Emit.self, Tail.self, Status.self, Top.self, Metrics.self, Health.self, Queue.self, DeadLetterCommand.self, QuarantineCommand.self, Consent.self, Tracking.self,
            Features.self, Purge.self, Forget.self, Recipients.self, Start.self, Reload.self, WhoAmI.self, PlanCommand.self,
        ]
    )
}

/// Options shared by every command that talks to a running agent.
struct AgentOptions: ParsableArguments {
    @Option(name: .long, help: "Runtime directory of the agent. Default: $FERRY_RUNTIME_DIR; else the per-user agent's ($XDG_RUNTIME_DIR/ferry or /tmp/ferry-<uid>) if it runs; else the system agent's (/run/ferry) if it runs; else the per-user one.")
    var runtimeDir: String?
}

extension FerryCommand {
    /// Parses `arguments` (nil: the process's), runs the command and exits: with 0 when it
    /// returns, else with its error's status in ``ExitStatus``' table.
    static func run(arguments: [String]?) async {
        do {
            var command = try parseAsRoot(arguments)
            if var asynchronous = command as? any AsyncParsableCommand {
                try await asynchronous.run()
            } else {
                try command.run()
            }
        } catch {
            ExitStatus.exit(for: error)
        }
        exit()
    }
}
