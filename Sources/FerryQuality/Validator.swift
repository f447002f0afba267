/// Checks one parsed JSON document (a ``JSONTape`` over its bytes) against compiled schemas,
/// collecting violations. The path of a value is built only when it breaks a rule.
struct Validator {
    let schemas: [Schema]
    let bytes: UnsafeRawBufferPointer
    let tape: JSONTape
    let event: String
    var violations: [Violation]
    /// The steps from the checked field down to the value being checked.
    private var steps: [Step] = []
    private let root: String

    enum Step {
        case key(Int)  // tape index of the key
        case index(Int)
        case name(String)
    }

    init(schemas: [Schema], bytes: UnsafeRawBufferPointer, tape: JSONTape, event: String, root: String, violations: [Violation]) {
        self.schemas = schemas
        self.bytes = bytes
        self.tape = tape
        self.event = event
        self.root = root
        self.violations = violations
    }

    /// The path of the value being checked: `properties.items[2].sku`.
    private func path(appending extra: String? = nil) -> String {
        var text = root
        for step in steps {
            switch step {
            case .key(let node): text += "." + String(decoding: JSONTape.decodedString(tape.nodes[node], in: bytes), as: UTF8.self)
            case .index(let position): text += "[\(position)]"
            case .name(let name): text += "." + name
            }
        }
        if let extra { text += "." + extra }
        return text
    }

    private mutating func fail(_ rule: String, _ message: String, member: String? = nil) {
        violations.append(Violation(event: event, rule: rule, path: path(appending: member), message: message))
    }

    /// Checks the value at tape index `node` against schema `index`.
    mutating func check(_ index: Int, node: Int) {
        let schema = schemas[index]
        if schema.ruleCount == 0 { return }
        if schema.never {
            fail("false", "is not allowed here (the schema is false)")
            return
        }
        let value = tape.nodes[node]
        if let types = schema.types, !matches(types, value) {
            fail("type", "must be \(types.description), not \(Self.typeName(value.kind))")
            return
        }
        if let constValue = schema.constValue, !equals(node, constValue) {
            fail("const", "must be \(constValue.text)")
        }
        if let values = schema.enumValues, !values.contains(where: { equals(node, $0) }) {
            let listed = values.prefix(8).map(\.text).joined(separator: ", ")
            fail("enum", "must be one of \(listed)\(values.count > 8 ? ", …" : "")")
        }
        if let not = schema.not {
            var inner = Validator(schemas: schemas, bytes: bytes, tape: tape, event: event, root: root, violations: [])
            inner.check(not, node: node)
            if inner.violations.isEmpty { fail("not", "must not match the schema under \"not\"") }
        }
        switch value.kind {
        case .object: checkObject(schema, node: node)
        case .array:
            guard let items = schema.items else { break }
            var child = node + 1
            for position in 0..<Int(value.count) {
                steps.append(.index(position))
                check(items, node: child)
                steps.removeLast()
                child = Int(tape.nodes[child].next)
            }
        case .string: checkString(schema, value)
        case .number: checkNumber(schema, value)
        default: break
        }
    }

    private mutating func checkObject(_ schema: Schema, node: Int) {
        let value = tape.nodes[node]
        var seen: UInt64 = 0
        var child = node + 1
        for _ in 0..<Int(value.count) {
            let key = tape.nodes[child]
            let valueNode = child + 1
            var found: Schema.Member?
            if !schema.members.isEmpty {
                if key.escaped {
                    let decoded = JSONTape.decodedString(key, in: bytes)
                    found = schema.members.first { $0.key == decoded }
                } else {
                    let raw = UnsafeRawBufferPointer(rebasing: bytes[Int(key.start)..<Int(key.end)])
                    found = schema.members.first { member in
                        member.key.count == raw.count && member.key.withUnsafeBytes { $0.elementsEqual(raw) }
                    }
                }
            }
            if let found {
                if let bit = found.requiredBit { seen |= 1 << UInt64(bit) }
                if let index = found.schema {
                    steps.append(.key(child))
                    check(index, node: valueNode)
                    steps.removeLast()
                }
            } else {
                switch schema.additional {
                case .allowed: break
                case .forbidden:
                    steps.append(.key(child))
                    fail("additionalProperties", "is not in the plan (additionalProperties is false)")
                    steps.removeLast()
                case .schema(let index):
                    steps.append(.key(child))
                    check(index, node: valueNode)
                    steps.removeLast()
                }
            }
            child = Int(tape.nodes[valueNode].next)
        }
        if schema.requiredCount > 0 {
            let all: UInt64 = schema.requiredCount == 64 ? .max : (1 << UInt64(schema.requiredCount)) - 1
            if seen != all {
                for member in schema.members {
                    if let bit = member.requiredBit, seen & (1 << UInt64(bit)) == 0 {
                        fail("required", "is required", member: member.name)
                    }
                }
            }
        }
    }

