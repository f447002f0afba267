import ArgumentParser
import Ferry
import FerryProtocol
import Foundation

/// `ferry recipients --user ID`: which sinks received a user's events, by the rule `ferry forget`
/// sends its erasures by.
struct Recipients: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show which sinks received one user's events, and when: the sinks `ferry forget --user` sends an erasure to.",
        discussion: """
            One line per sink: delivered (with when the first and last of the user's events it \
            delivered were accepted), may have delivered (one may be in the batch on the wire, or \
            the log no longer tells), not yet (waiting after its cursor), or never (its route \
            excludes every event of the user, the events' own categoryPreferences refuse what it \
            requires, or a category it requires has not been granted since before they were \
            written). `ferry forget --user` sends an erasure to exactly the delivered and may-have \
            sinks (docs/CONSENT.md, "Which sinks"). Exit status: 0 answered; 1 refused; 2 no \
            agent answered; 3 access denied (recipients needs the control right).
            """
    )

    @Option(name: .long, help: "The user id whose recipients to show.")
    var user: String

    @Flag(name: .long, help: "Print the agent's JSON reply instead of text.")
    var json = false

    @OptionGroup var agent: AgentOptions

    func validate() throws {
        if user.isEmpty { throw ValidationError("--user must not be empty") }
    }

    func run() async throws {
        let reply = try await agent.withControl { try await $0.send(.recipients(userID: user)) }
        let recipients = try Control.decode(RecipientsReply.self, from: reply)
        if json { return print(reply.text) }
        print(recipients.text, terminator: "")
    }
}

extension RecipientsReply {
    /// One line per sink: `ads        never: route excludes every event of the user`.
    package var text: String {
        guard !sinks.isEmpty else { return "no sinks configured\n" }
        let width = max(12, (sinks.map(\.sink.count).max() ?? 0) + 2)
        return sinks.map { $0.sink.padding(toLength: width, withPad: " ", startingAt: 0) + $0.text + "\n" }.joined()
    }
}

extension RecipientStatus {
    /// The verdict in words.
    package var text: String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        func date(_ ms: UInt64) -> String { formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000)) }
        let erasure = receivesErasure ? "  (forget sends an erasure)" : ""
        switch verdict {
        case .delivered:
            let count = events.map { counted($0, "event") } ?? "events"
            let when = firstAt.map { first in
                lastAt.map { $0 == first ? ", accepted \(date(first))" : ", accepted \(date(first)) to \(date($0))" } ?? ""
            } ?? ""
            return "delivered: \(count)\(when)" + erasure
        case .mayHaveDelivered:
            let why = reason == "on_the_wire" ? "one of the user's events may be in the batch on the wire"
                : "the log no longer tells whose events it was sent (segments deleted or records erased)"
            return "may have delivered: " + why + erasure
        case .notYet:
            return "not yet: \(counted(events ?? 0, "event")) waiting (forget erases them here)"
        case .never:
            let parts = (reason ?? "").split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }.map { part -> String in
                let words = part.split(separator: " ", maxSplits: 1).map(String.init)
                switch words.first {
                case "no_events": return "no event of the user is stored"
                case "route": return "route excludes"
                case "category_preferences": return "the events' categoryPreferences refuse \(words.last ?? "")"
                case "consent": return "requires consent \(words.last ?? "") not granted" + (since.map { " since \(date($0))" } ?? "")
                default: return part
                }
            }
            return "never: " + parts.joined(separator: "; ")
        }
    }
}
