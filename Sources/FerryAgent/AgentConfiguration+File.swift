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
            // The sink's keys depend on its "type" (default "file"), so the type is read first.
            "sink": .custom { object, name, reader in
                let type = object["type"] as? String ?? "file"
                switch type {
                case "jetstream":
                    let jetstream = FieldBox(JetStreamSinkConfiguration())
                    try reader.apply(object, JetStreamSinkConfiguration.fields(jetstream), at: name)
                    config.sink = .jetstream(jetstream.value)
                default:
                    try reader.apply(object, [
                        "type": .choice(["file", "jetstream"]) { _ in },
                        "directory": .string { directory in
                            if case .file(_, let max) = config.sink { config.sink = .file(directory: directory, maxFileBytes: max) }
                        },
                        "maxFileBytes": .int { max in
                            if case .file(let directory, _) = config.sink { config.sink = .file(directory: directory, maxFileBytes: Int64(max)) }
                        },
                    ], at: name)
                }
            },
        ], at: "")
        try config.validate()
        return config
    }
}

/// Applies a JSON object to setters, with precise errors naming the key path.
struct FieldReader {
    let path: String

    indirect enum Field {
        case string((String) -> Void)
        case int((Int) -> Void)
        case choice([String], (String) -> Void)
        case object([String: Field])
        case bool((Bool) -> Void)
        /// A non-empty array of strings.
        case strings(([String]) -> Void)
        /// A nested object the closure applies itself (given the object, its key path and the reader).
        case custom(([String: Any], String, inout FieldReader) throws -> Void)
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
            case .choice(let valid, let set):
                guard let string = value as? String, valid.contains(string) else {
                    throw fail(name, "expected one of: \(valid.joined(separator: ", "))")
                }
                set(string)
            case .object(let nested):
                guard let child = value as? [String: Any] else { throw fail(name, "expected an object") }
                try apply(child, nested, at: name)
            case .bool(let set):
                guard let number = value as? NSNumber, String(cString: number.objCType) == "c" else {
                    throw fail(name, "expected true or false")
                }
                set(number.boolValue)
            case .strings(let set):
                guard let strings = value as? [Any], !strings.isEmpty, strings.allSatisfy({ $0 is String }) else {
                    throw fail(name, "expected a non-empty array of strings")
                }
                set(strings.map { $0 as! String })
            case .custom(let read):
                guard let child = value as? [String: Any] else { throw fail(name, "expected an object") }
                try read(child, name, &self)
            }
        }
    }
}
