import ArgumentParser
import Ferry
import FerryProtocol
import Foundation

extension ConsentStatus: ExpressibleByArgument {}

/// `ferry consent`: show and change the host's consent state, read its audit log.
struct Consent: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show or change consent (per category, persistence, GDPR) and read the consent audit log.",
        subcommands: [Show.self, SetStatus.self, Log.self],
        defaultSubcommand: Show.self
    )

    /// `ferry consent show`.
    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show the whole consent state.")

        @Flag(name: .long, help: "Print the agent's JSON reply (`consent_state`).")
        var json = false

        @OptionGroup var agent: AgentOptions

        func run() async throws {
            let reply = try await agent.withControl { try await $0.send(.consentState()) }
            if json { return print(reply.text) }
            let state = try reply.decode(ConsentUpdate.self).consent
            print(ConsentText.describe(state), terminator: "")
        }
    }

    /// `ferry consent set`: a category's status, persistence consent, or GDPR fields.
    struct SetStatus: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Set the consent of a category (or all), persistence consent, or GDPR fields.",
            usage: """
                ferry consent set <category|all> <granted|denied|undetermined>
                ferry consent set --persistence <granted|denied|undetermined>
                ferry consent set --gdpr <field>=<value> ...
                """,
            discussion: """
                Categories are the agent's (`ferry consent show` lists them); an unknown one is refused \
                with the valid names. Denying a category erases its pending and held events and prints how many.

                --gdpr sets fields of the GDPR record (Google Consent Mode v2): \
                \(GDPRRecord.fieldNames.joined(separator: ", ")), each \(GDPRValue.allCases.map(\.rawValue).joined(separator: ", ")). \
                Fields not named keep their value. subject_to_gdpr=granted with data_usage=denied stops \
                delivery and erases the queue; the two ad fields never gate, they are stamped on delivered batches.
                Example: ferry consent set --gdpr subject_to_gdpr=granted data_usage=denied
                """
        )

        @Argument(help: ArgumentHelp("<category|all> <status>, or with --gdpr one or more <field>=<value>.",
                                     valueName: "values"))
        var values: [String] = []

        @Option(name: .long, help: ArgumentHelp("Set persistence consent (may the agent keep a stable anonymous id across restarts).",
                                                valueName: "status"))
        var persistence: ConsentStatus?

        @Flag(name: .long, help: "Set GDPR fields, given as <field>=<value> arguments.")
        var gdpr = false

        @OptionGroup var change: ChangeOptions
        @OptionGroup var agent: AgentOptions

        /// What to change.
        enum Target {
            case category(String, ConsentStatus)
            case persistence(ConsentStatus)
            case gdpr([String: GDPRValue])
        }

        /// The change the arguments ask for, or a message naming what is valid.
        func target() throws -> Target {
            let statuses = ConsentStatus.allCases.map(\.rawValue).joined(separator: ", ")
            if let persistence {
                guard values.isEmpty, !gdpr else {
                    throw ValidationError("--persistence takes no other arguments: `ferry consent set --persistence <status>`")
                }
                return .persistence(persistence)
            }
            if gdpr { return .gdpr(try Self.parseGDPR(values)) }
            switch values.count {
            case 0:
                throw ValidationError("""
                    missing <category|all> and <status>: `ferry consent set <category|all> <status>`, \
                    `ferry consent set --persistence <status>` or `ferry consent set --gdpr <field>=<value> ...`
                    """)
            case 1 where ConsentStatus(rawValue: values[0]) != nil:
                throw ValidationError("missing <category|all> before '\(values[0])': `ferry consent set <category|all> \(values[0])`")
            case 1 where values[0].contains("="):
                throw ValidationError("GDPR fields need --gdpr: `ferry consent set --gdpr \(values[0])`")
            case 1:
                throw ValidationError("missing <status> after '\(values[0])'; valid: \(statuses)")
            case 2:
                if values[0].isEmpty { throw ValidationError("the category must not be empty") }
                guard let status = ConsentStatus(rawValue: values[1]) else {
                    throw ValidationError("invalid status '\(values[1])'; valid: \(statuses)")
                }
                return .category(values[0], status)
            default:
                if values.allSatisfy({ $0.contains("=") }) {
                    throw ValidationError("GDPR fields need --gdpr: `ferry consent set --gdpr \(values.joined(separator: " "))`")
                }
                throw ValidationError("too many arguments: `ferry consent set <category|all> <status>` sets one category (or `all`)")
            }
        }

        /// Parses `field=value` pairs, naming the valid fields and values on a mistake.
        static func parseGDPR(_ assignments: [String]) throws -> [String: GDPRValue] {
            let fields = GDPRRecord.fieldNames.joined(separator: ", ")
            let values = GDPRValue.allCases.map(\.rawValue).joined(separator: ", ")
            guard !assignments.isEmpty else {
                throw ValidationError("--gdpr needs at least one <field>=<value>; fields: \(fields); values: \(values)")
            }
            var result: [String: GDPRValue] = [:]
            for assignment in assignments {
                let parts = assignment.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                guard parts.count == 2 else {
                    throw ValidationError("expected <field>=<value>, got '\(assignment)'; fields: \(fields); values: \(values)")
                }
                let field = String(parts[0]), value = String(parts[1])
                guard GDPRRecord.fieldNames.contains(field) else {
                    throw ValidationError("unknown GDPR field '\(field)'; valid: \(fields)")
                }
                guard let parsed = GDPRValue(rawValue: value) else {
                    throw ValidationError("invalid value '\(value)' for \(field); valid: \(values)")
                }
                if let earlier = result[field], earlier != parsed {
                    throw ValidationError("\(field) given twice with different values")
                }
                result[field] = parsed
            }
            return result
        }

        func validate() throws { _ = try target() }

        func run() async throws {
            let target = try target()
            let request: ControlRequest = switch target {
            case .category(let category, let status): .setConsent(status, for: category)
            case .persistence(let status): .setPersistence(status)
            case .gdpr(let fields): .setGDPR(fields)
            }
            let reply = try await agent.withControl(actor: change.actor) { try await $0.send(request) }
            if change.json { return print(reply.text) }
            let update = try reply.decode(ConsentUpdate.self)
            let state = update.consent
            switch target {
            case .category("all", let status):
                print("consent \(status) for all categories (\(state.categories.joined(separator: ", ")))")
            case .category(let category, let status):
                print("consent \(state.consent[category]?.rawValue ?? status.rawValue) for \(category)")
            case .persistence:
                print("persistence consent \(state.persistence)")
            case .gdpr:
                print("gdpr " + GDPRRecord.fieldNames.map { "\($0)=\(state.gdpr[$0]?.rawValue ?? "?")" }.joined(separator: " "))
                if state.gdpr.forbidsDataUsage { print("data usage denied for a GDPR subject: nothing is delivered") }
            }
            if let purged = update.purged { print(ConsentText.purged(purged)) }
        }
    }

    /// `ferry consent log`.
    struct Log: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show the consent audit log and whether its hash chain verifies.",
            discussion: "Exit status 1 when the chain does not verify (the log was altered or damaged), also with --json."
        )

        @Option(name: .long, help: "Only the newest N entries (the whole chain is verified regardless).")
        var limit: Int?

        @Flag(name: .long, help: "Print the agent's JSON reply (`consent_log`).")
        var json = false

        @OptionGroup var agent: AgentOptions

        func validate() throws {
            if let limit, limit <= 0 { throw ValidationError("--limit must be positive") }
        }

        func run() async throws {
            let reply = try await agent.withControl { try await $0.send(.consentLog(limit: limit)) }
            let log = try reply.decode(ConsentAuditLog.self)
            if json {
                print(reply.text)
            } else {
                for entry in log.entries { print(ConsentText.describe(entry)) }
                if log.verified {
                    print("hash chain verified (\(log.entries.count) entries shown)")
                } else {
                    print("HASH CHAIN BROKEN: \(log.problem ?? "no detail from the agent")")
                }
            }
            if !log.verified {
                FileHandle.standardError.write(Data("ferry: the consent audit log does not verify: \(log.problem ?? "no detail")\n".utf8))
                throw ExitCode(1)
            }
        }
    }
}

