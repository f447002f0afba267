import ArgumentParser
import FerryAgent
import FerryCLI
import FerryProtocol
import Foundation
import Testing

/// Docs = binary (issue 39): every option `--help` shows is documented with its command, every
/// `ferry …` command line in the docs uses options its command has, and the version is one.
@Suite("Docs and the binary")
struct DocsTests {
    static let repository = ExitStatusTests.repository

    /// README.md, daemon/README.md and docs/*.md (not BENCHMARKS.md, the lead's figures).
    static func documents() throws -> [(name: String, text: String)] {
        let docs = try FileManager.default.contentsOfDirectory(atPath: repository + "/docs")
            .filter { $0.hasSuffix(".md") && $0 != "BENCHMARKS.md" }.sorted().map { "docs/" + $0 }
        return try (["README.md", "daemon/README.md"] + docs).map {
            ($0, try String(contentsOfFile: repository + "/" + $0, encoding: .utf8))
        }
    }

    /// Every command of `ferry` with its path (`["deadletter", "replay"]`) and the long options
    /// its `--help` lists (`--help` and `--version` left out; `--x/--no-x` both).
    static func commands() -> [(path: [String], options: Set<String>)] {
        var found: [(path: [String], options: Set<String>)] = []
        func walk(_ type: any ParsableCommand.Type, _ path: [String]) {
            let help = FerryCommand.helpMessage(for: type, columns: 10_000)
            let options = Set(help.matches(of: /--[a-z][a-z0-9-]*/).map { String($0.output) }).subtracting(["--help", "--version"])
            if !path.isEmpty {
                if let index = found.firstIndex(where: { $0.path == path }) {
                    found[index].options.formUnion(options)
                } else {
                    found.append((path, options))
                }
            }
            for sub in type.configuration.subcommands {
                // A default subcommand is typed as its parent (`ferry forget --user`).
                let isDefault = type.configuration.defaultSubcommand.map { ObjectIdentifier($0) == ObjectIdentifier(sub) } ?? false
                walk(sub, isDefault ? path : path + [sub._commandName])
            }
        }
        walk(FerryCommand.self, [])
        return found
    }

    @Test("every option of every command is documented in a file that names the command")
    func optionsDocumented() throws {
        let documents = try Self.documents()
        var missing: [String] = []
        for (path, options) in Self.commands() {
            let command = "ferry " + path.joined(separator: " ")
            let files = documents.filter { $0.text.contains(command) }
            for option in options.sorted() where !files.contains(where: { $0.text.contains(option) }) {
                missing.append("\(command) \(option)")
            }
        }
        #expect(missing.isEmpty, "options in --help that no document naming the command mentions: \(missing)")
    }

    @Test("every ferry command line in the docs uses options of its command")
    func documentedOptionsExist() throws {
        let commands = Self.commands()
        var wrong: [String] = []
        for (name, text) in try Self.documents() {
            for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
                for match in line.matches(of: /(?:^|[^-\w\/.])ferry((?: [a-z][a-z-]*)+)([^`|;#)\n]*)/) {
                    let words = match.output.1.split(separator: " ").map(String.init)
                    // The longest command path the words start with.
                    guard let command = commands.filter({ words.starts(with: $0.path) }).max(by: { $0.path.count < $1.path.count }) else {
                        continue
                    }
                    let rest = String(match.output.1) + String(match.output.2)
                    for option in rest.matches(of: /(?:^|[^\w-])(--[a-z][a-z0-9-]*)/).map({ String($0.output.1) })
                    where !command.options.contains(option) && !["--help", "--version"].contains(option) {
                        wrong.append("\(name): `ferry \(command.path.joined(separator: " "))` has no \(option): \(line)")
                    }
                }
            }
        }
        #expect(wrong.isEmpty, "\(wrong.joined(separator: "\n"))")
    }

    @Test("the options the issue found undocumented are documented")
    func issueOptions() throws {
        let all = try Self.documents().map(\.text).joined(separator: "\n")
        for option in ["--uid", "--unit", "--count", "--idle-timeout", "--allow-unplanned"] {
            #expect(all.contains(option), "\(option)")
        }
        let metrics = try String(contentsOfFile: Self.repository + "/docs/METRICS.md", encoding: .utf8)
        #expect(metrics.contains("ferry health --timeout"))
    }

    @Test("one version: ferry, the .deb's source, the Python package")
    func oneVersion() throws {
        #expect(FerryCommand.configuration.version == FerryVersion.current)
        // scripts/package-deb reads this line of FerryVersion.swift.
        let source = try String(contentsOfFile: Self.repository + "/Sources/FerryProtocol/FerryVersion.swift", encoding: .utf8)
        #expect(source.firstMatch(of: /static let current = "(.*)"/)?.output.1 == Substring(FerryVersion.current))
        let pyproject = try String(contentsOfFile: Self.repository + "/client/python/pyproject.toml", encoding: .utf8)
        #expect(pyproject.firstMatch(of: /\nversion = "(.*)"/)?.output.1 == Substring(FerryVersion.current))
        let package = try String(contentsOfFile: Self.repository + "/client/python/ferry/__init__.py", encoding: .utf8)
        #expect(package.firstMatch(of: /__version__ = "(.*)"/)?.output.1 == Substring(FerryVersion.current))
    }
}

/// Usage and messages the issue found wrong.
@Suite("CLI usage")
struct UsageTests {
    @Test("a usage error of `ferry forget --user` shows the form the docs use")
    func forgetUsage() {
        do {
            _ = try FerryCommand.parseAsRoot(["forget", "--user"])
            Issue.record("parsed")
        } catch {
            let message = FerryCommand.fullMessage(for: error)
            #expect(message.contains("Usage: ferry forget --user <user>"), "\(message)")
            #expect(!message.contains("Usage: ferry forget user"), "\(message)")
        }
    }

    @Test("`ferry tail --topic` must name a topic (or a prefix of one)")
    func tailTopics() throws {
        #expect(throws: ValidationError.self) { try BusTopics.check(["nosuch"]) }
        try BusTopics.check(["accepted", "circ", ""])
        #expect(throws: (any Error).self) { _ = try FerryCommand.parseAsRoot(["tail", "--topic", "nosuch"]) }
    }

    @Test("tail knows every topic of the bus")
    func topicsAreTheBus() {
        #expect(BusTopics.names.sorted() == BusTopic.allCases.map(\.rawValue).sorted())
    }

    @Test("the reload reply in text: what changed, or each problem with its key")
    func reloadText() {
        #expect(ReloadReply.applied(changed: ["logLevel", "sinks[0].retry"]).text == "reloaded: changed logLevel, sinks[0].retry\n")
        #expect(ReloadReply.applied(changed: []).text == "reloaded: nothing changed (plan and key files read again)\n")
        #expect(ReloadReply.refused(["f.json: quality.plan: cannot read /x"]).text
            == "reload refused; the running configuration is kept:\n  f.json: quality.plan: cannot read /x\n")
    }
}
