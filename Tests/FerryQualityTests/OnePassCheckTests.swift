import FerryProtocol
import Testing
@testable import FerryQuality

/// The gate's one-pass check (``OnePassCheck``) decides as the two-pass check and
/// ``QualityGate/judge(_:)`` do: when it says `passes` the gate passes the event untouched, when
/// it says `judge` the gate redacts or refuses it, and it is `unsure` only where it says so
/// (`const`, a non-string `enum`, `not`, escapes a rule or a detector must read decoded).
@Suite struct OnePassCheckTests {
    /// The one-pass outcome of `properties` against a one-event plan whose properties have `schema`.
    static func outcome(schema: String, properties: String, redactor: Redactor? = nil) throws -> OnePassCheck.Outcome {
        let plan = try plan(properties: schema)
        let schemas = try #require(plan.onePassSchemas(type: .track, rule: 0, hasContext: false))
        var probe: DetectionProbe?
        if case .detectors(let found) = redactor?.onePass(under: .properties) { probe = found }
        var bytes = Array(properties.utf8)
        return bytes.withUnsafeMutableBytes { OnePassCheck.check(object: UnsafeRawBufferPointer($0), schema: schemas.properties, table: schemas.table, probe: probe) }
    }

    static let detectors: Redactor = try! Redactor(configuration: try! RedactionConfiguration(json: Array(#"""
        {"detect": [{"kind": "email", "action": "hash"}, {"kind": "phone", "action": "mask"}, {"kind": "ip", "action": "mask"},
                    {"kind": "card", "action": "mask"}, {"kind": "iban", "action": "hash"}]}
        """#.utf8)), key: [UInt8](repeating: 7, count: 32))

    /// Keywords whose check needs the full schema of a value: left to the two-pass check.
    static let undecidedRules: Set<String> = ["const", "not", "enum"]  // the enum case lists a number

    @Test(arguments: SchemaKeywordTests.cases)
    func everyKeyword(_ testCase: SchemaKeywordTests.Case) throws {
        let undecided = Self.undecidedRules.contains(testCase.rule)
        // The passing maxLength value is written with escapes: counted decoded, by the two-pass check.
        let passing: OnePassCheck.Outcome = undecided || testCase.rule == "maxLength" ? .unsure : .passes
        #expect(try Self.outcome(schema: testCase.schema, properties: testCase.passing) == passing)
        #expect(try Self.outcome(schema: testCase.schema, properties: testCase.failing) == (undecided ? .unsure : .judge))
    }

    @Test(arguments: [
        (#"{"a": 1,}"#, "a trailing comma"),
        (#"{"a": "b}"#, "an unterminated string"),
        ("{\"a\": \"b\u{1}\"}", "a control character"),
        (#"{"a": "\x"}"#, "an invalid escape"),
        (#"{"a": "\ud800"}"#, "an unpaired surrogate"),
        (#"{"a": 01}"#, "a leading zero"),
        (#"{"a": 1.}"#, "a fraction without digits"),
        (#"{"a": tru}"#, "a cut literal"),
        (#"{"a": 1} x"#, "data after the value"),
        (#"[{"a": 1}]"#, "an array, not an object"),
        (String(repeating: #"{"a": "#, count: 64) + "1" + String(repeating: "}", count: 64), "nesting deeper than 64"),
    ])
    func whatIsNotJSONIsJudged(properties: String, _: String) throws {
        #expect(try Self.outcome(schema: "{}", properties: properties) == .judge)
        #expect(try Self.outcome(schema: #"{"properties": {"a": {"type": "number"}}}"#, properties: properties) == .judge)
    }

    @Test func nestingOfSixtyFourLevelsIsRead() throws {
        let properties = String(repeating: #"{"a": "#, count: 63) + "1" + String(repeating: "}", count: 63)
        #expect(try Self.outcome(schema: "{}", properties: properties) == .passes)
    }

    @Test(arguments: [
        (#"{"to": "jane@example.com"}"#, OnePassCheck.Outcome.judge),
        (#"{"n": ["+14155552671"]}"#, .judge),                  // phone, in an array
        (#"{"at": {"ip": "198.51.100.7"}}"#, .judge),           // ip, nested
        (#"{"version": "198.51.100.7"}"#, .passes),             // a version number, not an address
        (#"{"card": "4111 1111 1111 1111"}"#, .judge),
        (#"{"iban": "DE89370400440532013000"}"#, .judge),
        (#"{"order": "A-1234", "at": "2026-11-27T10:00:00Z"}"#, .passes),  // digits that are nobody's
        (#"{"to": "jane\u0040example.com"}"#, .unsure),         // an escaped candidate: read decoded
        (#"{"k\u00e9y": "x", "jane@example.com": 1}"#, .passes),  // names are not redacted
    ])
    func detectorsInOnePass(properties: String, expected: OnePassCheck.Outcome) throws {
        #expect(try Self.outcome(schema: "{}", properties: properties, redactor: Self.detectors) == expected)
        // The same without detectors: every string stays as it is.
        #expect(try Self.outcome(schema: "{}", properties: properties) == .passes)
    }

    @Test func anEscapedNameTheSchemaMightNameIsLeftToTheTwoPassCheck() throws {
        let schema = #"{"properties": {"é": {"type": "number"}}}"#
        #expect(try Self.outcome(schema: schema, properties: #"{"\u00e9": 1}"#) == .unsure)
        #expect(try Self.outcome(schema: schema, properties: #"{"é": 1}"#) == .passes)
        #expect(try Self.outcome(schema: schema, properties: #"{"é": "1"}"#) == .judge)
    }

    /// The plan's rule for the event decides what is checked: common rules (several schemas over
    /// one field) and a `context.traits` rule on an event with a context (two schemas over one
    /// value) are left to the two-pass check.
    @Test func whatThePlanLeavesToTheTwoPassCheck() throws {
        let common = try TrackingPlan(json: Array(#"""
            {"events": [{"type": "track", "name": "A"}, {"type": "common", "context": {"required": ["ip"]}}]}
            """#.utf8), source: "plan.json")
        #expect(common.onePassSchemas(type: .track, rule: 0, hasContext: false) == nil)
        let segment = try TrackingPlan(json: Array(#"""
            {"rules": [{"type": "TRACK", "key": "A", "version": 1, "jsonSchema": {"properties": {
                "properties": {"required": ["total"]}, "traits": {"required": ["plan"]}}}}]}
            """#.utf8), source: "plan.json")
        let rule = segment.rule(type: .track, name: "A")
        #expect(segment.rules[rule].contextTraits != nil)
        #expect(segment.onePassSchemas(type: .track, rule: rule, hasContext: true) == nil)
        let schemas = try #require(segment.onePassSchemas(type: .track, rule: rule, hasContext: false))
        #expect(schemas.properties >= 0 && schemas.context < 0)
    }

    // MARK: The gate's set-up of the one-pass check (QualityGate.onePass)

    /// The one-pass outcome of `event` under `gate`, read from its frame as the ingest path does.
    static func onePass(_ gate: QualityGate, _ event: WireEvent) throws -> OnePassCheck.Outcome {
        let frame = event.encoded()
        let header = try EventHeader(frame)
        return frame.withUnsafeBytes { gate.onePass(FrameFields($0, header), event.type) }
    }

    /// The gate's answer for `event`: untouched or not.
    static func untouched(_ gate: QualityGate, _ event: WireEvent) -> Bool {
        let judgement = gate.judge(event)
        return !judgement.redacted && judgement.violations.isEmpty
    }

    @Test(arguments: [
        (event(properties: #"{"total": 5}"#, userID: "jane@example.com"), OnePassCheck.Outcome.judge),
        (event(properties: #"{"total": 5}"#, anonymousID: "+14155552671"), .judge),
        (event(properties: #"{"total": 5}"#, groupID: "DE89370400440532013000"), .judge),
        (event(properties: #"{"total": 5}"#, previousID: "198.51.100.7"), .judge),
        (event(properties: #"{"total": 5}"#, userID: "u-42", anonymousID: "a-1"), .passes),
    ])
    func identifiersAreShownToTheDetectors(event: WireEvent, expected: OnePassCheck.Outcome) throws {
        // No rule on any root: the fields are read in one pass, so the identifiers decide.
        let gate = QualityGate(plan: Self.shapes, allowUnplanned: true, redactor: Self.detectors)
        #expect(try Self.onePass(gate, event) == expected)
        #expect(Self.untouched(gate, event) == (expected == .passes))
    }

    @Test func aRequiredContextMustBeThere() throws {
        let plan = try TrackingPlan(json: Array(#"""
            {"rules": [{"type": "TRACK", "key": "Order Completed", "version": 1, "jsonSchema": {"required": ["context"],
                "properties": {"properties": {"required": ["total"]}}}}]}
            """#.utf8), source: "plan.json")
        let gate = QualityGate(plan: plan, allowUnplanned: true, redactor: nil)
        let without = event(properties: #"{"total": 5}"#)
        let with = event(properties: #"{"total": 5}"#, context: #"{"app": {"name": "shop"}}"#)
        #expect(try Self.onePass(gate, without) == .judge)
        #expect(!Self.untouched(gate, without))
        #expect(try Self.onePass(gate, with) == .passes)
        #expect(Self.untouched(gate, with))
    }

    @Test func anEventWithoutPropertiesIsCheckedAsAnEmptyObject() throws {
        let gate = QualityGate(plan: Self.shapes, allowUnplanned: true, redactor: nil)
        let track = event(properties: "")  // the plan requires "total"
        #expect(try Self.onePass(gate, track) == .judge)
        #expect(!Self.untouched(gate, track))
        let identify = event(.identify, "", properties: "")  // nothing required of traits
        #expect(try Self.onePass(gate, identify) == .passes)
        #expect(Self.untouched(gate, identify))
    }

    @Test func aRuleOnTraitsLeavesAnIdentifyToTheTwoPassCheck() throws {
        let redactor = try Redactor(configuration: try RedactionConfiguration(json: Array(#"""
            {"rules": [{"path": "traits.email", "action": "hash"}]}
            """#.utf8)), key: [UInt8](repeating: 7, count: 32))
        let gate = QualityGate(plan: Self.shapes, allowUnplanned: true, redactor: redactor)
        let identify = event(.identify, "", properties: #"{"email": "x", "plan": "pro"}"#)
        #expect(try Self.onePass(gate, identify) == .unsure)
        #expect(!Self.untouched(gate, identify))
        let frame = identify.encoded()
        #expect(!gate.passesUntouched(frame: frame, header: try EventHeader(frame)))
        // The rule names traits, not properties: a track's properties are read in one pass.
        let track = event(properties: #"{"email": "x", "total": 1}"#)
        #expect(try Self.onePass(gate, track) == .passes)
        #expect(Self.untouched(gate, track))
    }

    // MARK: The one-pass check against the gate, on generated events

    /// The fuzzers' plan of the usual shapes (QualityChecks).
    static let shapes = try! TrackingPlan(json: Array(QualityChecks.shapesPlan.utf8), source: "plan.json")

    /// Deterministic values (SplitMix64): the same events on every run.
    struct Generator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
        mutating func pick<T>(_ items: [T]) -> T { items[below(items.count)] }

        static let keys = ["total", "n", "sku", "currency", "note", "tag", "flag", "at", "mail", "items", "meta", "k", "plan", "age",
                           "app", "name", "version", "ip", "extra", #"k\u00e9y"#, #"tot\u0061l"#]
        static let strings = [#""EUR""#, #""GBP""#, #""AB-123""#, #""ab-12""#, #""short""#, #""a note that is long""#, #""été""#,
                              #""\u00e9t\u00e9""#, #""jane@example.com""#, #""jane\u0040example.com""#, #""198.51.100.7""#, #""1.2.3""#,
                              #""+14155552671""#, #""4111 1111 1111 1111""#, #""DE89370400440532013000""#, #""2026-11-27T10:00:00Z""#,
                              #""2026-02-30T10:00:00Z""#, #""pro""#, #""free""#, #""x""#, #""order 12""#, #""a\"b""#, #""""#, #""Zürich""#]
        static let numbers = ["0", "1", "-1", "7", "11", "3.0", "3.5", "1e1", "-0.0", "12345678901234567890", "0.5e-3"]

        mutating func value(depth: Int) -> String {
            switch below(depth > 2 ? 5 : 7) {
            case 0, 1: return pick(Self.strings)
            case 2: return pick(Self.numbers)
            case 3: return pick(["true", "false", "null"])
            case 4: return pick(Self.strings)
            case 5: return object(depth: depth + 1)
            default:
                return "[" + (0..<below(3)).map { _ in value(depth: depth + 1) }.joined(separator: ", ") + "]"
            }
        }

        mutating func object(depth: Int) -> String {
            "{" + (0..<below(5)).map { _ in "\"\(pick(Self.keys))\": \(value(depth: depth))" }.joined(separator: ", ") + "}"
        }

        /// An object, now and then broken (a byte cut, or one too many).
        mutating func document() -> String {
            var text = object(depth: 0)
            switch below(12) {
            case 0: text.removeLast()
            case 1: text += ","
            case 2: if let colon = text.firstIndex(of: ":") { text.insert("[", at: text.index(after: colon)) }
            default: break
            }
            return text
        }
    }

    @Test(arguments: [false, true])
    func agreesWithTheGateOnGeneratedEvents(detectors: Bool) throws {
        let gate = QualityGate(plan: Self.shapes, allowUnplanned: true, redactor: detectors ? Self.detectors : nil)
        var generator = Generator(state: detectors ? 0xFE44 : 0x5EED)
        var decided = 0, passed = 0, unsure = 0
        let count = 3_000
        for _ in 0..<count {
            let type: EventType = generator.below(4) == 0 ? .identify : .track
            // The agent refuses a context that is not a JSON object before the gate.
            let context = generator.below(3) == 0 ? generator.object(depth: 0) : ""
            let wire = event(type, type == .track ? "Order Completed" : "", properties: generator.document(), context: context)
            let judgement = gate.judge(wire)
            let untouched = !judgement.redacted && judgement.violations.isEmpty
            let frame = wire.encoded()
            let header = try EventHeader(frame)
            let outcome = frame.withUnsafeBytes { gate.onePass(FrameFields($0, header), type) }
            switch outcome {
            case .passes:
                #expect(untouched, "one pass passed what the gate changes or refuses: \(String(decoding: wire.properties, as: UTF8.self)) \(String(decoding: wire.context, as: UTF8.self))")
                decided += 1
                passed += 1
            case .judge:
                #expect(!untouched, "one pass sent to the gate what it passes untouched: \(String(decoding: wire.properties, as: UTF8.self)) \(String(decoding: wire.context, as: UTF8.self))")
                decided += 1
            case .unsure:
                unsure += 1
            }
            #expect(gate.passesUntouched(frame: frame, header: header) == untouched)
        }
        // The generator reaches both answers, and the one-pass check decides most events.
        #expect(passed > count / 20)
        #expect(decided - passed > count / 5)
        #expect(unsure < count / 4)
    }
}
