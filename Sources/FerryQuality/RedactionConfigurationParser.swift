/// Reads the `redact` table (``RedactionConfiguration/init(json:)``).
enum RedactionConfigurationParser {
    static func parse(_ bytes: [UInt8]) throws(QualityError) -> RedactionConfiguration {
        let value: JSONValue
        do throws(QualityError) {
            value = try JSONValue.parse(bytes, file: "redact")
        } catch {
            throw .invalidRedaction(path: "$", message: error.description)
        }
        guard case .object(let members) = value else {
            throw .invalidRedaction(path: "$", message: "must be an object, not \(value.typeName)")
        }
        var configuration = RedactionConfiguration()
        for member in members {
            switch member.key {
            case "keyFile":
                guard case .string(let path) = member.value, !path.isEmpty else {
                    throw .invalidRedaction(path: "keyFile", message: "must be a non-empty string (a path)")
                }
                configuration.keyFile = path
            case "rules":
                guard case .array(let rules) = member.value else {
                    throw .invalidRedaction(path: "rules", message: "must be an array of {\"path\", \"action\"}")
                }
                for (index, rule) in rules.enumerated() {
                    let at = "rules[\(index)]"
                    let fields = try object(rule, at: at, keys: ["path", "action"])
                    guard case .string(let path) = fields["path"] else {
                        throw .invalidRedaction(path: at + ".path", message: "must be a string such as \"properties.email\"")
                    }
                    _ = try RedactionPath(parsing: path, at: at + ".path")
                    configuration.rules.append(RedactionRule(path: path, action: try action(fields["action"], at: at + ".action", of: RedactionAction.allCases)))
                }
            case "detect":
                guard case .array(let detectors) = member.value else {
                    throw .invalidRedaction(path: "detect", message: "must be an array of {\"kind\", \"action\"}")
                }
                for (index, detector) in detectors.enumerated() {
                    let at = "detect[\(index)]"
                    let fields = try object(detector, at: at, keys: ["kind", "action"])
                    let kinds = DetectorKind.allCases.map(\.rawValue).joined(separator: ", ")
                    guard case .string(let name) = fields["kind"], let kind = DetectorKind(rawValue: name) else {
                        throw .invalidRedaction(path: at + ".kind", message: "must be one of \(kinds)")
                    }
                    guard !configuration.detectors.contains(where: { $0.kind == kind }) else {
                        throw .invalidRedaction(path: at + ".kind", message: "\"\(name)\" is listed twice")
                    }
                    if case .string(RedactionAction.keep.rawValue) = fields["action"] { throw detectorKeeps(at: at + ".action") }
                    let allowed = RedactionAction.allCases.filter(\.isDetectorAction)
                    configuration.detectors.append(DetectorRule(kind: kind, action: try action(fields["action"], at: at + ".action", of: allowed)))
                }
            default:
                throw .invalidRedaction(path: member.key, message: "unknown key (known: keyFile, rules, detect)")
            }
        }
        return configuration
    }

    private static func object(_ value: JSONValue, at path: String, keys: [String]) throws(QualityError) -> [String: JSONValue] {
        guard case .object(let members) = value else {
            throw .invalidRedaction(path: path, message: "must be an object, not \(value.typeName)")
        }
        var fields: [String: JSONValue] = [:]
        for member in members {
            guard keys.contains(member.key) else {
                throw .invalidRedaction(path: path + "." + member.key, message: "unknown key (known: \(keys.joined(separator: ", ")))")
            }
            fields[member.key] = member.value
        }
        for key in keys where fields[key] == nil {
            throw .invalidRedaction(path: path + "." + key, message: "is required")
        }
        return fields
    }

    private static func action(_ value: JSONValue?, at path: String, of allowed: [RedactionAction]) throws(QualityError) -> RedactionAction {
        guard case .string(let name) = value, let action = RedactionAction(rawValue: name), allowed.contains(action) else {
            throw .invalidRedaction(path: path, message: "must be one of \(allowed.map(\.rawValue).joined(separator: ", "))")
        }
        return action
    }

    /// The error for a detector whose action is `keep` (at `path`, `detect[N].action`): the parser
    /// and ``Redactor/init(configuration:key:)`` (a configuration built in code) say the same.
    static func detectorKeeps(at path: String) -> QualityError {
        .invalidRedaction(path: path, message: "keep is for path rules only (a detector finds values to redact: drop, mask or hash); name a field to keep with a rule {\"path\": …, \"action\": \"keep\"}")
    }
}

/// A parsed redaction path: the field it starts from and the member steps below it.
struct RedactionPath: Hashable, Sendable {
    /// Where a path starts.
    enum Root: String, Sendable, CaseIterable {
        case properties, traits, context, userId, anonymousId, previousId, groupId

        var isIdentifier: Bool { self != .properties && self != .traits && self != .context }

        /// The position of the root in ``allCases`` (a table index, without searching the cases).
        var index: Int {
            switch self {
            case .properties: 0
            case .traits: 1
            case .context: 2
            case .userId: 3
            case .anonymousId: 4
            case .previousId: 5
            case .groupId: 6
            }
        }
    }
    /// A step below the root: a member name, or `*` (any member, any array element).
    enum Step: Hashable, Sendable {
        case key([UInt8])
        case any
    }

    var root: Root
    var steps: [Step]

    init(parsing text: String, at location: String) throws(QualityError) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard let first = parts.first, let root = Root(rawValue: first) else {
            let roots = Root.allCases.map(\.rawValue).joined(separator: ", ")
            throw .invalidRedaction(path: location, message: "\"\(text)\" must start with one of \(roots)")
        }
        self.root = root
        steps = []
        for part in parts.dropFirst() {
            guard !part.isEmpty else { throw .invalidRedaction(path: location, message: "\"\(text)\" has an empty step") }
            steps.append(part == "*" ? .any : .key(Array(part.utf8)))
        }
        if root.isIdentifier && !steps.isEmpty {
            throw .invalidRedaction(path: location, message: "\"\(text)\": \(first) is a text field, it has no members")
        }
        if !root.isIdentifier && steps.isEmpty {
            throw .invalidRedaction(path: location, message: "\"\(text)\" names a whole field; name members below it (\(first).NAME or \(first).*)")
        }
    }
}
