#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol

/// Checks one parsed JSON document (a ``JSONTape`` over its bytes) against compiled schemas,
/// collecting violations. Nothing is allocated or retained on the passing path: the flat schemas
/// (``SchemaTable``) are read in place, the full ones only for the rarer checks and messages, and
/// the path of a value is rebuilt from the tape only when it breaks a rule.
struct Validator {
    let table: SchemaTable
    let bytes: UnsafeRawBufferPointer
    let nodes: UnsafeBufferPointer<JSONNode>
    let root: StaticString
    /// Where violations go (the caller's array, lent for the check: the validator itself holds
    /// nothing to release), their `event` left empty (the caller names the event).
    let violations: UnsafeMutablePointer<[Violation]>

    init(table: SchemaTable, bytes: UnsafeRawBufferPointer, nodes: UnsafeBufferPointer<JSONNode>, root: StaticString,
         violations: UnsafeMutablePointer<[Violation]>) {
        self.table = table
        self.bytes = bytes
        self.nodes = nodes
        self.root = root
        self.violations = violations
    }

    /// The path of the value at tape index `target`: `properties.items[2].sku`, rebuilt by
    /// descending from the root through the subtrees that hold it.
    func path(of target: Int, appending extra: String? = nil) -> String {
        var text = root.description
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

    @inline(never)
    private mutating func fail(_ node: Int, _ rule: String, _ message: String, member: String? = nil) {
        violations.pointee.append(Violation(event: "", rule: rule, path: path(of: node, appending: member), message: message))
    }

    /// Checks the value at tape index `node` against schema `index`.
    mutating func check(_ index: Int, node: Int) {
        let schema = table.flat + index
        let flags = schema.pointee.flags
        if schema.pointee.ruleCount == 0 && !flags.contains(.never) { return }
        if flags.contains(.never) {
            fail(node, "false", "is not allowed here (the schema is false)")
            return
        }
        let value = nodes[node]
        if flags.contains(.types), !Self.matches(schema.pointee.types, value, bytes) {
            failType(node, schema.pointee.types, value.kind)
            return
        }
        if flags.contains(.const) { checkConst(index, node) }
        if flags.contains(.enumStrings) ? !Self.enumStringsContain(table, schema, value, bytes) : flags.contains(.enumAny) && !enumContains(index, node) {
            failEnum(index, node)
        }
        if flags.contains(.not) { checkNot(Int(schema.pointee.not), node) }
        switch value.kind {
        case .object: checkObject(schema, node: node)
        case .array:
            guard flags.contains(.items) else { break }
            let items = Int(schema.pointee.items)
            var child = node + 1
            for _ in 0..<Int(value.count) {
                check(items, node: child)
                child = Int(nodes[child].next)
            }
        case .string:
            guard flags.contains(.text) else { break }
            // The common bound alone (`maxLength`, no pattern, format or minLength): a string
            // within that many bytes as written passes (code points never outnumber bytes).
            if !flags.contains(.patternOrFormat) && schema.pointee.minLength < 0
                && Int(value.end - value.start) <= Int(schema.pointee.maxLength) { break }
            checkString(index, node)
        case .number: if flags.contains(.bounds) { checkNumber(table.full.baseAddress! + index, node) }
        default: break
        }
    }

    // The rarer checks and the messages, out of line: the passing path stays small.

    @inline(never)
    private mutating func failType(_ node: Int, _ types: Schema.Types, _ kind: JSONKind) {
        fail(node, "type", "must be \(types.description), not \(Self.typeName(kind))")
    }

    @inline(never)
    private mutating func checkConst(_ index: Int, _ node: Int) {
        let constValue = table.full[index].constValue!
        if !equals(node, constValue) { fail(node, "const", "must be \(constValue.text)") }
    }

    @inline(never)
    private mutating func failEnum(_ index: Int, _ node: Int) {
        let values = table.full[index].enumValues!
        let listed = values.prefix(8).map(\.text).joined(separator: ", ")
        fail(node, "enum", "must be one of \(listed)\(values.count > 8 ? ", …" : "")")
    }

    @inline(never)
    private mutating func checkNot(_ not: Int, _ node: Int) {
        var found: [Violation] = []
        withUnsafeMutablePointer(to: &found) { found in
            var inner = Validator(table: table, bytes: bytes, nodes: nodes, root: root, violations: found)
            inner.check(not, node: node)
        }
        if found.isEmpty { fail(node, "not", "must not match the schema under \"not\"") }
    }

    @inline(never)
    private func enumContains(_ index: Int, _ node: Int) -> Bool {
        for value in table.full[index].enumValues! where equals(node, value) { return true }
        return false
    }

    /// Whether the value is one of a flat `enum`'s strings (compared in place, escapes decoded).
    private static func enumStringsContain(_ table: SchemaTable, _ schema: UnsafePointer<FlatSchema>, _ value: JSONNode,
                                           _ bytes: UnsafeRawBufferPointer) -> Bool {
        guard value.kind == .string else { return false }
        if value.escaped {
            let decoded = JSONTape.decodedString(value, in: bytes)
            return decoded.withUnsafeBytes { enumStringsContain(table, schema, $0) }
        }
        return enumStringsContain(table, schema, UnsafeRawBufferPointer(start: bytes.baseAddress! + Int(value.start),
                                                                        count: Int(value.end &- value.start)))
    }

    @inline(__always)
    private static func enumStringsContain(_ table: SchemaTable, _ schema: UnsafePointer<FlatSchema>, _ text: UnsafeRawBufferPointer) -> Bool {
        let strings = table.enumStrings + Int(schema.pointee.enumStart)
        for position in 0..<Int(schema.pointee.enumCount) where Int(strings[position].count) == text.count {
            if text.isEmpty || Self.equalBytes(table.bytes + Int(strings[position].start), text.baseAddress!, text.count) { return true }
        }
        return false
    }

    private mutating func checkObject(_ schema: UnsafePointer<FlatSchema>, node: Int) {
        let value = nodes[node]
        var seen: UInt64 = 0
        var child = node + 1
        let members = table.members + Int(schema.pointee.memberStart)
        let memberCount = Int(schema.pointee.memberCount)
        for _ in 0..<Int(value.count) {
            let key = nodes[child]
            let valueNode = child + 1
            var found = -1
            if memberCount > 0 {
                if key.escaped {
                    let decoded = JSONTape.decodedString(key, in: bytes)
                    found = decoded.withUnsafeBytes { Self.member(table.bytes, members, memberCount, $0) }
                } else {
                    found = Self.member(table.bytes, members, memberCount, UnsafeRawBufferPointer(rebasing: bytes[Int(key.start)..<Int(key.end)]))
                }
            }
            if found >= 0 {
                let bit = members[found].requiredBit, index = members[found].schema
                if bit >= 0 { seen |= 1 << UInt64(bit) }
                if index >= 0 { check(Int(index), node: valueNode) }
            } else if schema.pointee.flags.contains(.additionalForbidden) {
                fail(valueNode, "additionalProperties", "is not in the plan (additionalProperties is false)")
            } else if schema.pointee.flags.contains(.additionalSchema) {
                check(Int(schema.pointee.additional), node: valueNode)
            }
            child = Int(nodes[valueNode].next)
        }
        let requiredCount = Int(schema.pointee.requiredCount)
        if requiredCount > 0 {
            let all: UInt64 = requiredCount == 64 ? .max : (1 << UInt64(requiredCount)) - 1
            if seen != all { failRequired(schema - table.flat, node, seen) }
        }
    }

    @inline(never)
    private mutating func failRequired(_ index: Int, _ node: Int, _ seen: UInt64) {
        for member in table.full[index].members {
            if let bit = member.requiredBit, seen & (1 << UInt64(bit)) == 0 {
                fail(node, "required", "is required", member: member.name)
            }
        }
    }

    /// The position of the member whose key is `key` among `count` members, -1 for none.
    private static func member(_ pool: UnsafePointer<UInt8>, _ members: UnsafePointer<FlatMember>, _ count: Int,
                               _ key: UnsafeRawBufferPointer) -> Int {
        for position in 0..<count where Int(members[position].keyCount) == key.count {
            if key.isEmpty || Self.equalBytes(pool + Int(members[position].keyStart), key.baseAddress!, key.count) { return position }
        }
        return -1
    }

    /// Whether `count` bytes at `a` and `b` are equal: short ones (member names, enum strings)
    /// compared in a loop, not by a call.
    @inline(__always)
    private static func equalBytes(_ a: UnsafePointer<UInt8>, _ b: UnsafeRawPointer, _ count: Int) -> Bool {
        guard count <= 16 else { return memcmp(a, b, count) == 0 }
        var index = 0
        while index < count {
            if a[index] != b.load(fromByteOffset: index, as: UInt8.self) { return false }
            index &+= 1
        }
        return true
    }

    private mutating func checkString(_ index: Int, _ node: Int) {
        let schema = table.full.baseAddress! + index
        let value = nodes[node]
        if value.escaped {
            let decoded = JSONTape.decodedString(value, in: bytes)
            decoded.withUnsafeBytes { checkText(index, schema, node, $0) }
        } else {
            checkText(index, schema, node, UnsafeRawBufferPointer(rebasing: bytes[Int(value.start)..<Int(value.end)]))
        }
    }

    private mutating func checkText(_ index: Int, _ schema: UnsafePointer<Schema>, _ node: Int, _ text: UnsafeRawBufferPointer) {
        let flat = table.flat + index
        // One decision for both checks (``textPasses(_:_:_:)``); the messages only on a failure.
        if Self.textPasses(schema, flat, text) { return }
        failText(flat, schema, node, text)
    }

    @inline(never)
    private mutating func failText(_ flat: UnsafePointer<FlatSchema>, _ schema: UnsafePointer<Schema>, _ node: Int, _ text: UnsafeRawBufferPointer) {
        let minLength = flat.pointee.minLength >= 0 ? Int(flat.pointee.minLength) : nil
        let maxLength = flat.pointee.maxLength >= 0 ? Int(flat.pointee.maxLength) : nil
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
        guard flat.pointee.flags.contains(.patternOrFormat) else { return }
        if let pattern = schema.pointee.pattern, !pattern.matches(text) {
            fail(node, "pattern", "must match the pattern \(schema.pointee.patternText)")
        }
        if let format = schema.pointee.format, !Formats.check(format, text) {
            fail(node, "format", "must be a \(format.rawValue)")
        }
    }

    /// Whether `text` (decoded) passes the string checks of schema `schema` (`flat` is its flat
    /// record): the decision of ``checkText(_:_:_:_:)``, without messages (they are made only on a failure).
    private static func textPasses(_ schema: UnsafePointer<Schema>, _ flat: UnsafePointer<FlatSchema>, _ text: UnsafeRawBufferPointer) -> Bool {
        let minLength = Int(flat.pointee.minLength), maxLength = Int(flat.pointee.maxLength)
        if minLength >= 0 || maxLength >= 0 {
            // Code points never outnumber bytes: a string within maxLength bytes needs no count.
            let length = minLength >= 0 || (maxLength >= 0 && text.count > maxLength) ? codePoints(text) : text.count
            if minLength >= 0 && length < minLength { return false }
            if maxLength >= 0 && length > maxLength { return false }
        }
        guard flat.pointee.flags.contains(.patternOrFormat) else { return true }
        if let pattern = schema.pointee.pattern, !pattern.matches(text) { return false }
        if let format = schema.pointee.format, !Formats.check(format, text) { return false }
        return true
    }

    /// Whether `number` is within schema `schema`'s bounds: the decision of ``checkNumber(_:_:)``,
    /// without messages (they are made only on a failure).
    private static func numberPasses(_ schema: UnsafePointer<Schema>, _ number: Double) -> Bool {
        if let minimum = schema.pointee.minimum, !(number >= minimum) { return false }
        if let maximum = schema.pointee.maximum, !(number <= maximum) { return false }
        if let bound = schema.pointee.exclusiveMinimum, !(number > bound) { return false }
        if let bound = schema.pointee.exclusiveMaximum, !(number < bound) { return false }
        return true
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
        let number = JSONTape.double(nodes[node], in: bytes)
        // One decision for both checks (``numberPasses(_:_:)``); the messages only on a failure.
        if Self.numberPasses(schema, number) { return }
        let minimum = schema.pointee.minimum, maximum = schema.pointee.maximum
        let exclusiveMinimum = schema.pointee.exclusiveMinimum, exclusiveMaximum = schema.pointee.exclusiveMaximum
        if let minimum, !(number >= minimum) { fail(node, "minimum", "must be ≥ \(Self.format(minimum))") }
        if let maximum, !(number <= maximum) { fail(node, "maximum", "must be ≤ \(Self.format(maximum))") }
        if let bound = exclusiveMinimum, !(number > bound) { fail(node, "exclusiveMinimum", "must be > \(Self.format(bound))") }
        if let bound = exclusiveMaximum, !(number < bound) { fail(node, "exclusiveMaximum", "must be < \(Self.format(bound))") }
    }

    static func format(_ number: Double) -> String { JSONValue.number(number).text }

    @inline(__always)
    private static func matches(_ types: Schema.Types, _ value: JSONNode, _ bytes: UnsafeRawBufferPointer) -> Bool {
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
