import FerryProtocol
@testable import FerryQuality
import Testing

@Suite struct TrackingPlanTests {
    static let native = #"""
    {"events": [
      {"type": "track", "name": "Order Completed", "properties": {"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}}},
       "context": {"properties": {"locale": {"type": "string"}}}},
      {"type": "page", "name": "Home", "properties": {"required": ["path"]}},
      {"type": "page", "properties": {"required": ["url"]}},
      {"type": "identify", "traits": {"required": ["plan"]}},
      {"type": "group", "traits": {}},
      {"type": "alias"},
      {"type": "common", "context": {"properties": {"ip": {"const": "0.0.0.0"}}}}
    ]}
    """#

    static func judge(_ plan: String, allowUnplanned: Bool = true, _ event: WireEvent) throws -> [Violation] {
        QualityGate(plan: try TrackingPlan(json: Array(plan.utf8), source: "plan.json"), allowUnplanned: allowUnplanned, redactor: nil)
            .judge(event).violations
    }

    @Test(arguments: [
        (event(properties: #"{"total": 5}"#, context: #"{"locale": "en"}"#), [String]()),
        (event(properties: #"{}"#), ["track:Order Completed required properties.total"]),
        (event(properties: ""), ["track:Order Completed required properties.total"]),
        (event(properties: #"{"total": 5}"#, context: #"{"locale": 5}"#), ["track:Order Completed type context.locale"]),
        (event(.page, "Home", properties: #"{"path": "/"}"#), []),
        (event(.page, "Home", properties: #"{"url": "/"}"#), ["page:Home required properties.path"]),
        (event(.page, "Pricing", properties: #"{"path": "/"}"#), ["page required properties.url"]),
        (event(.identify, "ignored", properties: #"{"plan": "pro"}"#), []),
        (event(.identify, "", properties: #"{}"#), ["identify required traits.plan"]),
        (event(.group, "", properties: #"{"any": 1}"#), []),
        (event(.alias, ""), []),
        (event(.track, "Signed Up"), []),
        (event(properties: #"{"total": 5}"#, context: #"{"ip": "1.2.3.4"}"#), ["track:Order Completed const context.ip"]),
        (event(.track, "Signed Up", context: #"{"ip": "1.2.3.4"}"#), ["track:Signed Up const context.ip"]),
    ])
    func nativePlan(event: WireEvent, expected: [String]) throws {
        let found = try Self.judge(Self.native, event)
        #expect(found.map { "\($0.event) \($0.rule) \($0.path)" } == expected)
    }

    @Test func unplannedEvents() throws {
        #expect(try Self.judge(Self.native, allowUnplanned: false, event(.track, "Signed Up")).map(\.rule) == ["unplanned"])
        #expect(try Self.judge(Self.native, allowUnplanned: false, event(.screen, "Home")).first?.event == "screen:Home")
        #expect(try Self.judge(Self.native, allowUnplanned: false, event(.alias, "")) == [])
        let violation = try Self.judge(Self.native, allowUnplanned: false, event(.track, "Signed Up")).first!
        #expect(violation.json == #"{"event":"track:Signed Up","rule":"unplanned","path":"","message":"the plan does not name this event"}"#)
    }

    @Test func summary() throws {
        let plan = try TrackingPlan(json: Array(Self.native.utf8), source: "plan.json")
        #expect(plan.summary == [
            "track Order Completed (properties: 3 rules, context: 1 rule)", "page Home (properties: 1 rule)", "page (properties: 1 rule)",
            "identify (traits: 1 rule)", "group (any properties)", "alias (any properties)", "common (context: 1 rule)",
        ])
        let lines = QualityReport.lines(quality: (QualityConfiguration(planPath: "plan.json", onViolation: .tag), plan), redaction: nil)
        #expect(lines.first == "quality: plan plan.json: 7 events, onViolation tag, allowUnplanned true")
        #expect(lines.count == 8)
    }

    @Test(arguments: [
        (#"[]"#, "must be a JSON object"),
        (#"{"events": {}}"#, "must be an array"),
        (#"{"events": [{"type": "track"}]}"#, "$.events[0].name: is required"),
        (#"{"events": [{"type": "identify", "name": "x"}]}"#, "by type alone"),
        (#"{"events": [{"type": "identify", "properties": {}}]}"#, "carry traits"),
        (#"{"events": [{"type": "track", "name": "A", "traits": {}}]}"#, "carry properties"),
        (#"{"events": [{"type": "click", "name": "A"}]}"#, "\"click\" is not"),
        (#"{"events": [{"type": "track", "name": "A", "schema": {}}]}"#, "$.events[0].schema: unknown key"),
        (#"{"events": [{"type": "track", "name": "A"}, {"type": "track", "name": "A"}]}"#, "planned twice"),
        (#"{"events": [], "extra": 1}"#, "$.extra: unknown key"),
        (#"{"eventz": []}"#, "neither a plan"),
        (#"{"events": [{"type": "track", "name": "A", "properties": {"properties": {"a": {"type": "string", "minLenght": 2}}}}]}"#, "\"minLenght\""),
        (#"{"events": [{"type": "track", "name": "A", "name": "B"}]}"#, "appears twice"),
        (#"{"events": [{"type": "track", "name": "A",}]}"#, "not valid JSON at byte"),
    ])
    func refusesABadPlan(json: String, message: String) {
        #expect {
            _ = try TrackingPlan(json: Array(json.utf8), source: "plan.json")
        } throws: { error in
            let text = (error as? QualityError)?.description ?? ""
            return text.hasPrefix("plan.json") && text.contains(message)
        }
    }

    @Test func loadNamesTheFile() {
        #expect {
            _ = try TrackingPlan.load(path: "/nonexistent/plan.json")
        } throws: { error in
            (error as? QualityError)?.description.hasPrefix("/nonexistent/plan.json: cannot read") == true
        }
    }

    @Test func taggingSetsContextFerryViolations() throws {
        let violation = Violation(event: "track:A", rule: "type", path: "properties.a", message: "must be a number")
        let expectedList = "[\(violation.json)]"
        for (context, expected) in [
            ("", #"{"ferry":{"violations":\#(expectedList)}}"#),
            (#"{"app": {"v": 1}}"#, #"{"app":{"v": 1},"ferry":{"violations":\#(expectedList)}}"#),
            (#"{"ferry": {"host": "h", "violations": []}}"#, #"{"ferry":{"host":"h","violations":\#(expectedList)}}"#),
            (#"{"ferry": 3}"#, #"{"ferry":{"violations":\#(expectedList)}}"#),
        ] {
            let tagged = event(context: context).tagged(with: [violation])
            #expect(String(decoding: tagged.context, as: UTF8.self) == expected)
        }
    }
}

/// Segment Protocols plans, in the shapes the Public API returns them.
@Suite struct SegmentPlanTests {
    static let rules = #"""
    [
      {"type": "TRACK", "key": "Order Completed", "version": 1, "jsonSchema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "labels": {},
        "properties": {"context": {}, "traits": {}, "properties": {"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}}}}}},
      {"type": "TRACK", "key": "Order Completed", "version": 2, "jsonSchema": {"type": "object",
        "properties": {"properties": {"type": "object", "required": ["total", "currency"], "properties": {"total": {"type": "number"}, "currency": {"enum": ["EUR"]}}}}}},
      {"type": "IDENTIFY", "key": null, "version": 1, "jsonSchema": {"properties": {"traits": {"required": ["email"]}}}},
      {"type": "GROUP", "key": null, "version": 1, "jsonSchema": {"properties": {"traits": {"properties": {"size": {"type": "integer"}}}}}},
      {"type": "PAGE", "key": "Pricing", "version": 1, "jsonSchema": {"properties": {"properties": {"required": ["path"]}}}},
      {"type": "SCREEN", "key": "", "version": 1, "jsonSchema": {"properties": {"properties": {"required": ["name"]}}}},
      {"type": "COMMON", "key": null, "version": 1, "jsonSchema": {"type": "object", "required": ["context"],
        "properties": {"context": {"required": ["userAgent"], "properties": {"userAgent": {"type": "string", "not": {"pattern": "(bot|crawl|spider)"}}}}, "properties": {}, "traits": {}}}}
    ]
    """#

    @Test(arguments: [
        #"{"data": {"trackingPlan": {"id": "tp_1", "name": "Main", "rules": \#(rules)}}}"#,
        #"{"data": {"rules": \#(rules), "pagination": {"current": "MA=="}}}"#,
        #"{"trackingPlan": {"rules": \#(rules)}}"#,
        #"{"rules": \#(rules)}"#,
    ])
    func everyShapeMapsTheSame(json: String) throws {
        let plan = try TrackingPlan(json: Array(json.utf8), source: "segment.json")
        #expect(plan.summary == [
            "track Order Completed (properties: 4 rules)", "identify (traits: 1 rule)", "group (traits: 1 rule)",
            "page Pricing (properties: 1 rule)", "screen (properties: 1 rule)", "common (context: 3 rules, context required)",
        ])
        let gate = QualityGate(plan: plan, allowUnplanned: true, redactor: nil)
        let context = #"{"userAgent": "Mozilla/5.0"}"#
        func found(_ event: WireEvent) -> [String] { gate.judge(event).violations.map { "\($0.event) \($0.rule) \($0.path)" } }
        // The highest version of a rule wins.
        #expect(found(event(properties: #"{"total": 5}"#, context: context)) == ["track:Order Completed required properties.currency"])
        #expect(found(event(properties: #"{"total": 5, "currency": "EUR"}"#, context: context)) == [])
        #expect(found(event(.identify, "", properties: "{}", context: context)) == ["identify required traits.email"])
        #expect(found(event(.group, "", properties: #"{"size": 2.5}"#, context: context)) == ["group type traits.size"])
        #expect(found(event(.page, "Pricing", properties: "{}", context: context)) == ["page:Pricing required properties.path"])
        #expect(found(event(.page, "Other", properties: "{}", context: context)) == [])
        #expect(found(event(.screen, "Any", properties: "{}", context: context)) == ["screen required properties.name"])
        // COMMON applies to every event, planned or not.
        #expect(found(event(.track, "Unplanned")) == ["track:Unplanned required context"])
        #expect(found(event(.track, "Unplanned", context: #"{"userAgent": "Googlebot/2.1"}"#)) == ["track:Unplanned not context.userAgent"])
    }

    @Test(arguments: [
        (#"{"rules": [{"type": "ALIAS", "key": "x", "jsonSchema": {}}]}"#, "is not TRACK"),
        (#"{"rules": [{"type": "TRACK", "jsonSchema": {}}]}"#, "needs the event name"),
        (#"{"rules": [{"type": "TRACK", "key": "A"}]}"#, "no \"jsonSchema\""),
        (#"{"rules": [{"type": "TRACK", "key": "A", "jsonSchema": {"properties": {"userId": {}}}}]}"#, "context, properties and traits only"),
        (#"{"rules": [{"type": "TRACK", "key": "A", "jsonSchema": {"allOf": []}}]}"#, "\"allOf\""),
        (##"{"rules": [{"type": "TRACK", "key": "A", "jsonSchema": {"properties": {"properties": {"properties": {"a": {"$ref": "#/x"}}}}}}]}"##, "\"$ref\""),
        (#"{"data": {}}"#, "neither \"trackingPlan\" nor \"rules\""),
    ])
    func refuses(json: String, message: String) {
        #expect {
            _ = try TrackingPlan(json: Array(json.utf8), source: "segment.json")
        } throws: { error in
            (error as? QualityError)?.description.contains(message) == true
        }
    }

    @Test func trackTraitsCheckContextTraits() throws {
        let json = #"{"rules": [{"type": "TRACK", "key": "A", "jsonSchema": {"properties": {"traits": {"required": ["plan"]}}}}]}"#
        let gate = QualityGate(plan: try TrackingPlan(json: Array(json.utf8), source: "s"), allowUnplanned: true, redactor: nil)
        #expect(gate.judge(event(.track, "A", context: #"{"traits": {}}"#)).violations.map(\.path) == ["context.traits.plan"])
        #expect(gate.judge(event(.track, "A", context: #"{"traits": {"plan": 1}}"#)).violations == [])
    }
}
