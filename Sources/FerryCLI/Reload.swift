import ArgumentParser
import Ferry
import FerryProtocol

/// `ferry reload`: what SIGHUP does, asked over the control socket, with the outcome as the reply.
struct Reload: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Ask the agent to read its configuration again and apply it (what SIGHUP does); print what it applied or refused.",
        discussion: """
            The agent reads its configuration file again (with its command-line flags on top) and \
            applies the keys that can change while it runs (daemon/README.md, "Reload"). A file \
            that does not load, or a change that needs a restart, is refused whole and the running \
            configuration kept: every problem is printed with its key. Exit status: 0 applied; 1 \
            refused; 2 no agent answered; 3 access denied (reload needs the control right).
            """
    )

    @Flag(name: .long, help: "Print the agent's JSON reply instead of text.")
    var json = false

    @OptionGroup var agent: AgentOptions

    func run() async throws {
        let reply = try await agent.withControl { try await $0.send(.reload()) }
        let outcome = try Control.decode(ReloadReply.self, from: reply)
        if json {
            print(reply.text)
        } else {
            print(outcome.text, terminator: "")
        }
        if !outcome.applied { throw ExitCode(ExitStatus.failure.rawValue) }
    }
}

extension ReloadReply {
    /// `reloaded: changed logLevel, sinks[0].batch` (or `nothing changed`), or `reload refused;
    /// the running configuration is kept:` and one problem a line.
    package var text: String {
        guard applied else {
            return "reload refused; the running configuration is kept:\n" + errors.map { "  \($0)\n" }.joined()
        }
        return "reloaded: " + (changed.isEmpty ? "nothing changed (plan and key files read again)" : "changed " + changed.joined(separator: ", ")) + "\n"
    }
}