/// `ferry tracking on|off|status`.
struct Tracking: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Turn runtime tracking on or off, or show it.",
        discussion: """
            While tracking is off, new events are dropped (not buffered); events already queued keep \
            draining. Tracking is AND-gated with the configured kill switch (networkTracking), which \
            cannot be changed at runtime.
            """
    )

    /// What to do.
    enum Action: String, CaseIterable, ExpressibleByArgument {
        case on, off, status
    }

    @Argument(help: "on, off or status.")
    var action: Action = .status

    @OptionGroup var change: ChangeOptions
    @OptionGroup var agent: AgentOptions

    func run() async throws {
        let request: ControlRequest = switch action {
        case .on: .setTracking(true)
        case .off: .setTracking(false)
        case .status: .consentState()
        }
        let reply = try await agent.withControl(actor: change.actor) { try await $0.send(request) }
        if change.json { return print(reply.text) }
        let state = try reply.decode(ConsentUpdate.self).consent
        print("tracking \(state.trackingEnabled ? "on" : "off")")
        if !state.networkTracking {
            print("note: the configured kill switch (networkTracking: false) blocks all delivery whatever this says")
        }
    }
}

/// `ferry features enable|disable|list`.
struct Features: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Enable, disable or list feature categories (none enabled = no-op mode: nothing stored or sent).",
        subcommands: [List.self, Enable.self, Disable.self],
        defaultSubcommand: List.self
    )

    /// `ferry features list`.
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the categories and which are enabled.")

        @Flag(name: .long, help: "Print the agent's JSON reply (`consent_state`).")
        var json = false

        @OptionGroup var agent: AgentOptions

        func run() async throws {
            let reply = try await agent.withControl { try await $0.send(.consentState()) }
            if json { return print(reply.text) }
            let state = try reply.decode(ConsentUpdate.self).consent
            print(ConsentText.features(state), terminator: "")
        }
    }

    /// `ferry features enable`.
    struct Enable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Enable feature categories (`all` for every one).")

        @Argument(help: ArgumentHelp("Category names, or `all`.", valueName: "name|all"))
        var names: [String]

        @OptionGroup var change: ChangeOptions
        @OptionGroup var agent: AgentOptions

        func validate() throws { try Features.validate(names) }

        func run() async throws {
            let reply = try await agent.withControl(actor: change.actor) { try await $0.send(.enableFeatures(names)) }
            if change.json { return print(reply.text) }
            print(ConsentText.features(try reply.decode(ConsentUpdate.self).consent), terminator: "")
        }
    }

    /// `ferry features disable`.
    struct Disable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Disable feature categories (`all` for every one) and erase their pending events."
        )

        @Argument(help: ArgumentHelp("Category names, or `all`.", valueName: "name|all"))
        var names: [String]

        @OptionGroup var change: ChangeOptions
        @OptionGroup var agent: AgentOptions

        func validate() throws { try Features.validate(names) }

        func run() async throws {
            let reply = try await agent.withControl(actor: change.actor) { try await $0.send(.disableFeatures(names)) }
            if change.json { return print(reply.text) }
            let update = try reply.decode(ConsentUpdate.self)
            print(ConsentText.features(update.consent), terminator: "")
            if let purged = update.purged { print(ConsentText.purged(purged)) }
        }
    }

    static func validate(_ names: [String]) throws {
        if names.isEmpty { throw ValidationError("give at least one category name, or `all`") }
        if names.contains(where: \.isEmpty) { throw ValidationError("category names must not be empty") }
    }
}

