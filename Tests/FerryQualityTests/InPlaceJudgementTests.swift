import FerryProtocol
import Testing
@testable import FerryQuality

/// The gate's one engine, entered from an event's frame as the ingest path does
/// (``QualityGate/passesUntouched(frame:header:)``: the fields read in place, the redactor's walk
/// and the plan's validator deciding without writing anything) and from a decoded event
/// (``QualityGate/judge(_:)``): the frame passes exactly when the judgement redacts nothing and
/// finds no violation — for every schema keyword, the detectors, the identifiers, what is not
/// JSON, and thousands of generated events.
@Suite struct InPlaceJudgementTests {
    /// Whether the gate passes `event` from its frame; checks that the judgement says the same.
    static func passes(_ gate: QualityGate, _ event: WireEvent, sourceLocation: SourceLocation = #_sourceLocation) throws -> Bool {
        let frame = event.encoded()
        let inPlace = gate.passesUntouched(frame: frame, header: try EventHeader(frame))
        let judgement = gate.judge(event)
        #expect(inPlace == (!judgement.redacted && judgement.violations.isEmpty),
                "in place \(inPlace), judged \(judgement.violations.map(\.json)) redacted \(judgement.redacted): \(String(decoding: event.properties, as: UTF8.self))",
                sourceLocation: sourceLocation)
        return inPlace
    }

    /// Whether `properties` pass a one-event plan whose properties have `schema`.
    static func passes(schema: String, properties: String, redactor: Redactor? = nil,
                       sourceLocation: SourceLocation = #_sourceLocation) throws -> Bool {
        let plan = try TrackingPlan(json: Array(#"{"events": [{"type": "track", "name": "Order Completed", "properties": "#.utf8)
                                        + Array(schema.utf8) + Array("}]}".utf8), source: "plan.json")
        let gate = QualityGate(plan: plan, allowUnplanned: false, redactor: redactor)
        return try passes(gate, event(properties: properties), sourceLocation: sourceLocation)
    }

    static let detectors: Redactor = try! Redactor(configuration: try! RedactionConfiguration(json: Array(QualityChecks.allDetectors.utf8)),
                                                   key: [UInt8](repeating: 7, count: 32))

    @Test(arguments: SchemaKeywordTests.cases)
    func everyKeyword(_ testCase: SchemaKeywordTests.Case) throws {
        #expect(try Self.passes(schema: testCase.schema, properties: testCase.passing))
        #expect(try !Self.passes(schema: testCase.schema, properties: testCase.failing))
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
        (String(repeating: #"{"a": "#, count: 65) + "1" + String(repeating: "}", count: 65), "nesting deeper than 64"),
    ])
    func whatIsNotJSONFails(properties: String, _: String) throws {
        #expect(try !Self.passes(schema: "{}", properties: properties))
        #expect(try !Self.passes(schema: #"{"properties": {"a": {"type": "number"}}}"#, properties: properties))
    }

    @Test func nestingOfSixtyFourLevelsIsRead() throws {
        let properties = String(repeating: #"{"a": "#, count: 64) + "1" + String(repeating: "}", count: 64)
        #expect(try Self.passes(schema: "{}", properties: properties))
    }

    @Test(arguments: [
        (#"{"to": "jane@example.com"}"#, false),
        (#"{"n": ["+14155552671"]}"#, false),                  // phone, in an array
        (#"{"at": {"ip": "198.51.100.7"}}"#, false),           // ip, nested
        (#"{"version": "198.51.100.7"}"#, true),               // a version number, not an address
        (#"{"card": "4111 1111 1111 1111"}"#, false),
        (#"{"iban": "DE89370400440532013000"}"#, false),
        (#"{"order": "A-1234", "at": "2026-11-27T10:00:00Z"}"#, true),  // digits that are nobody's
        (#"{"to": "jane\u0040example.com"}"#, false),          // an escaped candidate, read decoded
        (#"{"k\u00e9y": "x", "jane@example.com": 1}"#, true),  // names are not redacted
    ])
    func detectors(properties: String, passes: Bool) throws {
        #expect(try Self.passes(schema: "{}", properties: properties, redactor: Self.detectors) == passes)
        // The same without detectors: every string stays as it is.
        #expect(try Self.passes(schema: "{}", properties: properties))
    }

    @Test func anEscapedNameIsComparedDecoded() throws {
        let schema = #"{"properties": {"é": {"type": "number"}}}"#
        #expect(try Self.passes(schema: schema, properties: #"{"\u00e9": 1}"#))
        #expect(try Self.passes(schema: schema, properties: #"{"é": 1}"#))
        #expect(try !Self.passes(schema: schema, properties: #"{"é": "1"}"#))
        #expect(try !Self.passes(schema: schema, properties: #"{"\u00e9": "1"}"#))
    }

    /// Common rules (several schemas over one field) and a `context.traits` rule (two schemas
    /// over one value) apply on the frame as in the judgement.
    @Test func commonRulesAndContextTraits() throws {
        let common = try TrackingPlan(json: Array(#"""
            {"events": [{"type": "track", "name": "A"}, {"type": "common", "context": {"required": ["ip"]}}]}
            """#.utf8), source: "plan.json")
        let gate = QualityGate(plan: common, allowUnplanned: true, redactor: nil)
        #expect(try Self.passes(gate, event(.track, "A", properties: "{}", context: #"{"ip": "x"}"#)))
        #expect(try !Self.passes(gate, event(.track, "A", properties: "{}", context: #"{"locale": "x"}"#)))
        #expect(try !Self.passes(gate, event(.track, "Unplanned", properties: "{}", context: #"{"locale": "x"}"#)))
        let segment = try TrackingPlan(json: Array(#"""
            {"rules": [{"type": "TRACK", "key": "A", "version": 1, "jsonSchema": {"properties": {
                "properties": {"required": ["total"]}, "traits": {"required": ["plan"]}}}}]}
            """#.utf8), source: "plan.json")
        let traits = QualityGate(plan: segment, allowUnplanned: true, redactor: nil)
        #expect(try Self.passes(traits, event(.track, "A", properties: #"{"total": 1}"#)))
        #expect(try Self.passes(traits, event(.track, "A", properties: #"{"total": 1}"#, context: #"{"traits": {"plan": "pro"}}"#)))
        #expect(try !Self.passes(traits, event(.track, "A", properties: #"{"total": 1}"#, context: #"{"traits": {}}"#)))
    }

    @Test(arguments: [
        (event(properties: #"{"total": 5}"#, userID: "jane@example.com"), false),
        (event(properties: #"{"total": 5}"#, anonymousID: "+14155552671"), false),
        (event(properties: #"{"total": 5}"#, groupID: "DE89370400440532013000"), false),
        (event(properties: #"{"total": 5}"#, previousID: "198.51.100.7"), false),
        (event(properties: #"{"total": 5}"#, userID: "u-42", anonymousID: "a-1"), true),
    ])
    func identifiersAreShownToTheDetectors(event: WireEvent, passes: Bool) throws {
        let gate = QualityGate(plan: Self.shapes, allowUnplanned: true, redactor: Self.detectors)
        #expect(try Self.passes(gate, event) == passes)
    }

    @Test func aRequiredContextMustBeThere() throws {
        let plan = try TrackingPlan(json: Array(#"""
            {"rules": [{"type": "TRACK", "key": "Order Completed", "version": 1, "jsonSchema": {"required": ["context"],
                "properties": {"properties": {"required": ["total"]}}}}]}
            """#.utf8), source: "plan.json")
        let gate = QualityGate(plan: plan, allowUnplanned: true, redactor: nil)
        #expect(try !Self.passes(gate, event(properties: #"{"total": 5}"#)))
        #expect(try Self.passes(gate, event(properties: #"{"total": 5}"#, context: #"{"app": {"name": "shop"}}"#)))
    }

    @Test func anEventWithoutPropertiesIsCheckedAsAnEmptyObject() throws {
        let gate = QualityGate(plan: Self.shapes, allowUnplanned: true, redactor: nil)
        #expect(try !Self.passes(gate, event(properties: "")))  // the plan requires "total"
        #expect(try Self.passes(gate, event(.identify, "", properties: "")))  // nothing required of traits
    }

    @Test func aRuleOnTraitsRedactsAnIdentifyNotATrack() throws {
        let redactor = try Redactor(configuration: try RedactionConfiguration(json: Array(#"""
            {"rules": [{"path": "traits.email", "action": "hash"}]}
            """#.utf8)), key: [UInt8](repeating: 7, count: 32))
        let gate = QualityGate(plan: Self.shapes, allowUnplanned: true, redactor: redactor)
        #expect(try !Self.passes(gate, event(.identify, "", properties: #"{"email": "x", "plan": "pro"}"#)))
        #expect(try Self.passes(gate, event(properties: #"{"email": "x", "total": 1}"#)))
    }

    // MARK: On generated events

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
    func agreesWithTheJudgementOnGeneratedEvents(detectors: Bool) throws {
        let gate = QualityGate(plan: Self.shapes, allowUnplanned: true, redactor: detectors ? Self.detectors : nil)
        var generator = Generator(state: detectors ? 0xFE44 : 0x5EED)
        var passed = 0
        let count = 3_000
        for _ in 0..<count {
            let type: EventType = generator.below(4) == 0 ? .identify : .track
            // The agent refuses a context that is not a JSON object before the gate.
            let context = generator.below(3) == 0 ? generator.object(depth: 0) : ""
            let wire = event(type, type == .track ? "Order Completed" : "", properties: generator.document(), context: context)
            if try Self.passes(gate, wire) { passed += 1 }
        }
        // The generator reaches both answers.
        #expect(passed > count / 20)
        #expect(count - passed > count / 5)
    }
}
