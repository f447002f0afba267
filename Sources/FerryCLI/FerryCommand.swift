import ArgumentParser
import FerryProtocol

/// `ferry`'s entry point: installs ``CLIExecutor`` (so libdispatch starts no thread, see there),
/// then runs ``FerryCommand`` on it. ArgumentParser's `main()` parses, runs the command and exits
/// with its status, as it would from an async `main`.
@main
enum FerryMain {
    static func main() {
        CLIExecutorFactory.install()
        Task {
            await FerryCommand.main()
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
struct FerryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ferry",
        abstract: "Emit events to, watch, inspect and control consent of the local Ferry agent (ferryd).",
        version: FerryVersion.current,
        subcommands: [
            Emit.self, Tail.self, Status.self, Top.self, Metrics.self, Health.self, Queue.self, DeadLetterCommand.self, QuarantineCommand.self, Consent.self, Tracking.self,
            Features.self, Purge.self, Forget.self, Start.self, WhoAmI.self, PlanCommand.self,
        ]
    )
}

/// Options shared by every command that talks to a running agent.
struct AgentOptions: ParsableArguments {
    @Option(name: .long, help: "Runtime directory of the agent. Default: $FERRY_RUNTIME_DIR; else the per-user agent's ($XDG_RUNTIME_DIR/ferry or /tmp/ferry-<uid>) if it runs; else the system agent's (/run/ferry) if it runs; else the per-user one.")
    var runtimeDir: String?
}
