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
            Without --wait, ferry emit still waits (up to --timeout) until the agent has the events \
            durably, but prints nothing. With --wait it prints `accepted=N duplicate=N rejected=N` and \
            exits non-zero if anything was rejected or the timeout passed. Events the consent state             blocks or that are local-only are counted as `blocked=N` and `suppressed=N` (printed when             non-zero); they are not errors.

            --stdin reads objects such as {"name":"Signed Up","type":"track","properties":{"plan":"pro"},"userId":"u1"},             with optional "onceKey", "category" (a name or code) and "localOnly" (true/false).
            """
    )

    @Argument(help: "Event name (omit with --stdin).")
    var name: String?

    @Option(name: .long, help: "Event type: \(EventType.allCases.map(\.description).joined(separator: ", ")).")
    var type: String = "track"

    @Option(name: .customLong("prop"), help: "A property KEY=VALUE; VALUE is JSON if it parses (42, true, \"x\"), else a string. Repeatable.")
    var props: [String] = []

    @Option(name: .long, help: "The user id the event is about.")
    var user: String?

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

    @Flag(name: .long, help: "Wait for the durable acks and print accepted/duplicate/rejected counts.")
    var wait = false

    @Option(name: .long, help: "Seconds to wait for the acks.")
    var timeout: Double = 30

    @OptionGroup var agent: AgentOptions

    func validate() throws {
        if stdin && name != nil { throw ValidationError("give an event NAME or --stdin, not both") }
        if !stdin && name == nil { throw ValidationError("missing event NAME (or use --stdin)") }
        if EventType(name: type) == nil {
            throw ValidationError("unknown --type '\(type)'; valid: \(EventType.allCases.map(\.description).joined(separator: ", "))")
        }
        if timeout <= 0 { throw ValidationError("--timeout must be positive") }
        if let category { _ = try Self.categoryCode(category) }
    }

    /// A category name or code as the wire's category byte.
    static func categoryCode(_ text: String) throws -> UInt8 {
        if let code = ConsentCategories.code(of: text) { return code }
        if let code = UInt8(text), (1...254).contains(code) { return code }
        throw ValidationError("unknown category '\(text)'; valid: \(ConsentCategories.builtIn.map(\.name).joined(separator: ", ")), or a code 1-254")
    }

    func run() async throws {
        let runtime = agent.runtimeDir ?? FerryPaths.agentRuntimeDirectory()
        var logger = Logger(label: "ferry")
        logger.logLevel = .warning
        let client = try FerryClient(configuration: .init(source: source, runtimeDirectory: runtime), logger: logger)
        var count = 0
        do {
            if stdin {
                var lineNumber = 0
                while let line = readLine(strippingNewline: true) {
                    lineNumber += 1
                    if line.allSatisfy(\.isWhitespace) { continue }
                    // Back-pressure instead of overflow: a script's events are never dropped by
                    // the outbox; reading stdin pauses while the agent is slow or away.
                    while client.statistics.pending >= client.configuration.outboxCapacity {
                        try await Task.sleep(for: .milliseconds(5))
                    }
                    client.enqueue(try Self.event(fromJSONLine: line, lineNumber: lineNumber, defaultType: type))
                    count += 1
                }
            } else {
                var properties: [String: FerryValue] = [:]
                for prop in props {
                    guard let equals = prop.firstIndex(of: "="), equals != prop.startIndex else {
                        throw ValidationError("--prop expects KEY=VALUE, got '\(prop)'")
                    }
                    properties[String(prop[..<equals])] = Self.value(String(prop[prop.index(after: equals)...]))
                }
                client.enqueue(Event(type: EventType(name: type)!, name: name!, properties: properties, userID: user ?? "",
                                     onceKey: onceKey ?? "", category: try category.map(Self.categoryCode) ?? 0,
                                     localOnly: localOnly))
                count = 1
            }
        } catch {
            await client.shutdown()
            throw error
        }

        var timedOut = false
        do {
            try await client.flush(timeout: .milliseconds(Int(timeout * 1000)))
        } catch {
            timedOut = true
        }
        let stats = client.statistics
        await client.shutdown()
        if wait || timedOut {
            var line = "accepted=\(stats.accepted) duplicate=\(stats.duplicate) rejected=\(stats.rejected - stats.blocked + stats.droppedFromOutbox)"
            if stats.blocked > 0 { line += " blocked=\(stats.blocked)" }
            if stats.suppressed > 0 { line += " suppressed=\(stats.suppressed)" }
            print(line)
        }
        if timedOut {
            let reason = Control.isRunning(runtimeDirectory: runtime)
                ? "the agent did not acknowledge them"
                : CLIError.notRunning(runtime).description
            FileHandle.standardError.write(Data("ferry emit: timed out after \(timeout)s with \(stats.pending) of \(count) events unacknowledged: \(reason)\n".utf8))
            throw ExitCode(2)
        }
        if stats.rejected - stats.blocked + stats.droppedFromOutbox > 0 { throw ExitCode(1) }
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

    /// One `--stdin` line: `{"name":…, "type":…, "properties":{…}, "userId":…, "onceKey":…}`.
    static func event(fromJSONLine line: String, lineNumber: Int, defaultType: String) throws -> Event {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
            throw ValidationError("stdin line \(lineNumber): not a JSON object")
        }
        guard let name = object["name"] as? String else {
            throw ValidationError("stdin line \(lineNumber): missing string field \"name\"")
        }
        let typeName = object["type"] as? String ?? defaultType
        guard let type = EventType(name: typeName) else {
            throw ValidationError("stdin line \(lineNumber): unknown type '\(typeName)'; valid: \(EventType.allCases.map(\.description).joined(separator: ", "))")
        }
        var properties: [UInt8] = []
        if let props = object["properties"] {
            guard props is [String: Any] else { throw ValidationError("stdin line \(lineNumber): \"properties\" must be an object") }
            properties = Array(try JSONSerialization.data(withJSONObject: props, options: [.sortedKeys]))
        }
        var category: UInt8 = 0
        if let raw = object["category"] {
            if let text = raw as? String {
                category = try categoryCode(text)
            } else if let number = raw as? Int, (1...254).contains(number) {
                category = UInt8(number)
            } else {
                throw ValidationError("stdin line \(lineNumber): \"category\" must be a category name or a code 1-254")
            }
        }
        return Event(type: type, name: name, propertiesJSON: properties,
                     userID: object["userId"] as? String ?? "", onceKey: object["onceKey"] as? String ?? "",
                     category: category, localOnly: object["localOnly"] as? Bool ?? false)
    }
}
