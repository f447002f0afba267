#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol

/// A tracking plan, compiled once per load: for each planned event (its type, and its name for
/// track, page and screen) the checks of its properties (traits for identify and group) and
/// context. The native format or a Segment Protocols plan (docs/QUALITY.md).
public struct TrackingPlan: Sendable {
    /// One planned event (or a common rule, which applies to every event).
    struct Rule: Sendable {
        var type: EventType?
        /// The event name (track, and page/screen when named); nil: the type alone.
        var name: [UInt8]?
        /// `track:Order Completed`, `identify`, `common`.
        var label: String
        /// Checks of the properties of track, page, screen and alias events.
        var properties: Int?
        /// Checks of the properties (traits) of identify and group events.
        var traits: Int?
        var context: Int?
        /// Checks of `context.traits` (a Segment rule's `traits` on track, page and screen).
        var contextTraits: Int?
        /// The event must carry a context (a Segment rule's top-level `"required": ["context"]`).
        var requiresContext = false
    }

    /// The compiled plan, shared by every copy (one reference to retain, not one per array).
    final class Core: Sendable {
        let schemas: [Schema]
        let rules: [Rule]
        let common: [Rule]
        /// The schemas as the validator reads them (flat, in place).
        let storage: SchemaStorage
        /// The rules as the ingest path looks them up per event (flat, in place).
        let lookup: RuleTable

        init(schemas: [Schema], rules: [Rule], common: [Rule]) {
            self.schemas = schemas
            self.rules = rules
            self.common = common
            storage = SchemaStorage(schemas)
            lookup = RuleTable(rules)
        }
    }

    let core: Core
    var schemas: [Schema] { core.schemas }
    var rules: [Rule] { core.rules }
    var common: [Rule] { core.common }

    /// Parses and compiles a plan. `source` names it in error messages (the path).
    public init(json: [UInt8], source: String) throws(QualityError) {
        let document = try JSONValue.parse(json, file: source)
        var compiler = PlanCompiler(file: source)
        try compiler.compile(document)
        core = Core(schemas: compiler.set.schemas, rules: compiler.rules, common: compiler.common)
    }

    /// Reads and compiles the plan at `path`.
    public static func load(path: String) throws(QualityError) -> TrackingPlan {
        try TrackingPlan(json: try FileAccess.read(path), source: path)
    }

    /// What the plan names, for `ferryd validate`: `track Order Completed (properties: 4 rules)`.
    public var summary: [String] {
        (rules + common).map { rule in
            var parts: [String] = []
            func add(_ field: String, _ index: Int?) {
                guard let index else { return }
                let count = schemas[index].ruleCount
                parts.append("\(field): \(counted(count, "rule"))")
            }
            add("properties", rule.properties)
            add("traits", rule.traits)
            add("context", rule.context)
            add("context.traits", rule.contextTraits)
            if rule.requiresContext { parts.append("context required") }
            let label = (rule.type?.description ?? "common") + (rule.name.map { " " + String(decoding: $0, as: UTF8.self) } ?? "")
            return parts.isEmpty ? "\(label) (any properties)" : "\(label) (\(parts.joined(separator: ", ")))"
        }
    }

    /// The index in ``rules`` of the rule naming an event of `type` called `name`: the one with
    /// that name, else the one for the type alone (identify, group and alias always; page and
    /// screen when no named rule fits); -1 for none.
    func rule(type: EventType, name: String) -> Int {
        var copy = name
        return copy.withUTF8 { rule(type: type, name: UnsafeRawBufferPointer($0)) }
    }

    /// ``rule(type:name:)`` for a name's UTF-8 bytes (read in place from a frame).
    func rule(type: EventType, name bytes: UnsafeRawBufferPointer) -> Int {
        core.lookup.index(type: type, name: bytes)
    }

    /// How the plan names an event that it does not list.
    static func label(type: EventType, name: String) -> String {
        switch type {
        case .identify, .group, .alias: type.description
        default: name.isEmpty ? type.description : "\(type):\(name)"
        }
    }

    /// Checks one event's fields (read in place) against rule `rule` (an index in ``rules``, or -1)
    /// and the common rules. The violations' `event` is left empty (the gate names the event).
    func check(type: EventType, rule: Int, properties: JSONView, context: JSONView?, into violations: inout [Violation]) {
        let schemas = core.storage.table
        if rule >= 0 {
            core.rules.withUnsafeBufferPointer { rules in
                Self.apply(rules.baseAddress! + rule, schemas, type: type, properties: properties, context: context, into: &violations)
            }
        }
        if !core.common.isEmpty {
            core.common.withUnsafeBufferPointer { common in
                for index in 0..<common.count {
                    Self.apply(common.baseAddress! + index, schemas, type: type, properties: properties, context: context, into: &violations)
                }
            }
        }
    }

