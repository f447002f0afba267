import Ferry
import FerryProtocol
import Foundation

/// One `ferry emit --stdin` line: a JSON object such as
/// `{"name":"Signed Up","type":"track","properties":{"plan":"pro"},"userId":"u1"}`.
///
/// Every field but `name` is optional (and `name` too for `identify`, `group` and `alias`);
/// `null` reads as absent. A field the format does not know (a typo such as `"propertis"`) or a
/// value of the wrong type is an error naming the field, so nothing is silently dropped.
enum EmitLine {
    /// The fields a line may have.
    static let fields = ["name", "type", "properties", "userId", "anonymousId", "groupId", "previousId", "context",
                         "onceKey", "category", "localOnly"]

    /// The event of `line`, or why it is not one (a message without the line number).
    static func event(_ line: [UInt8], defaultType: String) -> Result<Event, LineError> {
        Result { try parse(line, defaultType: defaultType) }.mapError { $0 as? LineError ?? LineError("\($0)") }
    }

    private static func parse(_ line: [UInt8], defaultType: String) throws -> Event {
        guard String(validating: line, as: UTF8.self) != nil else { throw LineError("not valid UTF-8") }
        guard let parsed = try? JSONSerialization.jsonObject(with: Data(line)) else { throw LineError("not valid JSON") }
        guard let object = parsed as? [String: Any] else { throw LineError("not a JSON object") }
        if let unknown = object.keys.sorted().first(where: { !fields.contains($0) }) {
            throw LineError("unknown field \"\(unknown)\"; valid fields: \(fields.joined(separator: ", "))")
        }
        func present(_ key: String) -> Any? {
            guard let value = object[key], !(value is NSNull) else { return nil }
            return value
        }
        func string(_ key: String) throws -> String? {
            guard let value = present(key) else { return nil }
            guard let text = value as? String else { throw LineError("\"\(key)\" must be a string") }
            return text
        }

        func jsonObject(_ key: String) throws -> [UInt8] {
            guard let value = present(key) else { return [] }
            guard value is [String: Any] else { throw LineError("\"\(key)\" must be an object") }
            return Array(try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys]))
        }

        let name = try string("name")
        let typeName = try string("type") ?? defaultType
        guard let type = EventType(name: typeName) else {
            throw LineError("unknown type \"\(typeName)\"; valid types: \(EventType.allCases.map(\.description).joined(separator: ", "))")
        }
        // identify, group and alias events have no name in Segment's model.
        if name == nil && !Emit.nameless.contains(type) { throw LineError("missing string field \"name\"") }
        let properties = try jsonObject("properties")
        // An empty context is no context, as with the `--context` flag and the Swift client.
        let context = (present("context") as? [String: Any])?.isEmpty == true ? [] : try jsonObject("context")
        var category: UInt8 = 0
        if let value = present("category") {
            if let text = value as? String, let code = ConsentCategories.code(of: text) ?? UInt8(text), (1...254).contains(code) {
                category = code
            } else if let number = value as? NSNumber, !isBoolean(number), let code = Int(exactly: number.doubleValue),
                      (1...254).contains(code) {
                category = UInt8(code)
            } else {
                throw LineError("\"category\" must be one of \(ConsentCategories.builtIn.map(\.name).joined(separator: ", ")), or a code 1-254")
            }
        }
        var localOnly = false
        if let value = present("localOnly") {
            guard let flag = value as? NSNumber, isBoolean(flag) else { throw LineError("\"localOnly\" must be true or false") }
            localOnly = flag.boolValue
        }
        return Event(type: type, name: name ?? "", propertiesJSON: properties, userID: try string("userId") ?? "",
                     onceKey: try string("onceKey") ?? "", category: category, localOnly: localOnly,
                     anonymousID: try string("anonymousId") ?? "", groupID: try string("groupId") ?? "",
                     previousID: try string("previousId") ?? "", contextJSON: context)
    }

    /// Whether a JSON number is really `true`/`false` (on Linux 0 and 1 also cast to Bool; the
    /// objCType tells a real boolean).
    private static func isBoolean(_ number: NSNumber) -> Bool {
        String(cString: number.objCType) == "c"
    }
}

/// Why a `--stdin` line is not an event.
struct LineError: Error, CustomStringConvertible {
    /// The reason, e.g. `unknown field "propertis"; valid fields: …`.
    var description: String
    init(_ description: String) { self.description = description }
}
