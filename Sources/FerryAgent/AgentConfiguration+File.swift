import Foundation
import FerryProtocol

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
            "consent": .object(Self.consentFields { change in try change(&config.consent) }),
            "sink": .object([
                "type": .choice(["file"]) { _ in },
                "directory": .string { directory in
                    if case .file(_, let max) = config.sink { config.sink = .file(directory: directory, maxFileBytes: max) }
                },
                "maxFileBytes": .int { max in
                    if case .file(let directory, _) = config.sink { config.sink = .file(directory: directory, maxFileBytes: Int64(max)) }
                },
            ]),
        ], at: "")
        try config.validate()
        return config
    }

    /// The `consent` section. `update` applies one change to the configuration being loaded.
    private static func consentFields(
        _ update: @escaping ((inout ConsentConfiguration) throws -> Void) throws -> Void
    ) -> [String: FieldReader.Field] {
        func status(_ text: String) throws -> ConsentStatus {
            guard let status = ConsentStatus(rawValue: text) else {
                throw AgentError(code: .configuration, message: "unknown status \"\(text)\"; valid: \(ConsentStatus.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return status
        }
        return [
            "networkTracking": .bool { value in try? update { $0.networkTracking = value } },
            "trackingInitial": .bool { value in try? update { $0.trackingInitial = value } },
            "autoStart": .bool { value in try? update { $0.autoStart = value } },
            "resetEnabledFeatures": .bool { value in try? update { $0.resetEnabledFeatures = value } },
            "categories": .intMap { map in
                try update { consent in
                    for (name, code) in map {
                        guard (0...255).contains(code) else {
                            throw AgentError(code: .configuration, message: "\(name): code must be 16-254")
                        }
                        consent.categories[name] = UInt8(code)
                    }
                    consent.enabledFeatures.formUnion(map.keys)
                }
            },
            "typeCategories": .stringMap { map in try update { $0.typeCategories.merge(map) { $1 } } },
            "enabledFeatures": .strings { names in try update { $0.enabledFeatures = try $0.features(names) } },
            "defaultConsent": .choice(ConsentStatus.allCases.map(\.rawValue)) { text in
                try? update { $0.defaultConsent = ConsentStatus(rawValue: text)! }
            },
            "initialConsent": .stringMap { map in
                try update { consent in
                    for (name, text) in map { consent.initialConsent[name] = try status(text) }
                }
            },
            "initialPersistence": .choice(ConsentStatus.allCases.map(\.rawValue)) { text in
                try? update { $0.initialPersistence = ConsentStatus(rawValue: text)! }
            },
            "undetermined": .object([
                "policy": .choice(ConsentConfiguration.Undetermined.Policy.allCases.map(\.rawValue)) { text in
                    try? update { $0.undetermined.policy = .init(rawValue: text)! }
                },
                "allowTypes": .strings { names in
                    try update { consent in
                        consent.undetermined.allowTypes = Set(try names.map { name in
                            guard let type = EventType(name: name) else {
                                throw AgentError(code: .configuration, message: "unknown event type \"\(name)\"; valid: \(EventType.allCases.map(\.description).joined(separator: ", "))")
                            }
                            return type
                        })
                    }
                },
                "maxHoldAgeSeconds": .optionalInt { value in try? update { $0.undetermined.maxHoldAgeSeconds = value } },
            ]),
        ]
    }
}

/// Applies a JSON object to setters, with precise errors naming the key path.
private struct FieldReader {
    let path: String

    indirect enum Field {
        case string((String) -> Void)
        case int((Int) -> Void)
        case choice([String], (String) -> Void)
        case object([String: Field])
        case bool((Bool) -> Void)
        case strings(([String]) throws -> Void)
        case stringMap(([String: String]) throws -> Void)
        case intMap(([String: Int]) throws -> Void)
        /// An integer or `null`.
        case optionalInt((Int?) -> Void)
    }

    private func integer(_ value: Any) -> Int? {
        // On Linux 0 and 1 also cast to Bool; the objCType tells a real boolean ("c").
        guard let number = value as? NSNumber, String(cString: number.objCType) != "c",
              number.doubleValue == number.doubleValue.rounded() else { return nil }
        return number.intValue
    }

    private func checked(_ name: String, _ body: () throws -> Void) throws {
        do {
            try body()
        } catch let error as AgentError {
            throw fail(name, error.message)
        }
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
                guard let strings = value as? [Any], strings.allSatisfy({ $0 is String }) else {
                    throw fail(name, "expected an array of strings")
                }
                try checked(name) { try set(strings.map { $0 as! String }) }
            case .stringMap(let set):
                guard let map = value as? [String: Any], map.values.allSatisfy({ $0 is String }) else {
                    throw fail(name, "expected an object of strings")
                }
                try checked(name) { try set(map.mapValues { $0 as! String }) }
            case .intMap(let set):
                guard let map = value as? [String: Any] else { throw fail(name, "expected an object of integers") }
                var ints: [String: Int] = [:]
                for (key, raw) in map {
                    guard let int = integer(raw) else { throw fail(name + "." + key, "expected an integer") }
                    ints[key] = int
                }
                try checked(name) { try set(ints) }
            case .optionalInt(let set):
                if value is NSNull {
                    set(nil)
                } else {
                    guard let int = integer(value) else { throw fail(name, "expected an integer or null") }
                    set(int)
                }
            }
        }
    }
}
