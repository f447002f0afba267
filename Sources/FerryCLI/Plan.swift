#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ArgumentParser
import Ferry
import FerryProtocol
import FerryQuality

/// `ferry plan`: tracking plans, offline.
struct PlanCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "plan",
        abstract: "Check events against a tracking plan, offline (docs/QUALITY.md).",
        subcommands: [PlanCheck.self]
    )
}

/// `ferry plan check PLAN [FILE|-] [--redact CONFIG]`.
struct PlanCheck: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Check JSON Lines events against a tracking plan, as ferryd would.",
        discussion: """
            Reads one event per line in the shape `ferry emit --stdin` reads \
            ({"name":"Order Completed","type":"track","properties":{…},"context":{…},"userId":"u1"}) \
            from FILE, or standard input when FILE is - or left out, and judges each against PLAN \
            (a native plan or a Segment Protocols plan). Needs no agent.

            Each violation is printed on its own line: \
            `line 3: track:Order Completed properties.total: type: must be number, not a string`. \
            With --redact, redaction runs first, as in ferryd, and each event is printed as \
            redaction leaves it (`line 3: redacted {…}`). The last line counts the events.

            Exit status: 0 every event passes; 1 some event breaks the plan or some line is not an \
            event; 65 the plan or the redact table is wrong (the error names the file and the JSON \
            path); 74 the input could not be read.
            """
    )

    @Argument(help: "The tracking plan (JSON).", completion: .file(extensions: ["json"]))
    var plan: String

    @Argument(help: "JSON Lines events; - or nothing: standard input.", completion: .file())
    var file: String?

    @Option(name: .long, help: "A ferryd configuration file with a \"redact\" table, or a bare redact table: show what redaction does to each event.",
            completion: .file(extensions: ["json"]))
    var redact: String?

    @Flag(inversion: .prefixedNo, help: "Whether an event the plan does not name passes (quality.allowUnplanned).")
    var allowUnplanned = true

    @Option(name: .long, help: "The type of a line without \"type\".", completion: .list(EventType.allCases.map(\.description)))
    var type: String = "track"

    func run() async throws {
        let gate: QualityGate
        switch makeGate() {
        case .success(let made): gate = made
        case .failure(let error):
            printError("ferry plan check: \(error)")
            throw ExitCode(ExitStatus.invalidInput.rawValue)
        }
        var descriptor = STDIN_FILENO
        if let file, file != "-" {
            descriptor = open(file, O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0 else {
                printError("ferry plan check: cannot open \(file): \(String(cString: strerror(errno)))")
                throw ExitCode(ExitStatus.unreadableInput.rawValue)
            }
        }
        defer { if descriptor != STDIN_FILENO { close(descriptor) } }
        let reader = LineReader(descriptor: descriptor)
        var number = 0, checked = 0, failed = 0, invalid = 0
        do {
            while let lines = try await reader.next() {
                for line in lines {
                    number += 1
                    guard line.contains(where: { $0 != 0x20 && $0 != 0x09 }) else { continue }
                    switch EmitLine.event(line, defaultType: type) {
                    case .failure(let error):
                        invalid += 1
                        print("line \(number): not an event: \(error)")
                    case .success(let event):
                        checked += 1
                        let judgement = gate.judge(Self.wireEvent(event, sequence: UInt64(number)))
                        // What redaction made of it: what the agent stores when the event passes
                        // (or quarantines, or tags), never what it received.
                        if redact != nil { print("line \(number): redacted \(Self.json(judgement.event))") }
                        if !judgement.violations.isEmpty { failed += 1 }
                        for violation in judgement.violations {
                            let path = violation.path.isEmpty ? "" : " \(violation.path)"
                            print("line \(number): \(violation.event)\(path): \(violation.rule): \(violation.message)")
                        }
                    }
                }
            }
        } catch {
            printError("ferry plan check: cannot read \(file ?? "standard input"): \(error)")
            throw ExitCode(ExitStatus.unreadableInput.rawValue)
        }
        print("checked \(checked) events: \(checked - failed) passed, \(failed) broke the plan\(invalid > 0 ? ", \(invalid) line\(invalid == 1 ? " was" : "s were") not an event" : "")")
        if failed > 0 || invalid > 0 { throw ExitCode(1) }
    }

    /// The plan and the redactor, compiled.
    private func makeGate() -> Result<QualityGate, QualityError> {
        do throws(QualityError) {
            let trackingPlan = try TrackingPlan.load(path: plan)
            var redactor: Redactor?
            if let redact {
                redactor = try Redactor.load(configuration: try RedactionConfiguration(file: redact))
            }
            return .success(QualityGate(plan: trackingPlan, allowUnplanned: allowUnplanned, redactor: redactor))
        } catch {
            return .failure(error)
        }
    }

    /// The event as the agent would receive it (the fields the gate looks at).
    static func wireEvent(_ event: Event, sequence: UInt64) -> WireEvent {
        WireEvent(id: EventID.zero, timestamp: 0, sequence: sequence, pid: 0, type: event.type, category: event.category,
                  source: "ferry-plan-check", name: event.name, userID: event.userID, onceKey: event.onceKey,
                  properties: event.propertiesJSON, anonymousID: event.anonymousID, groupID: event.groupID,
                  previousID: event.previousID, context: event.contextJSON)
    }

    /// The event as a `ferry emit --stdin` line.
    static func json(_ event: WireEvent) -> String {
        var out: [UInt8] = Array(#"{"type":"#.utf8)
        JSONText.appendString(event.type.description, to: &out)
        if !event.name.isEmpty {
            out.append(contentsOf: #","name":"#.utf8)
            JSONText.appendString(event.name, to: &out)
        }
        for (key, value) in [("userId", event.userID), ("anonymousId", event.anonymousID), ("groupId", event.groupID),
                             ("previousId", event.previousID)] where !value.isEmpty {
            out.append(contentsOf: ",\"\(key)\":".utf8)
            JSONText.appendString(value, to: &out)
        }
        if !event.properties.isEmpty {
            out.append(contentsOf: #","properties":"#.utf8)
            out.append(contentsOf: event.properties)
        }
        if !event.context.isEmpty {
            out.append(contentsOf: #","context":"#.utf8)
            out.append(contentsOf: event.context)
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }

    private func printError(_ message: String) {
        var line = message + "\n"
        line.withUTF8 { _ = write(STDERR_FILENO, $0.baseAddress, $0.count) }
    }
}