/// `ferry purge`.
struct Purge: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Erase pending events: those of one category, or every pending and held event.",
        discussion: "The records are overwritten on disk, not only skipped. Prints how many were erased."
    )

    @Option(name: .long, help: "Only this category's events.")
    var category: String?

    @OptionGroup var change: ChangeOptions
    @OptionGroup var agent: AgentOptions

    func validate() throws {
        if category?.isEmpty == true { throw ValidationError("--category must not be empty") }
    }

    func run() async throws {
        let reply = try await agent.withControl(actor: change.actor) { try await $0.send(.purge(category: category)) }
        if change.json { return print(reply.text) }
        let purged = try reply.decode(PurgeReply.self).report
        print(ConsentText.purged(purged) + (category.map { " (category \($0))" } ?? ""))
    }
}

/// `ferry forget`: `ferry forget --user ID` (the default subcommand) and `ferry forget status`.
struct Forget: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Erase one user's events here and ask every upstream that received them to erase them too.",
        usage: "ferry forget --user <user> [--actor <actor>] [--json]\nferry forget status [--json]",
        discussion: """
            `ferry forget --user ID` erases the user's pending and held events and records an erasure \
            request for every sink that may have delivered the user's events; `ferry forget status` \
            shows where each request stands (docs/CONSENT.md, "Erasure upstream").
            """,
        subcommands: [ForgetUser.self, ForgetStatus.self],
        defaultSubcommand: ForgetUser.self
    )
}

