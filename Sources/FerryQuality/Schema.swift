/// One compiled JSON Schema (a node of the tree of checks; children are indices into
/// ``SchemaSet/schemas``).
struct Schema: Sendable {
    /// JSON types, as a bit set.
    struct Types: OptionSet, Sendable {
        let rawValue: UInt8
        static let object = Types(rawValue: 1 << 0)
        static let array = Types(rawValue: 1 << 1)
        static let string = Types(rawValue: 1 << 2)
        static let number = Types(rawValue: 1 << 3)
        static let integer = Types(rawValue: 1 << 4)
        static let boolean = Types(rawValue: 1 << 5)
        static let null = Types(rawValue: 1 << 6)

        static let names: [(String, Types)] = [
            ("object", .object), ("array", .array), ("string", .string), ("number", .number), ("integer", .integer),
            ("boolean", .boolean), ("null", .null),
        ]

        var description: String {
            Self.names.filter { contains($0.1) }.map(\.0).joined(separator: " or ")
        }
    }

    /// A member the schema names (in `properties`, `required`, or both).
    struct Member: Sendable {
        var key: [UInt8]
        var name: String
        /// Its schema under `properties`, if any.
        var schema: Int?
        /// Its bit in the required mask, if `required` lists it.
        var requiredBit: Int?
    }

    /// What `additionalProperties` says about members not named.
    enum Additional: Sendable {
        case allowed
        case forbidden
        case schema(Int)
    }

    /// A `format` the plan may name.
    enum Format: String, Sendable, CaseIterable {
        case dateTime = "date-time"
        case email, uri, uuid
    }

    /// The `false` schema: nothing passes.
    var never = false
    var types: Types?
    var members: [Member] = []
    var requiredCount = 0
    var additional: Additional = .allowed
    var enumValues: [JSONValue]?
    var constValue: JSONValue?
    var pattern: Regex?
    var patternText = ""
    var minimum: Double?
    var maximum: Double?
    var exclusiveMinimum: Double?
    var exclusiveMaximum: Double?
    var minLength: Int?
    var maxLength: Int?
    var items: Int?
    var format: Format?
    var not: Int?
    /// How many checks this schema and its children make (for the plan's summary).
    var ruleCount = 0

    /// Whether the schema checks nothing (`{}` or `true`).
    var isTrivial: Bool { ruleCount == 0 && !never }
}

/// The compiled schemas of a plan, and the compiler that builds them from JSON.
struct SchemaSet: Sendable {
    var schemas: [Schema] = []

    /// Keywords that annotate and check nothing: accepted and ignored.
    static let annotations: Set<String> = [
        "$schema", "$id", "id", "$comment", "title", "description", "default", "examples", "deprecated",
        "readOnly", "writeOnly", "labels", "$anchor",
    ]

    /// The keywords this build checks (docs/QUALITY.md).
    static let keywords: Set<String> = [
        "type", "properties", "required", "additionalProperties", "enum", "const", "pattern", "minimum", "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "items", "format", "not",
    ]

