// Shared by the corpus replay test (QualityCorpusTests) and the libFuzzer targets (Fuzz/FuzzPlan,
// Fuzz/FuzzRedact, Fuzz/FuzzJudge, in the package in Fuzz/ that builds FerryQuality with
// -sanitize=fuzzer): their QualityChecks.swift link to this file.
import FerryProtocol
import FerryQuality

/// The tracking plan parser and the redact table parser, and the properties they must keep on
/// any input: compile, or throw a ``QualityError`` naming the file (table); never crash; compile
/// the same way twice; and what compiles judges and redacts any event without crashing, leaving
/// JSON objects JSON objects.
enum QualityChecks {
    /// What happened to one input.
    enum Outcome: Equatable {
        /// It compiled.
        case compiled
        /// The parser refused it.
        case refused
    }

    /// The name the plan parser puts in its messages.
    static let source = "/etc/ferry/fuzz-plan.json"

    /// Events every compiled plan judges and every redactor redacts: PII in every field, escapes,
    /// nesting, a non-object, and the input itself as properties and context.
    static func events(_ input: [UInt8]) -> [WireEvent] {
        func event(_ type: EventType, _ name: String, _ properties: String, _ context: String = "", user: String = "",
                   identifiers: Bool = true) -> WireEvent {
            WireEvent(id: EventID.zero, timestamp: 0, sequence: 1, pid: 1, type: type, source: "fuzz", name: name, userID: user,
                      properties: Array(properties.utf8), anonymousID: identifiers ? "+14155552671" : "",
                      groupID: identifiers ? "198.51.100.7" : "", previousID: identifiers ? "4111 1111 1111 1111" : "",
                      context: Array(context.utf8))
        }
        var events = [
            event(.track, "Order Completed", #"{"total": 5, "email": "jane@example.com", "items": [{"sku": "A-1", "n": 1.5e3}], "s": "\u00e9\ud83d\ude00"}"#,
                  #"{"ip": "2001:db8::1", "traits": {"iban": "DE89370400440532013000"}}"#, user: "jane@example.com"),
            event(.identify, "", #"{"plan": "pro", "phone": "(415) 555-2671"}"#),
            event(.page, "Home", "", #"{"a": [null, true, false, -0.0, "x"]}"#),
            event(.group, "", "[1, 2]"),
            // Personal values inside text (docs/QUALITY.md, "Inside text").
            event(.track, "Viewed", #"{"memo": "paid with 4111 1111 1111 1111", "error": "from 203.0.113.42:80 (v1.2.3.4)"}"#,
                  #"{"page": {"url": "https://x.example/r?email=jane%40example.com&p=%2B14155552671#a=b"}}"#, user: "auth0:jane@example.com"),
        ]
        if let text = String(validating: input, as: UTF8.self), !text.isEmpty {
            let name = String(text.prefix(64))
            events.append(event(.track, name, text, text))
            events.append(event(.screen, name, text))
            // Without personal identifiers, so the in-place judgement reads the fields.
            events.append(event(.track, "Order Completed", text, text, identifiers: false))
        }
        return events
    }

    /// Parses `input` as a tracking plan. Returns the outcome, or a description of a broken
    /// property (a bug: the fuzzer stops on it, the test fails).
    static func plan(_ input: [UInt8]) -> Result<Outcome, Violation> {
        let plan: TrackingPlan
        do {
            plan = try TrackingPlan(json: input, source: source)
        } catch {
            guard error.description.hasPrefix(source + ":") else { return .failure(Violation("the message does not name the file: \(error)", input)) }
            return .success(.refused)
        }
        guard let again = try? TrackingPlan(json: input, source: source), again.summary == plan.summary else {
            return .failure(Violation("compiling the same plan twice gives different plans", input))
        }
        for allowUnplanned in [true, false] {
            let gate = QualityGate(plan: plan, allowUnplanned: allowUnplanned, redactor: nil)
            for event in events(input) {
                let judgement = gate.judge(event)
                guard !judgement.redacted, judgement.event == event else {
                    return .failure(Violation("a gate without a redactor changed the event", input))
                }
                for violation in judgement.violations where violation.rule.isEmpty || violation.event.isEmpty {
                    return .failure(Violation("a violation without a rule or an event: \(violation.json)", input))
                }
                guard shortcutAgrees(gate, event, judgement) else {
                    return .failure(Violation("passesUntouched passed an event the gate changes or refuses", input))
                }
                let tagged = event.tagged(with: judgement.violations)
                guard isObject(tagged.context) else {
                    return .failure(Violation("tagging made a context that is not a JSON object", input))
                }
            }
        }
        return .success(.compiled)
    }

    /// Parses `input` as a redact table and redacts the events with it.
    static func redact(_ input: [UInt8]) -> Result<Outcome, Violation> {
        let configuration: RedactionConfiguration
        do {
            configuration = try RedactionConfiguration(json: input)
        } catch {
            guard error.description.hasPrefix("redact: ") else { return .failure(Violation("the message does not name the table: \(error)", input)) }
            return .success(.refused)
        }
        guard (try? RedactionConfiguration(json: input)) == configuration else {
            return .failure(Violation("parsing the same table twice gives different tables", input))
        }
        let redactor: Redactor
        do {
            redactor = try Redactor(configuration: configuration, key: [UInt8](repeating: 0x42, count: 32))
        } catch {
            // Only the number of rules may still be refused once the table parsed.
            guard configuration.rules.count > Redactor.maxRules else {
                return .failure(Violation("a parsed table does not compile: \(error)", input))
            }
            return .success(.refused)
        }
        let gate = QualityGate(plan: nil, allowUnplanned: true, redactor: redactor)
        for event in events(input) {
            let judgement = gate.judge(event)
            for (before, after) in [(event.properties, judgement.event.properties), (event.context, judgement.event.context)] {
                if isObject(before) && !isObject(after) {
                    return .failure(Violation("redaction turned a JSON object into \(String(decoding: after.prefix(200), as: UTF8.self))", input))
                }
                // What is not an object cannot be redacted: it must be gone, and said so.
                if !isObject(before) && (!after.isEmpty || !judgement.violations.contains { $0.rule == "redact" }) {
                    return .failure(Violation("a field that is not a JSON object was kept or not reported", input))
                }
            }
            guard judgement.redacted || judgement.event == event else {
                return .failure(Violation("the event changed but redacted is false", input))
            }
            guard shortcutAgrees(gate, event, judgement) else {
                return .failure(Violation("passesUntouched passed an event the gate redacts or refuses", input))
            }
            // The frame the agent would store still decodes.
            guard (try? WireEvent(decoding: judgement.event.encoded())) == judgement.event else {
                return .failure(Violation("the redacted event does not survive encoding", input))
            }
        }
        return .success(.compiled)
    }

    /// The ingest stage's shortcut never passes what the gate would change or refuse:
    /// ``QualityGate/passesUntouched(frame:header:)`` on the event's frame implies that `judgement`
    /// redacted nothing and found no violation (frames the agent refuses at its limits are skipped).
    static func shortcutAgrees(_ gate: QualityGate, _ event: WireEvent, _ judgement: Judgement) -> Bool {
        let frame = event.encoded()
        guard let header = try? EventHeader(frame) else { return true }
        return !gate.passesUntouched(frame: frame, header: header) || (!judgement.redacted && judgement.violations.isEmpty)
    }

    /// A plan of the usual shapes (every keyword the plan checks in place, nested objects and
    /// arrays, a context schema, an identify rule): the plan the input is judged by as an event's
    /// properties and context (``inPlaceJudgementAgrees(_:)``), and InPlaceJudgementTests'.
    static let shapesPlan = #"""
        {"events": [
          {"type": "track", "name": "Order Completed",
           "properties": {"required": ["total"], "properties": {
               "total": {"type": "number", "minimum": 0}, "n": {"type": "integer", "maximum": 10},
               "sku": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3,4}$"}, "currency": {"type": "string", "enum": ["EUR", "USD"]},
               "note": {"type": "string", "maxLength": 8}, "tag": {"minLength": 2, "maxLength": 4}, "flag": {"type": "boolean"},
               "at": {"format": "date-time"}, "mail": {"format": "email"},
               "items": {"type": "array", "items": {"type": "object", "required": ["sku"], "properties": {"sku": {"type": "string"}},
                                                     "additionalProperties": {"type": ["string", "number"]}}},
               "meta": {"type": "object", "additionalProperties": false, "properties": {"k": {"type": ["string", "null"]}}}}},
           "context": {"properties": {"app": {"type": "object", "required": ["name"]}}}},
          {"type": "identify", "traits": {"properties": {"plan": {"enum": ["free", "pro"]}, "age": {"type": "integer", "exclusiveMinimum": 0}}}}
        ]}
        """#

    /// The five detectors on.
    static let allDetectors = #"{"detect": [{"kind": "email", "action": "hash"}, {"kind": "phone", "action": "mask"}, {"kind": "ip", "action": "mask"}, {"kind": "card", "action": "mask"}, {"kind": "iban", "action": "hash"}]}"#

    /// The shapes plan with the five detectors, the plan alone, and the detectors alone. Alive
    /// until exit: LeakSanitizer cannot follow the pointers Swift keeps in an enum payload's
    /// spare bits (the plan's parsed values), so `scripts/fuzz` suppresses leak reports whose
    /// allocation stack passes through this initializer (`Fuzz/lsan-suppressions.txt`).
    static let referenceGates: [QualityGate] = {
        let plan = try! TrackingPlan(json: Array(shapesPlan.utf8), source: source)
        let redactor = try! Redactor(configuration: try! RedactionConfiguration(json: Array(allDetectors.utf8)),
                                     key: [UInt8](repeating: 0x42, count: 32))
        return [QualityGate(plan: plan, allowUnplanned: true, redactor: redactor), QualityGate(plan: plan, allowUnplanned: true, redactor: nil),
                QualityGate(plan: nil, allowUnplanned: true, redactor: redactor)]
    }()

    /// The ingest path's in-place judgement (``QualityGate/passesUntouched(frame:header:)``: the
    /// fields read into tapes on the stack, the gate's engine over them) never passes the input, as an
    /// identify's traits or a planned track's properties (and context), when the gate would
    /// change or refuse the event. Nil when it holds. The `judge` fuzzer's property.
    static func inPlaceJudgementAgrees(_ input: [UInt8]) -> Violation? {
        guard String(validating: input, as: UTF8.self) != nil else { return nil }
        for gate in referenceGates {
            for (type, name) in [(EventType.track, "Order Completed"), (.identify, "")] {
                for context in [[], input] {
                    let event = WireEvent(id: EventID.zero, timestamp: 0, sequence: 1, pid: 1, type: type, source: "fuzz", name: name,
                                          properties: input, context: context)
                    guard shortcutAgrees(gate, event, gate.judge(event)) else {
                        return Violation("passesUntouched passed, as \(type) \(context.isEmpty ? "properties" : "properties and context"), what the gate changes or refuses", input)
                    }
                }
            }
        }
        return nil
    }

    /// Whether `bytes` are one JSON object (or empty), by the agent's own check of a context
    /// (public API: the fuzz package sees no `package` symbol).
    static func isObject(_ bytes: [UInt8]) -> Bool {
        guard !bytes.isEmpty else { return true }
        let carrier = WireEvent(id: EventID.zero, timestamp: 0, sequence: 1, pid: 1, type: .track, source: "fuzz", name: "x", context: bytes)
        return (try? WireEvent(decoding: carrier.encoded())) != nil
    }

    /// A broken property, with the input that shows it.
    struct Violation: Error, CustomStringConvertible {
        var what: String
        var input: [UInt8]
        init(_ what: String, _ input: [UInt8]) {
            self.what = what
            self.input = input
        }
        var description: String {
            "\(what): input of \(input.count) bytes: \(String(decoding: input.prefix(300), as: UTF8.self))"
        }
    }
}