/// `ferry forget --user ID`.
struct ForgetUser: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "user",
        abstract: "Erase every pending and held event of one user and request its erasure upstream (right to erasure).",
        // The subcommand's name is never typed (it is the default): usage errors show the form
        // the docs use.
        usage: "ferry forget --user <user> [--actor <actor>] [--json] [--runtime-dir <runtime-dir>]",
        discussion: "The request is sent to every sink that delivered (or may have delivered) the user's events, the ones `ferry recipients --user` lists; see `ferry forget status`."
    )

    @Option(name: .long, help: "The user id whose events to erase.")
    var user: String

    @OptionGroup var change: ChangeOptions
    @OptionGroup var agent: AgentOptions

    func validate() throws {
        if user.isEmpty { throw ValidationError("--user must not be empty") }
    }

    func run() async throws {
        let reply = try await agent.withControl(actor: change.actor) { try await $0.send(.forget(userID: user)) }
        if change.json { return print(reply.text) }
        let purged = try reply.decode(PurgeReply.self).report
        print(ConsentText.purged(purged) + " for user \(user)")
    }
}

/// `ferry forget status`.
struct ForgetStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show every upstream erasure request, per sink: pending, attempts, last error, done.",
        discussion: "Exits 0; the JSON form is the agent's `forget_status` reply."
    )

    @Flag(name: .long, help: "Print the agent's reply as JSON.")
    var json = false

    @OptionGroup var agent: AgentOptions

    func run() async throws {
        let reply = try await agent.withControl(actor: nil) { try await $0.send(.forgetStatus()) }
        if json { return print(reply.text) }
        print(ConsentText.erasures(try reply.decode(ErasureStatusReply.self)), terminator: "")
    }
}

extension ConsentText {
    /// `ferry forget status`: one block per request, one line per sink.
    static func erasures(_ reply: ErasureStatusReply) -> String {
        guard !reply.erasures.isEmpty else { return "no erasure requests\n" }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        func date(_ ms: UInt64) -> String { formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000)) }
        var out = ""
        for request in reply.erasures {
            out += "request \(request.id)  \(date(request.requestedAt))  \(request.done ? "done" : "pending")\n"
            for sink in request.sinks {
                var line = "  " + pad(sink.sink, 16) + pad(sink.state.rawValue, 9) + "attempts \(sink.attempts)"
                if let reference = sink.reference { line += "  reference \(reference)" }
                if let error = sink.lastError { line += "  last error: \(error)" }
                out += line + "\n"
            }
        }
        return out
    }
}