    /// Compiles `value` (a schema) at `path` of `file`; returns its index.
    mutating func compile(_ value: JSONValue, file: String, path: String) throws(QualityError) -> Int {
        var schema = Schema()
        switch value {
        case .bool(let allowed):
            schema.never = !allowed
            schema.ruleCount = allowed ? 0 : 1
            schemas.append(schema)
            return schemas.count - 1
        case .object(let members):
            // Reserve the slot first: children are compiled after it.
            let slot = schemas.count
            schemas.append(schema)
            var required: [String] = []
            var propertyEntries: [(String, Int)] = []
            for member in members {
                let at = path + "." + member.key
                if Self.annotations.contains(member.key) { continue }
                guard Self.keywords.contains(member.key) else {
                    throw .unsupportedKeyword(file: file, path: path, keyword: member.key)
                }
                schema.ruleCount += 1
                switch member.key {
                case "type":
                    schema.types = try types(member.value, file: file, path: at)
                case "properties":
                    guard case .object(let properties) = member.value else {
                        throw .invalidPlan(file: file, path: at, message: "must be an object of schemas")
                    }
                    schema.ruleCount -= 1
                    for property in properties {
                        propertyEntries.append((property.key, try compile(property.value, file: file, path: at + "." + property.key)))
                    }
                case "required":
                    guard case .array(let names) = member.value else {
                        throw .invalidPlan(file: file, path: at, message: "must be an array of member names")
                    }
                    for name in names {
                        guard case .string(let text) = name else {
                            throw .invalidPlan(file: file, path: at, message: "must hold strings only")
                        }
                        if !required.contains(text) { required.append(text) }
                    }
                    guard required.count <= 64 else {
                        throw .invalidPlan(file: file, path: at, message: "lists \(required.count) names; at most 64 are supported")
                    }
                case "additionalProperties":
                    switch member.value {
                    case .bool(true): schema.additional = .allowed
                    case .bool(false): schema.additional = .forbidden
                    case .object: schema.additional = .schema(try compile(member.value, file: file, path: at))
                    default: throw .invalidPlan(file: file, path: at, message: "must be a boolean or a schema")
                    }
                case "enum":
                    guard case .array(let values) = member.value, !values.isEmpty else {
                        throw .invalidPlan(file: file, path: at, message: "must be a non-empty array")
                    }
                    schema.enumValues = values
                case "const":
                    schema.constValue = member.value
                case "pattern":
                    guard case .string(let text) = member.value else {
                        throw .invalidPlan(file: file, path: at, message: "must be a string")
                    }
                    do throws(Regex.SyntaxError) {
                        schema.pattern = try Regex(text)
                    } catch {
                        throw .invalidPattern(file: file, path: at, pattern: text, message: error.message)
                    }
                    schema.patternText = text
                case "minimum": schema.minimum = try number(member.value, file: file, path: at)
                case "maximum": schema.maximum = try number(member.value, file: file, path: at)
                case "exclusiveMinimum": schema.exclusiveMinimum = try number(member.value, file: file, path: at)
                case "exclusiveMaximum": schema.exclusiveMaximum = try number(member.value, file: file, path: at)
                case "minLength": schema.minLength = try count(member.value, file: file, path: at)
                case "maxLength": schema.maxLength = try count(member.value, file: file, path: at)
                case "items":
                    guard case .array = member.value else {
                        schema.items = try compile(member.value, file: file, path: at)
                        break
                    }
                    throw .invalidPlan(file: file, path: at, message: "an array of schemas (tuple items) is not supported; use one schema")
                case "format":
                    guard case .string(let name) = member.value, let format = Schema.Format(rawValue: name) else {
                        let known = Schema.Format.allCases.map(\.rawValue).joined(separator: ", ")
                        throw .invalidPlan(file: file, path: at, message: "format \(member.value.text) is not supported (supported: \(known))")
                    }
                    schema.format = format
                case "not":
                    schema.not = try compile(member.value, file: file, path: at)
                default: break
                }
            }
            for (name, index) in propertyEntries {
                schema.members.append(Schema.Member(key: Array(name.utf8), name: name, schema: index, requiredBit: nil))
                schema.ruleCount += schemas[index].ruleCount
            }
            for (bit, name) in required.enumerated() {
                if let position = schema.members.firstIndex(where: { $0.name == name }) {
                    schema.members[position].requiredBit = bit
                } else {
                    schema.members.append(Schema.Member(key: Array(name.utf8), name: name, schema: nil, requiredBit: bit))
                }
            }
            schema.requiredCount = required.count
            if case .schema(let index) = schema.additional { schema.ruleCount += schemas[index].ruleCount }
            if let items = schema.items { schema.ruleCount += schemas[items].ruleCount }
            schemas[slot] = schema
            return slot
        default:
            throw .invalidPlan(file: file, path: path, message: "a schema must be an object or a boolean, not \(value.typeName)")
        }
    }

    private func types(_ value: JSONValue, file: String, path: String) throws(QualityError) -> Schema.Types {
        func one(_ value: JSONValue) throws(QualityError) -> Schema.Types {
            guard case .string(let name) = value, let type = Schema.Types.names.first(where: { $0.0 == name })?.1 else {
                throw .invalidPlan(file: file, path: path, message: "\(value.text) is not a JSON Schema type (object, array, string, number, integer, boolean, null)")
            }
            return type
        }
        if case .array(let names) = value {
            guard !names.isEmpty else { throw .invalidPlan(file: file, path: path, message: "must not be empty") }
            var types: Schema.Types = []
            for name in names { types.formUnion(try one(name)) }
            return types
        }
        return try one(value)
    }

    private func number(_ value: JSONValue, file: String, path: String) throws(QualityError) -> Double {
        guard case .number(let number) = value, number.isFinite else {
            throw .invalidPlan(file: file, path: path, message: "must be a number")
        }
        return number
    }

    private func count(_ value: JSONValue, file: String, path: String) throws(QualityError) -> Int {
        guard case .number(let number) = value, number >= 0, number.rounded() == number, number < 1e9 else {
            throw .invalidPlan(file: file, path: path, message: "must be a non-negative integer")
        }
        return Int(number)
    }
}
