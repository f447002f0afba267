import FerryProtocol

/// A JSON value for event properties and traits.
///
/// ```swift
/// client.track("Order Completed", properties: ["total": 42.5, "items": ["a", "b"], "gift": true])
/// ```
public enum FerryValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([FerryValue])
    case object([String: FerryValue])

    /// Appends the JSON text of the value.
    public func appendJSON(to out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let value): out.append(contentsOf: (value ? "true" : "false").utf8)
        case .int(let value): out.append(contentsOf: String(value).utf8)
        case .double(let value):
            // JSON has no NaN or infinity.
            out.append(contentsOf: (value.isFinite ? String(value) : "null").utf8)
        case .string(let value): JSONText.appendString(value, to: &out)
        case .array(let values):
            out.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                value.appendJSON(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let fields):
            Self.appendObject(fields, to: &out)
        }
    }

    /// Appends a JSON object with keys in sorted order (stable output).
    public static func appendObject(_ fields: [String: FerryValue], to out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        if fields.count <= 8 {
            // Typical properties: each key found by a scan for the smallest one after the last
            // written, instead of a sorted copy of the keys (an allocation on the app's thread).
            var last: String?
            for position in 0..<fields.count {
                var next: Dictionary<String, FerryValue>.Index?
                for index in fields.indices {
                    let key = fields[index].key
                    if let last, key <= last { continue }
                    if let smallest = next, fields[smallest].key <= key { continue }
                    next = index
                }
                let (key, value) = fields[next!]
                if position > 0 { out.append(UInt8(ascii: ",")) }
                JSONText.appendString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                value.appendJSON(to: &out)
                last = key
            }
        } else {
            for (index, key) in fields.keys.sorted().enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                JSONText.appendString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                fields[key]!.appendJSON(to: &out)
            }
        }
        out.append(UInt8(ascii: "}"))
    }

    /// About how many bytes ``appendJSON(to:)`` appends (exact but for numbers and escapes): what
    /// the client reserves in a frame before encoding into it.
    var estimatedJSONSize: Int {
        switch self {
        case .null: 4
        case .bool: 5
        case .int: 20
        case .double: 24
        case .string(let value): value.utf8.count + 2
        case .array(let values): values.reduce(2) { $0 + $1.estimatedJSONSize + 1 }
        case .object(let fields): fields.reduce(2) { $0 + $1.key.utf8.count + 4 + $1.value.estimatedJSONSize }
        }
    }

    /// ``estimatedJSONSize`` of the object of `fields` (0 for none: an event without properties).
    static func estimatedJSONSize(_ fields: [String: FerryValue]) -> Int {
        fields.isEmpty ? 0 : FerryValue.object(fields).estimatedJSONSize
    }
}

extension FerryValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral {
    public init(nilLiteral: ()) { self = .null }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: FerryValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, FerryValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}