    private static func apply(_ applied: UnsafePointer<Rule>, _ schemas: SchemaTable, type: EventType, properties: JSONView,
                              context: JSONView?, into violations: inout [Violation]) {
        let isTraits = type == .identify || type == .group
        if let schema = isTraits ? applied.pointee.traits : applied.pointee.properties {
            properties.check(schemas, schema, root: isTraits ? "traits" : "properties", into: &violations)
        }
        if applied.pointee.requiresContext && context == nil {
            violations.append(Violation(event: "", rule: "required", path: "context", message: "is required"))
        }
        if let context {
            if let schema = applied.pointee.context {
                context.check(schemas, schema, root: "context", into: &violations)
            }
            if let schema = applied.pointee.contextTraits, !isTraits {
                context.checkMember("traits", schemas, schema, into: &violations)
            }
        }
    }
}

/// A JSON document and its tape, checked in place.
struct ParsedJSON {
    var bytes: [UInt8]
    var tape: JSONTape

    /// `bytes` parsed, or nil when they are not one JSON object.
    init?(object bytes: [UInt8]) {
        guard let tape = try? JSONTape.parse(bytes), tape.nodes.first?.kind == .object else { return nil }
        self.bytes = bytes
        self.tape = tape
    }

    init(bytes: [UInt8], tape: JSONTape) {
        self.bytes = bytes
        self.tape = tape
    }

    /// `{}`, for an event without properties.
    static let empty = ParsedJSON(bytes: Array("{}".utf8), tape: try! JSONTape.parse(Array("{}".utf8)))

    /// `body` over the document read in place.
    func withView<Result>(_ body: (JSONView) -> Result) -> Result {
        bytes.withUnsafeBytes { raw in
            tape.nodes.withUnsafeBufferPointer { body(JSONView(bytes: raw, nodes: $0)) }
        }
    }
}

/// A parsed JSON document read in place (its bytes and its tape's nodes, valid only in the scope
/// that lent them): what the plan checks, without copying the bytes out of an event frame.
struct JSONView {
    let bytes: UnsafeRawBufferPointer
    let nodes: UnsafeBufferPointer<JSONNode>

    func check(_ schemas: SchemaTable, _ schema: Int, root: StaticString, into violations: inout [Violation]) {
        guard !schemas.isTrivial(schema) else { return }
        withUnsafeMutablePointer(to: &violations) { violations in
            var validator = Validator(table: schemas, bytes: bytes, nodes: nodes, root: root, violations: violations)
            validator.check(schema, node: 0)
        }
    }

    /// Checks the top-level member `name` (if present) against `schema`.
    func checkMember(_ name: String, _ schemas: SchemaTable, _ schema: Int, into violations: inout [Violation]) {
        guard nodes.first?.kind == .object else { return }
        var child = 1
        for _ in 0..<Int(nodes[0].count) {
            if JSONTape.decodedString(nodes[child], in: bytes).elementsEqual(name.utf8) {
                // The path is rebuilt from the tape's root: name the context, not context.traits twice.
                withUnsafeMutablePointer(to: &violations) { violations in
                    var validator = Validator(table: schemas, bytes: bytes, nodes: nodes, root: "context", violations: violations)
                    validator.check(schema, node: child + 1)
                }
                return
            }
            child = Int(nodes[child + 1].next)
        }
    }
}

/// A plan's rules as the ingest path looks them up per event: one flat, trivial record per rule
/// (its type, its name's bytes in a pool, its schemas), read in place: no retain, no optional
/// array per rule. Built once per load, never changed, freed with the plan.
final class RuleTable: @unchecked Sendable {
    // Written only by init; read-only afterwards (so sharing across threads is safe).
    struct Entry {
        /// The event type's raw value (``TrackingPlan/rules`` always has one; `UInt8.max` would
        /// stand for none and matches no event).
        var type: UInt8
        /// The rule names the event (else it is for the type alone).
        var named: Bool
        var nameStart: Int32
        var nameCount: Int32
    }

    private let entries: UnsafeMutableBufferPointer<Entry>
    private let names: UnsafeMutableBufferPointer<UInt8>
    /// Rules in the table.
    let count: Int

    init(_ rules: [TrackingPlan.Rule]) {
        var pool: [UInt8] = []
        var flat: [Entry] = []
        for rule in rules {
            flat.append(Entry(type: rule.type?.rawValue ?? .max, named: rule.name != nil, nameStart: Int32(pool.count),
                              nameCount: Int32(rule.name?.count ?? 0)))
            pool += rule.name ?? []
        }
        // At least one element, so every table has a base address.
        entries = .allocate(capacity: max(flat.count, 1))
        _ = entries.initialize(fromContentsOf: flat)
        names = .allocate(capacity: max(pool.count, 1))
        _ = names.initialize(fromContentsOf: pool)
        count = flat.count
    }

    deinit {
        entries.deallocate()
        names.deallocate()
    }

    /// The index of the rule naming an event of `type` called `name`: the one with that name,
    /// else the one for the type alone; -1 for none (``TrackingPlan/rule(type:name:)``).
    func index(type: EventType, name: UnsafeRawBufferPointer) -> Int {
        var unnamed = -1
        let code = type.rawValue
        for index in 0..<count where entries[index].type == code {
            let entry = entries[index]
            guard entry.named else {
                unnamed = index
                continue
            }
            guard Int(entry.nameCount) == name.count else { continue }
            if name.isEmpty || memcmp(names.baseAddress! + Int(entry.nameStart), name.baseAddress!, name.count) == 0 { return index }
        }
        return unnamed
    }
}
