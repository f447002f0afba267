import ArgumentParser
import Ferry
import FerryProtocol
import Foundation

/// `ferry whoami`: who the agent takes the caller for, and what its access policy allows.
struct WhoAmI: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "whoami",
        abstract: "Show who the agent takes you for (the kernel's uid, gid and pid) and what its access policy lets you do."
    )

    @Flag(name: .long, help: "Print the agent's reply as JSON.")
    var json = false

    @OptionGroup var agent: AgentOptions

    func run() throws {
        let runtime = agent.runtimeDirectory
        let reply = try Control.request(.whoami(), runtimeDirectory: runtime)
        if json {
            print(reply.text)
            return
        }
        let who = try Control.decode(WhoAmIReply.self, from: reply)
        func id(_ value: (some BinaryInteger)?) -> String { value.map { "\($0)" } ?? "unknown" }
        func yes(_ allowed: Bool) -> String { allowed ? "yes" : "no" }
        print("agent      \(runtime) (\(who.mode) mode)")
        print("you        uid \(id(who.uid)), gid \(id(who.gid)), pid \(id(who.pid))")
        print("send       \(yes(who.ingest))")
        print("control    \(yes(who.control))")
        print("event bus  \(yes(who.events))")
    }
}
