#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Checks one parsed JSON document (a ``JSONTape`` over its bytes) against compiled schemas,
/// collecting violations. Nothing is allocated on the passing path: schemas are read in place
/// and the path of a value is rebuilt from the tape only when it breaks a rule.
struct Validator {
    let schemas: UnsafeBufferPointer<Schema>
    let bytes: UnsafeRawBufferPointer
    let nodes: UnsafeBufferPointer<JSONNode>
    let root: String
    /// Violations found, their `event` left empty (the caller names the event).
    var violations: [Violation] = []

    init(schemas: UnsafeBufferPointer<Schema>, bytes: UnsafeRawBufferPointer, nodes: UnsafeBufferPointer<JSONNode>, root: String) {
        self.schemas = schemas
        self.bytes = bytes
        self.nodes = nodes
        self.root = root
    }

    /// The path of the value at tape index `target`: `properties.items[2].sku`, rebuilt by
    /// descending from the root through the subtrees that hold it.
    func path(of target: Int, appending extra: String? = nil) -> String {
        var text = root
        var node = 0
        while node != target {
            let container = nodes[node]
            var child = node + 1
            var found = false
            for position in 0..<Int(container.count) {
                if container.kind == .object {
                    let valueNode = child + 1
                    if target >= valueNode && target < Int(nodes[valueNode].next) {
                        text += "." + String(decoding: JSONTape.decodedString(nodes[child], in: bytes), as: UTF8.self)
                        node = valueNode
                        found = true
                        break
                    }
                    child = Int(nodes[valueNode].next)
                } else {
                    if target >= child && target < Int(nodes[child].next) {
                        text += "[\(position)]"
                        node = child
                        found = true
                        break
                    }
                    child = Int(nodes[child].next)
                }
            }
            if !found { break }
        }
        if let extra { text += "." + extra }
        return text
    }

    private mutating func fail(_ node: Int, _ rule: String, _ message: String, member: String? = nil) {
        violations.append(Violation(event: "", rule: rule, path: path(of: node, appending: member), message: message))
    }

    /// Checks the value at tape index `node` against schema `index`.
    mutating func check(_ index: Int, node: Int) {
        let schema = schemas.baseAddress! + index
        if schema.pointee.ruleCount == 0 { return }
        if schema.pointee.never {
            fail(node, "false", "is not allowed here (the schema is false)")
            return
        }
        let value = nodes[node]
        if let types = schema.pointee.types, !matches(types, value) {
            fail(node, "type", "must be \(types.description), not \(Self.typeName(value.kind))")
            return
        }
        if let constValue = schema.pointee.constValue, !equals(node, constValue) {
            fail(node, "const", "must be \(constValue.text)")
        }
        if schema.pointee.enumValues != nil, !enumContains(schema, node) {
            let values = schema.pointee.enumValues!
            let listed = values.prefix(8).map(\.text).joined(separator: ", ")
            fail(node, "enum", "must be one of \(listed)\(values.count > 8 ? ", …" : "")")
        }
        if let not = schema.pointee.not {
            var inner = Validator(schemas: schemas, bytes: bytes, nodes: nodes, root: root)
            inner.check(not, node: node)
            if inner.violations.isEmpty { fail(node, "not", "must not match the schema under \"not\"") }
        }
        switch value.kind {
        case .object: checkObject(schema, node: node)
        case .array:
            guard let items = schema.pointee.items else { break }
            var child = node + 1
            for _ in 0..<Int(value.count) {
                check(items, node: child)
                child = Int(nodes[child].next)
            }
        case .string: checkString(schema, node)
        case .number: checkNumber(schema, node)
        default: break
        }
    }

    private func enumContains(_ schema: UnsafePointer<Schema>, _ node: Int) -> Bool {
        for value in schema.pointee.enumValues! where equals(node, value) { return true }
        return false
    }

    private mutating func checkObject(_ schema: UnsafePointer<Schema>, node: Int) {
        let value = nodes[node]
        var seen: UInt64 = 0
        var child = node + 1
        let memberCount = schema.pointee.members.count
        for _ in 0..<Int(value.count) {
            let key = nodes[child]
            let valueNode = child + 1
            var found = -1
            if memberCount > 0 {
                found = schema.pointee.members.withUnsafeBufferPointer { members in
                    if key.escaped {
                        let decoded = JSONTape.decodedString(key, in: bytes)
                        return members.firstIndex { $0.key == decoded } ?? -1
                    }
                    let start = bytes.baseAddress! + Int(key.start), length = Int(key.end - key.start)
                    for position in 0..<members.count where members[position].key.count == length {
                        let equal = members[position].key.withUnsafeBytes { memcmp($0.baseAddress!, start, length) == 0 }
                        if equal { return position }
                    }
                    return -1
                }
            }
            if found >= 0 {
                let (bit, index) = schema.pointee.members.withUnsafeBufferPointer { ($0[found].requiredBit, $0[found].schema) }
                if let bit { seen |= 1 << UInt64(bit) }
                if let index { check(index, node: valueNode) }
            } else {
                switch schema.pointee.additional {
                case .allowed: break
                case .forbidden: fail(valueNode, "additionalProperties", "is not in the plan (additionalProperties is false)")
                case .schema(let index): check(index, node: valueNode)
                }
            }
            child = Int(nodes[valueNode].next)
        }
        let requiredCount = schema.pointee.requiredCount
        if requiredCount > 0 {
            let all: UInt64 = requiredCount == 64 ? .max : (1 << UInt64(requiredCount)) - 1
            if seen != all {
                for member in schema.pointee.members {
                    if let bit = member.requiredBit, seen & (1 << UInt64(bit)) == 0 {
                        fail(node, "required", "is required", member: member.name)
                    }
                }
            }
        }
    }