/// `ferry start`.
struct Start: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Start delivery on an agent configured to wait for it (autoStart: false).",
        discussion: "Does nothing if delivery already runs."
    )

    @OptionGroup var change: ChangeOptions
    @OptionGroup var agent: AgentOptions

    func run() async throws {
        let reply = try await agent.withControl(actor: change.actor) { try await $0.send(.start()) }
        if change.json { return print(reply.text) }
        print("delivery started")
    }
}

/// Text renderings shared by the consent commands.
enum ConsentText {
    static func pad(_ text: String, _ width: Int = 22) -> String {
        text.count >= width ? text + " " : text.padding(toLength: width, withPad: " ", startingAt: 0)
    }

    /// `ferry consent show`.
    static func describe(_ state: ConsentSnapshot) -> String {
        var out = ""
        func line(_ label: String, _ value: String) { out += "  " + pad(label, 20) + value + "\n" }
        out += "tracking\n"
        line("runtime", state.trackingEnabled ? "on" : "off")
        line("kill switch", state.networkTracking ? "allows delivery (networkTracking: true)" : "BLOCKS all delivery (networkTracking: false)")
        line("delivery", state.deliveryStarted ? "started" : "waiting for `ferry start`")
        out += "features\n"
        line("enabled", state.isNoOp ? "none (no-op mode: nothing stored or sent)" : state.enabledFeatures.joined(separator: ", "))
        out += "consent\n"
        for category in state.categories { line(category, state.consent[category]?.rawValue ?? "undetermined") }
        for category in state.consent.keys.sorted() where !state.categories.contains(category) {
            line(category, state.consent[category]!.rawValue)
        }
        line("persistence", state.persistence.rawValue)
        out += "gdpr\n"
        for field in GDPRRecord.fieldNames { line(field, state.gdpr[field]?.rawValue ?? "unset") }
        if state.gdpr.forbidsDataUsage { out += "  (data usage denied for a GDPR subject: nothing is delivered)\n" }
        out += "agent\n"
        line("anonymous id", state.anonymousID.isEmpty ? "-" : state.anonymousID)
        line("held events", "\(state.heldEvents)")
        line("audit log", state.auditEntries == 0 ? "empty" : "\(state.auditEntries) entries, head \(state.auditHead.prefix(16))…")
        return out
    }

    /// `ferry features list`.
    static func features(_ state: ConsentSnapshot) -> String {
        var out = ""
        for category in state.categories {
            out += "  " + pad(category) + (state.enabledFeatures.contains(category) ? "enabled" : "disabled") + "\n"
        }
        if state.isNoOp { out += "no feature enabled: no-op mode, nothing is stored or sent\n" }
        return out
    }

    /// `erased N events (q queued, h held)`, and `, x quarantined` inside the parentheses when the
    /// change deleted quarantined events.
    static func purged(_ report: PurgeReport) -> String {
        let quarantined = report.quarantined == 0 ? "" : ", \(report.quarantined) quarantined"
        return "erased \(counted(report.total, "event")) (\(report.queued) queued, \(report.held) held\(quarantined))"
    }

    /// One audit entry on one line.
    static func describe(_ entry: AuditEntry) -> String {
        let date = Date(timeIntervalSince1970: Double(entry.at) / 1000)
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var who: [String] = []
        if let uid = entry.uid { who.append("uid \(uid)") }
        if let pid = entry.pid { who.append("pid \(pid)") }
        if let process = entry.process, !process.isEmpty { who.append(process) }
        if let actor = entry.actor, !actor.isEmpty { who.append("actor \"\(actor)\"") }
        return "#\(entry.seq)  \(formatter.string(from: date))  \(entry.change): \(entry.old) -> \(entry.new)  by \(who.isEmpty ? "unknown" : who.joined(separator: " "))  hash \(entry.hash.prefix(12))"
    }
}
