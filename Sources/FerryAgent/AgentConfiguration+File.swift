import Foundation

extension AgentConfiguration {
    /// Loads a configuration from a JSON file, starting from the defaults: only the fields present
    /// in the file change. Unknown keys are an error, so a typo never silently falls back to a
    /// default. See `daemon/ferryd.example.json`.
    public static func load(fromFile path: String, base: AgentConfiguration = AgentConfiguration()) throws -> AgentConfiguration {
        guard let bytes = try FileIO.readFile(path) else {
            throw AgentError(code: .configuration, message: "configuration file \(path) does not exist")
        }
        let object: Any
        do {
            object = try JSONSerialization.jsonObject(with: Data(bytes))
        } catch {
            throw AgentError(code: .configuration, message: "configuration file \(path) is not valid JSON: \(error.localizedDescription)")
        }
        guard let root = object as? [String: Any] else {
            throw AgentError(code: .configuration, message: "configuration file \(path) must hold a JSON object")
        }
        var config = base
        var reader = FieldReader(path: path)
        let sinkReader = reader
        try reader.apply(root, [
            "runtimeDirectory": .string { config.runtimeDirectory = $0 },
            "dataDirectory": .string { config.dataDirectory = $0 },
            "maxEventBytes": .int { config.maxEventBytes = $0 },
            "log": .object([
                "segmentMaxBytes": .int { config.log.segmentMaxBytes = Int64($0) },
                "retentionMaxBytes": .int { config.log.retentionMaxBytes = Int64($0) },
                "fullPolicy": .choice(LogConfiguration.FullPolicy.allCases.map(\.rawValue)) {
                    config.log.fullPolicy = LogConfiguration.FullPolicy(rawValue: $0)!
                },
            ]),
            "dedup": .object([
                "maxEntries": .int { config.dedup.maxEntries = $0 },
                "maxAgeSeconds": .int { config.dedup.maxAgeSeconds = $0 },
            ]),
            "delivery": .object([
                "batchMaxEvents": .int { config.delivery.batchMaxEvents = $0 },
                "batchMaxBytes": .int { config.delivery.batchMaxBytes = $0 },
                "retryInitialMilliseconds": .int { config.delivery.retryInitialMilliseconds = $0 },
                "retryMaxMilliseconds": .int { config.delivery.retryMaxMilliseconds = $0 },
            ]),
            "sink": .custom { value, name in
                guard let object = value as? [String: Any] else { throw sinkReader.fail(name, "expected an object") }
                switch object["type"].map({ $0 as? String ?? "" }) ?? "file" {
                case "file":
                    if case .http = config.sink { config.sink = AgentConfiguration().sink }
                    var fileReader = FieldReader(path: path)
                    try fileReader.apply(object, [
                        "type": .choice(["file"]) { _ in },
                        "directory": .string { directory in
                            if case .file(_, let max) = config.sink { config.sink = .file(directory: directory, maxFileBytes: max) }
                        },
                        "maxFileBytes": .int { max in
                            if case .file(let directory, _) = config.sink { config.sink = .file(directory: directory, maxFileBytes: Int64(max)) }
                        },
                    ], at: name)
                case "http":
                    config.sink = .http(try HTTPSinkConfiguration.parse(object, path: path, at: name))
                default:
                    throw sinkReader.fail(name + ".type", "expected one of: file, http")
                }
            },
        ], at: "")
        try config.validate()
        return config
    }
}

/// Applies a JSON object to setters, with precise errors naming the key path. Shared by the
/// loaders of nested configurations (`HTTPSinkConfiguration+File.swift`).
struct FieldReader {
    let path: String

    indirect enum Field {
        case string((String) -> Void)
        case int((Int) -> Void)
        /// A JSON `true`/`false` (not 0/1).
        case bool((Bool) -> Void)
        /// An object whose keys are free-form and whose values are strings.
        case stringMap(([String: String]) -> Void)
        /// Anything: the closure gets the value and its key path and throws its own errors.
        case custom((Any, String) throws -> Void)
        case choice([String], (String) -> Void)
        case object([String: Field])
    }

    func fail(_ key: String, _ message: String) -> AgentError {
        AgentError(code: .configuration, message: "\(path): \(key): \(message)")
    }

    mutating func apply(_ object: [String: Any], _ fields: [String: Field], at prefix: String) throws {
        for (key, value) in object.sorted(by: { $0.key < $1.key }) {
            let name = prefix.isEmpty ? key : prefix + "." + key
            guard let field = fields[key] else {
                throw fail(name, "unknown key; valid keys here: \(fields.keys.sorted().joined(separator: ", "))")
            }
            switch field {
            case .string(let set):
                guard let string = value as? String else { throw fail(name, "expected a string") }
                set(string)
            case .int(let set):
                // On Linux 0 and 1 also cast to Bool; the objCType tells a real boolean ("c").
                guard let number = value as? NSNumber, String(cString: number.objCType) != "c",
                      number.doubleValue == number.doubleValue.rounded() else { throw fail(name, "expected an integer") }
                set(number.intValue)
            case .bool(let set):
                guard let number = value as? NSNumber, String(cString: number.objCType) == "c" else {
                    throw fail(name, "expected true or false")
                }
                set(number.boolValue)
            case .stringMap(let set):
                guard let map = value as? [String: Any] else { throw fail(name, "expected an object of strings") }
                var strings: [String: String] = [:]
                for (key, element) in map {
                    guard let string = element as? String else { throw fail(name + "." + key, "expected a string") }
                    strings[key] = string
                }
                set(strings)
            case .custom(let apply):
                try apply(value, name)
            case .choice(let valid, let set):
                guard let string = value as? String, valid.contains(string) else {
                    throw fail(name, "expected one of: \(valid.joined(separator: ", "))")
                }
                set(string)
            case .object(let nested):
                guard let child = value as? [String: Any] else { throw fail(name, "expected an object") }
                try apply(child, nested, at: name)
            }
        }
    }
}