    private mutating func checkString(_ schema: UnsafePointer<Schema>, _ node: Int) {
        guard schema.pointee.pattern != nil || schema.pointee.minLength != nil || schema.pointee.maxLength != nil
            || schema.pointee.format != nil else { return }
        let value = nodes[node]
        if value.escaped {
            let decoded = JSONTape.decodedString(value, in: bytes)
            decoded.withUnsafeBytes { checkText(schema, node, $0) }
        } else {
            checkText(schema, node, UnsafeRawBufferPointer(rebasing: bytes[Int(value.start)..<Int(value.end)]))
        }
    }

    private mutating func checkText(_ schema: UnsafePointer<Schema>, _ node: Int, _ text: UnsafeRawBufferPointer) {
        let minLength = schema.pointee.minLength, maxLength = schema.pointee.maxLength
        if minLength != nil || maxLength != nil {
            // Code points never outnumber bytes: a string within maxLength bytes needs no count.
            let needsCount = minLength != nil || maxLength.map { text.count > $0 } == true
            let length = needsCount ? Self.codePoints(text) : text.count
            if let minimum = minLength, length < minimum {
                fail(node, "minLength", "must be at least \(minimum) characters, is \(length)")
            }
            if let maximum = maxLength, length > maximum {
                fail(node, "maxLength", "must be at most \(maximum) characters, is \(length)")
            }
        }
        if let pattern = schema.pointee.pattern, !pattern.matches(text) {
            fail(node, "pattern", "must match the pattern \(schema.pointee.patternText)")
        }
        if let format = schema.pointee.format, !Formats.check(format, text) {
            fail(node, "format", "must be a \(format.rawValue)")
        }
    }

    /// Code points in valid UTF-8: bytes that do not continue a sequence, eight at a time.
    static func codePoints(_ text: UnsafeRawBufferPointer) -> Int {
        var continuation = 0, index = 0
        while text.count - index >= 8 {
            let word = text.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            continuation += (word & ~(word << 1) & 0x8080_8080_8080_8080).nonzeroBitCount
            index += 8
        }
        while index < text.count {
            if text[index] & 0xC0 == 0x80 { continuation += 1 }
            index += 1
        }
        return text.count - continuation
    }

    private mutating func checkNumber(_ schema: UnsafePointer<Schema>, _ node: Int) {
        let minimum = schema.pointee.minimum, maximum = schema.pointee.maximum
        let exclusiveMinimum = schema.pointee.exclusiveMinimum, exclusiveMaximum = schema.pointee.exclusiveMaximum
        guard minimum != nil || maximum != nil || exclusiveMinimum != nil || exclusiveMaximum != nil else { return }
        let number = JSONTape.double(nodes[node], in: bytes)
        if let minimum, !(number >= minimum) { fail(node, "minimum", "must be ≥ \(Self.format(minimum))") }
        if let maximum, !(number <= maximum) { fail(node, "maximum", "must be ≤ \(Self.format(maximum))") }
        if let bound = exclusiveMinimum, !(number > bound) { fail(node, "exclusiveMinimum", "must be > \(Self.format(bound))") }
        if let bound = exclusiveMaximum, !(number < bound) { fail(node, "exclusiveMaximum", "must be < \(Self.format(bound))") }
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
        let item = nodes[node]
        switch (item.kind, value) {
        case (.null, .null): return true
        case (.true, .bool(let flag)): return flag
        case (.false, .bool(let flag)): return !flag
        case (.number, .number(let number)): return JSONTape.double(item, in: bytes) == number
        case (.string, .string(let text)):
            if !item.escaped {
                let length = Int(item.end - item.start)
                let start = bytes.baseAddress! + Int(item.start)
                return text.utf8.withContiguousStorageIfAvailable { utf8 in
                    utf8.count == length && (length == 0 || memcmp(utf8.baseAddress!, start, length) == 0)
                } ?? text.utf8.elementsEqual(UnsafeRawBufferPointer(start: start, count: length))
            }
            return JSONTape.decodedString(item, in: bytes).elementsEqual(text.utf8)
        case (.array, .array(let elements)):
            guard Int(item.count) == elements.count else { return false }
            var child = node + 1
            for element in elements {
                guard equals(child, element) else { return false }
                child = Int(nodes[child].next)
            }
            return true
        case (.object, .object(let members)):
            guard Int(item.count) == members.count else { return false }
            var child = node + 1
            for _ in 0..<Int(item.count) {
                let key = String(decoding: JSONTape.decodedString(nodes[child], in: bytes), as: UTF8.self)
                guard let member = members.first(where: { $0.key == key }), equals(child + 1, member.value) else { return false }
                child = Int(nodes[child + 1].next)
            }
            return true
        default: return false
        }
    }
}
