import FerryProtocol
@testable import FerryQuality
import Testing

/// Every supported keyword, a value that passes and one that fails (with the rule and path).
@Suite struct SchemaKeywordTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var schema: String
        var passing: String
        var failing: String
        var rule: String
        var path: String
        var testDescription: String { "\(rule): \(schema)" }
    }

    static let cases: [Case] = [
        Case(schema: #"{"properties": {"total": {"type": "number"}}}"#, passing: #"{"total": 4.5}"#, failing: #"{"total": "4.5"}"#, rule: "type", path: "properties.total"),
        Case(schema: #"{"properties": {"n": {"type": "integer"}}}"#, passing: #"{"n": 3.0}"#, failing: #"{"n": 3.5}"#, rule: "type", path: "properties.n"),
        Case(schema: #"{"properties": {"n": {"type": ["string", "null"]}}}"#, passing: #"{"n": null}"#, failing: #"{"n": false}"#, rule: "type", path: "properties.n"),
        Case(schema: #"{"properties": {"b": {"type": "boolean"}}}"#, passing: #"{"b": true}"#, failing: #"{"b": 1}"#, rule: "type", path: "properties.b"),
        Case(schema: #"{"properties": {"o": {"type": "object"}}}"#, passing: #"{"o": {}}"#, failing: #"{"o": []}"#, rule: "type", path: "properties.o"),
        Case(schema: #"{"properties": {"a": {"type": "array"}}}"#, passing: #"{"a": [1]}"#, failing: #"{"a": {}}"#, rule: "type", path: "properties.a"),
        Case(schema: #"{"required": ["sku"]}"#, passing: #"{"sku": "A"}"#, failing: #"{"skus": "A"}"#, rule: "required", path: "properties.sku"),
        Case(schema: #"{"properties": {"a": {}}, "additionalProperties": false}"#, passing: #"{"a": 1}"#, failing: #"{"a": 1, "b": 2}"#, rule: "additionalProperties", path: "properties.b"),
        Case(schema: #"{"additionalProperties": {"type": "string"}}"#, passing: #"{"x": "y"}"#, failing: #"{"x": 1}"#, rule: "type", path: "properties.x"),
        Case(schema: #"{"properties": {"c": {"enum": ["EUR", "USD", 1]}}}"#, passing: #"{"c": "USD"}"#, failing: #"{"c": "GBP"}"#, rule: "enum", path: "properties.c"),
        Case(schema: #"{"properties": {"c": {"const": {"a": [1, 2]}}}}"#, passing: #"{"c": {"a": [1, 2.0]}}"#, failing: #"{"c": {"a": [2, 1]}}"#, rule: "const", path: "properties.c"),
        Case(schema: #"{"properties": {"sku": {"pattern": "^[A-Z]{2}-\\d{3,4}$"}}}"#, passing: #"{"sku": "AB-1234"}"#, failing: #"{"sku": "AB-12"}"#, rule: "pattern", path: "properties.sku"),
        Case(schema: #"{"properties": {"t": {"minimum": 0}}}"#, passing: #"{"t": 0}"#, failing: #"{"t": -0.5}"#, rule: "minimum", path: "properties.t"),
        Case(schema: #"{"properties": {"t": {"maximum": 100}}}"#, passing: #"{"t": 100}"#, failing: #"{"t": 1e3}"#, rule: "maximum", path: "properties.t"),
        Case(schema: #"{"properties": {"t": {"exclusiveMinimum": 0}}}"#, passing: #"{"t": 0.1}"#, failing: #"{"t": 0}"#, rule: "exclusiveMinimum", path: "properties.t"),
        Case(schema: #"{"properties": {"t": {"exclusiveMaximum": 10}}}"#, passing: #"{"t": 9}"#, failing: #"{"t": 10}"#, rule: "exclusiveMaximum", path: "properties.t"),
        Case(schema: #"{"properties": {"s": {"minLength": 3}}}"#, passing: #"{"s": "été"}"#, failing: #"{"s": "ét"}"#, rule: "minLength", path: "properties.s"),
        Case(schema: #"{"properties": {"s": {"maxLength": 2}}}"#, passing: #"{"s": "\u00e9\u00e9"}"#, failing: #"{"s": "abc"}"#, rule: "maxLength", path: "properties.s"),
        Case(schema: #"{"properties": {"l": {"items": {"type": "object", "required": ["sku"]}}}}"#, passing: #"{"l": [{"sku": 1}]}"#, failing: #"{"l": [{"sku": 1}, {}]}"#, rule: "required", path: "properties.l[1].sku"),
        Case(schema: #"{"properties": {"d": {"format": "date-time"}}}"#, passing: #"{"d": "2024-02-29T23:59:60.5+01:00"}"#, failing: #"{"d": "2023-02-29T10:00:00Z"}"#, rule: "format", path: "properties.d"),
        Case(schema: #"{"properties": {"e": {"format": "email"}}}"#, passing: #"{"e": "jane.doe+x@example.co.uk"}"#, failing: #"{"e": "jane@localhost"}"#, rule: "format", path: "properties.e"),
        Case(schema: #"{"properties": {"u": {"format": "uri"}}}"#, passing: #"{"u": "https://example.com/a?b=c%20d#e"}"#, failing: #"{"u": "/relative/path"}"#, rule: "format", path: "properties.u"),
        Case(schema: #"{"properties": {"u": {"format": "uuid"}}}"#, passing: #"{"u": "0190b3c4-2f1e-7a3b-9c4d-5e6f7a8b9c0d"}"#, failing: #"{"u": "0190b3c4-2f1e-7a3b-9c4d-5e6f7a8b9c0"}"#, rule: "format", path: "properties.u"),
        Case(schema: #"{"properties": {"p": {"not": {"pattern": "bot"}}}}"#, passing: #"{"p": "Mozilla"}"#, failing: #"{"p": "googlebot"}"#, rule: "not", path: "properties.p"),
        Case(schema: #"{"properties": {"x": false}}"#, passing: #"{}"#, failing: #"{"x": 1}"#, rule: "false", path: "properties.x"),
    ]

    @Test(arguments: cases)
    func passes(_ testCase: Case) throws {
        #expect(try violations(schema: testCase.schema, properties: testCase.passing) == [])
    }

    @Test(arguments: cases)
    func fails(_ testCase: Case) throws {
        let found = try violations(schema: testCase.schema, properties: testCase.failing)
        #expect(found.count == 1)
        #expect(found.first?.rule == testCase.rule)
        #expect(found.first?.path == testCase.path)
        #expect(found.first?.event == "track:Order Completed")
        #expect(found.first?.message.isEmpty == false)
    }

    @Test(arguments: ["if", "$ref", "allOf", "anyOf", "oneOf", "patternProperties", "minItems", "multipleOf", "dependentRequired", "definitions"])
    func refusesAnUnknownKeywordByName(_ keyword: String) {
        #expect {
            _ = try plan(properties: #"{"properties": {"a": {"\#(keyword)": 1}}}"#)
        } throws: { error in
            let text = (error as? QualityError)?.description ?? ""
            return text.contains("\"\(keyword)\"") && text.contains("plan.json") && text.contains("properties.properties.a")
        }
    }

    @Test(arguments: [
        (#"{"type": "strin"}"#, "not a JSON Schema type"),
        (#"{"format": "ipv4"}"#, "not supported"),
        (#"{"pattern": "(?=a)"}"#, "lookahead"),
        (#"{"pattern": "(a)\\1"}"#, "backreferences"),
        (#"{"pattern": "[a-"}"#, "missing ']'"),
        (#"{"minLength": -1}"#, "non-negative integer"),
        (#"{"items": [{}]}"#, "tuple"),
        (#"{"required": "a"}"#, "array"),
        (#"3"#, "object or a boolean"),
    ])
    func refusesABadSchema(schema: String, message: String) {
        #expect {
            _ = try plan(properties: schema)
        } throws: { error in
            (error as? QualityError)?.description.contains(message) == true
        }
    }

    @Test func annotationsAreAccepted() throws {
        let schema = #"{"$schema": "http://json-schema.org/draft-07/schema#", "description": "d", "title": "t", "labels": {}, "examples": [1], "default": 2, "properties": {"a": {"type": "string", "description": "x"}}}"#
        #expect(try violations(schema: schema, properties: #"{"a": 1}"#).map(\.rule) == ["type"])
    }

    @Test func pathsNameEscapedKeysAndIndices() throws {
        let found = try violations(schema: #"{"properties": {"a b": {"items": {"type": "string"}}}}"#, properties: #"{"a\u0020b": ["x", 2]}"#)
        #expect(found.map(\.path) == ["properties.a b[1]"])
    }

    @Test func propertiesThatAreNotAnObjectAreAViolation() throws {
        let found = try violations(schema: #"{"required": ["a"]}"#, properties: "[1]")
        #expect(found.first?.path == "properties")
    }
}