    private mutating func checkString(_ schema: Schema, _ value: JSONNode) {
        guard schema.pattern != nil || schema.minLength != nil || schema.maxLength != nil || schema.format != nil else { return }
        let decoded: [UInt8]? = value.escaped ? JSONTape.decodedString(value, in: bytes) : nil
        let failures: [(String, String)] = withText(value, decoded) { text in
            var failures: [(String, String)] = []
            if schema.minLength != nil || schema.maxLength != nil {
                // Code points: every byte that does not continue a sequence starts one.
                var length = 0
                for byte in text where byte & 0xC0 != 0x80 { length += 1 }
                if let minimum = schema.minLength, length < minimum {
                    failures.append(("minLength", "must be at least \(minimum) characters, is \(length)"))
                }
                if let maximum = schema.maxLength, length > maximum {
                    failures.append(("maxLength", "must be at most \(maximum) characters, is \(length)"))
                }
            }
            if let pattern = schema.pattern, !pattern.matches(text) {
                failures.append(("pattern", "must match the pattern \(schema.patternText)"))
            }
            if let format = schema.format, !Formats.check(format, text) {
                failures.append(("format", "must be a \(format.rawValue)"))
            }
            return failures
        }
        for (rule, message) in failures { fail(rule, message) }
    }

    private func withText<Result>(_ value: JSONNode, _ decoded: [UInt8]?, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        if let decoded { return decoded.withUnsafeBytes(body) }
        return body(UnsafeRawBufferPointer(rebasing: bytes[Int(value.start)..<Int(value.end)]))
    }

    private mutating func checkNumber(_ schema: Schema, _ value: JSONNode) {
        guard schema.minimum != nil || schema.maximum != nil || schema.exclusiveMinimum != nil || schema.exclusiveMaximum != nil else {
            return
        }
        let number = JSONTape.double(value, in: bytes)
        if let minimum = schema.minimum, !(number >= minimum) { fail("minimum", "must be ≥ \(Self.format(minimum))") }
        if let maximum = schema.maximum, !(number <= maximum) { fail("maximum", "must be ≤ \(Self.format(maximum))") }
        if let bound = schema.exclusiveMinimum, !(number > bound) { fail("exclusiveMinimum", "must be > \(Self.format(bound))") }
        if let bound = schema.exclusiveMaximum, !(number < bound) { fail("exclusiveMaximum", "must be < \(Self.format(bound))") }
    }

    static func format(_ number: Double) -> String { JSONValue.number(number).text }

    private func matches(_ types: Schema.Types, _ value: JSONNode) -> Bool {
        switch value.kind {
        case .object: types.contains(.object)
        case .array: types.contains(.array)
        case .string: types.contains(.string)
        case .number: types.contains(.number) || (types.contains(.integer) && JSONTape.isInteger(value, in: bytes))
        case .true, .false: types.contains(.boolean)
        case .null: types.contains(.null)
        }
    }

    static func typeName(_ kind: JSONKind) -> String {
        switch kind {
        case .object: "an object"
        case .array: "an array"
        case .string: "a string"
        case .number: "a number"
        case .true, .false: "a boolean"
        case .null: "null"
        }
    }

    /// JSON equality of the value at `node` and `value` (numbers by value, objects unordered).
    func equals(_ node: Int, _ value: JSONValue) -> Bool {
        let item = tape.nodes[node]
        switch (item.kind, value) {
        case (.null, .null): return true
        case (.true, .bool(let flag)): return flag
        case (.false, .bool(let flag)): return !flag
        case (.number, .number(let number)): return JSONTape.double(item, in: bytes) == number
        case (.string, .string(let text)):
            if !item.escaped {
                let raw = UnsafeRawBufferPointer(rebasing: bytes[Int(item.start)..<Int(item.end)])
                return text.utf8.elementsEqual(raw)
            }
            return JSONTape.decodedString(item, in: bytes).elementsEqual(text.utf8)
        case (.array, .array(let elements)):
            guard Int(item.count) == elements.count else { return false }
            var child = node + 1
            for element in elements {
                guard equals(child, element) else { return false }
                child = Int(tape.nodes[child].next)
            }
            return true
        case (.object, .object(let members)):
            guard Int(item.count) == members.count else { return false }
            var child = node + 1
            for _ in 0..<Int(item.count) {
                let key = String(decoding: JSONTape.decodedString(tape.nodes[child], in: bytes), as: UTF8.self)
                guard let member = members.first(where: { $0.key == key }), equals(child + 1, member.value) else { return false }
                child = Int(tape.nodes[child + 1].next)
            }
            return true
        default: return false
        }
    }
}
