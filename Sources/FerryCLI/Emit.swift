import ArgumentParser
import Ferry
import FerryProtocol
import Foundation
import Logging

/// `ferry emit`: send events from the command line or a script.
struct Emit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send one event, or one per JSON line on standard input.",
        discussion: """
            ferry emit always waits (up to --timeout) until the agent has acked the events. Without \
            --stdin, when no agent answers it exits 2 at once. With \
            --wait it prints `accepted=N duplicate=N rejected=N` (and `held=N`, `quarantined=N`, `blocked=N`, `suppressed=N`, \
            `invalid=N`, `unacknowledged=N` when not zero). Held, blocked and suppressed events are acked \
            by the consent state; they are not errors.

            --stdin reads one JSON object per line, sending each line as soon as it arrives (so \
            `tail -f app.log | ferry emit --stdin` works): \
            {"name":"Signed Up","type":"track","properties":{"plan":"pro"},"userId":"u1"}, with \
            optional "anonymousId", "groupId", "previousId" (strings), "context" (an object), \
            "onceKey", "category" (a name or code 1-254) and "localOnly" (true/false); null means \
            absent. Any other field is an error. Blank lines are skipped; line numbers count every \
            line.

            The event model is Segment's: --anonymous-id names a user not known by --user yet, a \
            group event's --group-id is the group (account, organisation) it joins the user to, an \
            alias event's --previous-id is the user's former id, and --context is a JSON object \
            (app, device, locale …). identify, group and alias events need no NAME ("name" may be \
            left out of a --stdin line of those types).

            Every line gets an outcome: accepted, held (stored, held until consent for its category \
            is decided), quarantined (acked with reason quarantined: it \
            breaks the tracking plan and is kept in the agent's quarantine, not delivered until \
            released), duplicate, blocked, suppressed, rejected (by the agent, with a reason), \
            invalid (not sent: the line is not a valid event) or unacknowledged (no ack before \
            --timeout: it may or may not be stored). An invalid line does not stop the run: the \
            lines after it are still sent. In text, each line that is quarantined, rejected, invalid \
            or unacknowledged is named on standard error (`stdin line 2: …`); every line not named \
            was acked and goes on as usual. With --json, standard output gets one object per line, \
            in input order, as soon as its outcome is known: \
            {"line":1,"status":"accepted","id":"…"}, {"line":2,"status":"invalid","error":"…"}, \
            {"line":3,"status":"rejected","id":"…","reason":"too_large"} (blocked and suppressed lines \
            carry the consent state's reason too, e.g. "consent_denied"; a quarantined line has \
            "reason":"quarantined"), then one summary object \
            {"summary":{"accepted":N,…},"exitCode":N}.

            Exit status: 0 every line acked (accepted, held, quarantined, duplicate, blocked or suppressed); 2 no \
            agent answers (the event of the command line), or some line unacknowledged (timeout, agent unreachable); 65 some line invalid; 1 some line \
            rejected by the agent; 74 standard input could not be read (the first that applies, in \
            this order); 64 bad arguments.
            """
    )

    @Argument(help: "Event name (omit with --stdin; optional for identify, group and alias).")
    var name: String?

    @Option(name: .long, help: "Event type: \(EventType.allCases.map(\.description).joined(separator: ", ")).",
            completion: .list(EventType.allCases.map(\.description)))
    var type: String = "track"

    @Option(name: .customLong("prop"), help: "A property KEY=VALUE; VALUE is JSON if it parses (42, true, \"x\"), else a string. Repeatable.")
    var props: [String] = []

    @Option(name: .long, help: "The user id the event is about.")
    var user: String?

    @Option(name: .customLong("anonymous-id"), help: ArgumentHelp("An id for a user not (yet) known by --user (Segment's anonymousId).", valueName: "id"))
    var anonymousID: String?

    @Option(name: .customLong("group-id"), help: ArgumentHelp("The group (account, organisation) a group event joins the user to.", valueName: "id"))
    var groupID: String?

    @Option(name: .customLong("previous-id"), help: ArgumentHelp("The user's former id, which an alias event links to --user.", valueName: "id"))
    var previousID: String?

    @Option(name: .long, help: ArgumentHelp("The event's context: a JSON object such as '{\"locale\":\"fr-FR\"}'.", valueName: "json"))
    var context: String?

    @Option(name: .long, help: "Source name stamped on the events.")
    var source: String = "ferry-cli"

    @Option(name: .long, help: "Consent category: \(ConsentCategories.builtIn.map(\.name).joined(separator: ", ")), or a code 1-254 (default: from the type).")
    var category: String?

    @Option(name: .long, help: "Once-key: only the first event with this key counts (conversion dedup).")
    var onceKey: String?

    @Flag(name: .long, help: "Local only: acked and counted, never delivered upstream.")
    var localOnly = false

    @Flag(name: .long, help: "Read one JSON object per line from standard input.")
    var stdin = false

    @Flag(name: .long, help: "Print the accepted/duplicate/rejected counts once every event is acked.")
    var wait = false

    @Flag(name: .long, help: "Print each line's outcome as a JSON object on standard output, then a summary object.")
    var json = false

    @Option(name: .long, help: "Seconds to wait for the acks once the input has ended.")
    var timeout: Double = 30

    @OptionGroup var agent: AgentOptions

    func validate() throws {
        if stdin && name != nil { throw ValidationError("give an event NAME or --stdin, not both") }
        guard let eventType = EventType(name: type) else {
            throw ValidationError("unknown --type '\(type)'; valid: \(EventType.allCases.map(\.description).joined(separator: ", "))")
        }
        if !stdin && name == nil && !Self.nameless.contains(eventType) {
            throw ValidationError("missing event NAME (or use --stdin)")
        }
        if timeout <= 0 { throw ValidationError("--timeout must be positive") }
        if let category { _ = try Self.categoryCode(category) }
        if let context { _ = try Self.contextObject(context) }
    }

    /// The types whose events need no name (Segment's identify, group and alias have none).
    static let nameless: Set<EventType> = [.identify, .group, .alias]

    /// The `--context` text as an object, or a usage error (exit 64) saying why it is not one.
    static func contextObject(_ text: String) throws -> [String: FerryValue] {
        guard let data = text.data(using: .utf8),
              let parsed = try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]) else {
            throw ValidationError("--context is not valid JSON: '\(text)', give a JSON object; for example '{\"locale\":\"fr-FR\"}'")
        }
        guard case .object(let object) = ferryValue(parsed) else {
            throw ValidationError("--context must be a JSON object, got '\(text)'; for example '{\"locale\":\"fr-FR\"}'")
        }
        return object
    }

    /// A category name or code as the wire's category byte.
    static func categoryCode(_ text: String) throws -> UInt8 {
        if let code = ConsentCategories.code(of: text) { return code }
        if let code = UInt8(text), (1...254).contains(code) { return code }
        throw ValidationError("unknown category '\(text)'; valid: \(ConsentCategories.builtIn.map(\.name).joined(separator: ", ")), or a code 1-254")
    }

    func run() async throws {
        let runtime = agent.runtimeDirectory
        let single = try stdin ? nil : singleEvent()
        // One event and no agent: say so at once, as the control commands do (not after
        // --timeout). A --stdin stream waits for the agent instead (reading pauses while it is
        // away: `tail -f app.log | ferry emit --stdin` outlives a restart), and an agent that
        // goes away later is waited for: its events are reported unacknowledged.
        if single != nil, !Control.isRunning(runtimeDirectory: runtime) { throw CLIError.notRunning(runtime) }
        var logger = Logger(label: "ferry")
        logger.logLevel = .warning
        let client = try FerryClient(configuration: .init(source: source, runtimeDirectory: runtime), logger: logger)
        let reporter = EmitReporter(json: json)
        var readError: (any Error)?
        // Events are queued in input order; each one's receipt is reported when it comes.
        if let single {
            let position = reporter.expect(line: nil)
            client.enqueue(single) { reporter.resolve(position, LineOutcome($0)) }
        } else {
            do {
                try await sendLines(client, reporter)
            } catch {
                readError = error
            }
        }
        // The input is over: give the acks --timeout, then close the client, which reports the
        // events still waiting as unacknowledged.
        try? await client.flush(timeout: .milliseconds(Int(timeout * 1000)))
        await client.shutdown()
        try finish(reporter, runtime: runtime, readError: readError)
    }

    /// Reads standard input line by line as it arrives and sends each valid line at once;
    /// invalid lines are reported and skipped.
    private func sendLines(_ client: FerryClient, _ reporter: EmitReporter) async throws {
        let reader = LineReader()
        var lineNumber = 0
        while let lines = try await reader.next() {
            for line in lines {
                lineNumber += 1
                if line.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }) { continue }
                let position = reporter.expect(line: lineNumber)
                switch EmitLine.event(line, defaultType: type) {
                case .failure(let error):
                    reporter.resolve(position, .invalid(error.description))
                case .success(let event):
                    // Back-pressure instead of overflow: a script's events are never dropped by
                    // the outbox; reading stdin pauses while the agent is slow or away.
                    while client.statistics.pending >= client.configuration.outboxCapacity {
                        try await Task.sleep(for: .milliseconds(5))
                    }
                    client.enqueue(event) { reporter.resolve(position, LineOutcome($0)) }
                }
            }
        }
    }

    /// The event of the command line (without --stdin).
    private func singleEvent() throws -> Event {
        var properties: [String: FerryValue] = [:]
        for prop in props {
            guard let equals = prop.firstIndex(of: "="), equals != prop.startIndex else {
                throw ValidationError("--prop expects KEY=VALUE, got '\(prop)'")
            }
            properties[String(prop[..<equals])] = Self.value(String(prop[prop.index(after: equals)...]))
        }
        return Event(type: EventType(name: type)!, name: name ?? "", properties: properties, userID: user ?? "",
                     onceKey: onceKey ?? "", category: try category.map(Self.categoryCode) ?? 0, localOnly: localOnly,
                     anonymousID: anonymousID ?? "", groupID: groupID ?? "", previousID: previousID ?? "",
                     context: try context.map(Self.contextObject) ?? [:])
    }

    /// Prints the summary and ends with the documented exit status.
    private func finish(_ reporter: EmitReporter, runtime: String, readError: (any Error)?) throws {
        let count = reporter.count
        let exitCode = LineOutcome.exitStatus(count, readFailed: readError != nil).rawValue
        if json {
            let fields = LineOutcome.Status.allCases.map { "\"\($0.rawValue)\":\(count($0))" }.joined(separator: ",")
            print("{\"summary\":{\(fields)},\"exitCode\":\(exitCode)}")
        } else if wait || count(.unacknowledged) > 0 {
            print(LineOutcome.summaryLine(count))
        }
        if let readError {
            FileHandle.standardError.write(Data("ferry emit: stopped reading at an error: \(readError)\n".utf8))
        }
        if count(.unacknowledged) > 0 {
            let reason = Control.isRunning(runtimeDirectory: runtime)
                ? "the agent did not acknowledge them"
                : CLIError.notRunning(runtime).description
            FileHandle.standardError.write(Data(
                "ferry emit: timed out after \(timeout)s with \(count(.unacknowledged)) of \(reporter.total - count(.invalid)) events unacknowledged: \(reason)\n".utf8))
        }
        if exitCode != 0 { throw ExitCode(exitCode) }
    }

    /// Parses a property value: JSON if it is a JSON scalar/array/object, else a plain string.
    static func value(_ text: String) -> FerryValue {
        guard let data = text.data(using: .utf8),
              let parsed = try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]) else {
            return .string(text)
        }
        return ferryValue(parsed)
    }

    static func ferryValue(_ any: Any) -> FerryValue {
        switch any {
        case let string as String: return .string(string)
        case let number as NSNumber:
            if String(cString: number.objCType) == "c" { return .bool(number.boolValue) }
            let double = number.doubleValue
            if double == double.rounded(), abs(double) < 9e15 { return .int(number.int64Value) }
            return .double(double)
        case let array as [Any]: return .array(array.map(ferryValue))
        case let object as [String: Any]: return .object(object.mapValues(ferryValue))
        default: return .null
        }
    }
}
