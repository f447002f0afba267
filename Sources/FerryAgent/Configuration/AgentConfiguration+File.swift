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
        // Sinks are read after the rest: their batching and retry default to `delivery`.
        var sinkValue: Any?, sinksValue: Any?
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
            "sink": .raw { sinkValue = $0 },
            "sinks": .raw { sinksValue = $0 },
        ], at: "")
        switch (sinkValue, sinksValue) {
        case (.some, .some):
            throw reader.fail("sink", "give either \"sink\" (one sink) or \"sinks\" (a list), not both")
        case (let single?, nil):
            guard let object = single as? [String: Any] else { throw reader.fail("sink", "expected an object") }
            // The single-sink form keeps its historical name ("file" for the file sink), so an
            // existing cursor file keeps working.
            config.sinks = [try reader.sink(object, at: "sink", name: nil, delivery: config.delivery)]
        case (nil, let list?):
            guard let array = list as? [Any] else { throw reader.fail("sinks", "expected an array of sink objects") }
            guard !array.isEmpty else { throw reader.fail("sinks", "needs at least one sink") }
            var sinks: [SinkConfiguration] = []
            for (index, element) in array.enumerated() {
                let at = "sinks[\(index)]"
                guard let object = element as? [String: Any] else { throw reader.fail(at, "expected an object") }
                let sink = try reader.sink(object, at: at, name: "", delivery: config.delivery)
                if let other = sinks.firstIndex(where: { $0.name == sink.name }) {
                    throw reader.fail(at + ".name", "\"\(sink.name)\" is already the name of sinks[\(other)]; names must be unique")
                }
                sinks.append(sink)
            }
            config.sinks = sinks
        case (nil, nil):
            if config.delivery != base.delivery {
                // The default sink(s) follow the file's delivery defaults.
                for i in config.sinks.indices {
                    config.sinks[i].batch.maxEvents = config.delivery.batchMaxEvents
                    config.sinks[i].batch.maxBytes = config.delivery.batchMaxBytes
                    config.sinks[i].retry.initialMilliseconds = config.delivery.retryInitialMilliseconds
                    config.sinks[i].retry.maxMilliseconds = config.delivery.retryMaxMilliseconds
                }
            }
        }
        do {
            try config.validate()
        } catch let error as AgentError {
            throw AgentError(code: error.code, message: "\(path): \(error.message)")
        }
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

/// A value the field setters of one sink entry share.
private final class SinkDraft {
    var name: String?
    var kind: AgentConfiguration.SinkConfiguration.Kind
    var batch: AgentConfiguration.SinkConfiguration.Batch
    var retry: AgentConfiguration.SinkConfiguration.Retry
    var circuit = AgentConfiguration.SinkConfiguration.Circuit()

    init(kind: AgentConfiguration.SinkConfiguration.Kind, delivery: AgentConfiguration.Delivery) {
        self.kind = kind
        let defaults = AgentConfiguration.SinkConfiguration(name: "", kind: kind, delivery: delivery)
        batch = defaults.batch
        retry = defaults.retry
    }
}

extension FieldReader {
    /// The sink types a file may name, each with its initial settings and its own keys.
    /// A new sink type adds one entry here.
    fileprivate static var sinkKinds: [String: (initial: AgentConfiguration.SinkConfiguration.Kind, keys: (SinkDraft) -> [String: Field])] { [
        "file": (.file(directory: nil, maxFileBytes: 64 << 20), { draft in [
            "directory": .string { directory in
                if case .file(_, let max) = draft.kind { draft.kind = .file(directory: directory, maxFileBytes: max) }
            },
            "maxFileBytes": .int { max in
                if case .file(let directory, _) = draft.kind { draft.kind = .file(directory: directory, maxFileBytes: Int64(max)) }
            },
        ] }),
        // Placeholder until `sink(_:at:name:delivery:)` parses the object (HTTPSinkConfiguration.parse).
        "http": (.http(HTTPSinkConfiguration(url: "")), { _ in [:] }),
        // Likewise (JetStreamSinkConfiguration.fields).
        "jetstream": (.jetstream(JetStreamSinkConfiguration()), { _ in [:] }),
    ] }

    /// One sink object. `name`: `nil` for the single `sink` form (named after its type), `""`
    /// when the object must carry its own `name`.
    fileprivate mutating func sink(
        _ object: [String: Any], at prefix: String, name: String?, delivery: AgentConfiguration.Delivery
    ) throws -> AgentConfiguration.SinkConfiguration {
        let types = Self.sinkKinds.keys.sorted()
        // The single-sink form predates other types: its type defaults to "file".
        guard let typeValue = object["type"] ?? (name == nil ? "file" : nil) else {
            throw fail(prefix + ".type", "missing; expected one of: \(types.joined(separator: ", "))")
        }
        guard let type = typeValue as? String, let kind = Self.sinkKinds[type] else {
            throw fail(prefix + ".type", "expected one of: \(types.joined(separator: ", "))")
        }
        var object = object
        let draft = SinkDraft(kind: kind.initial, delivery: delivery)
        var fields = kind.keys(draft)
        if type == "http" {
            // The HTTP settings have a loader of their own; the common keys stay here.
            let common: Set = ["name", "type", "batch", "retry", "circuit"]
            draft.kind = .http(try HTTPSinkConfiguration.parse(object.filter { !common.contains($0.key) }, path: path, at: prefix))
            object = object.filter { common.contains($0.key) }
        } else if type == "jetstream" {
            let common: Set = ["name", "batch", "retry", "circuit"]
            let box = FieldBox(JetStreamSinkConfiguration())
            var reader = FieldReader(path: path)
            try reader.apply(object.filter { !common.contains($0.key) }, JetStreamSinkConfiguration.fields(box), at: prefix)
            draft.kind = .jetstream(box.value)
            object = object.filter { common.contains($0.key) || $0.key == "type" }
        }
        fields["type"] = .string { _ in }
        if name != nil { fields["name"] = .string { draft.name = $0 } }
        fields["batch"] = .object([
            "maxEvents": .int { draft.batch.maxEvents = $0 },
            "maxBytes": .int { draft.batch.maxBytes = $0 },
            "maxWaitMilliseconds": .int { draft.batch.maxWaitMilliseconds = $0 },
        ])
        fields["retry"] = .object([
            "initialMilliseconds": .int { draft.retry.initialMilliseconds = $0 },
            "maxMilliseconds": .int { draft.retry.maxMilliseconds = $0 },
            "maxElapsedMilliseconds": .int { draft.retry.maxElapsedMilliseconds = $0 },
        ])
        fields["circuit"] = .object([
            "failureThreshold": .int { draft.circuit.failureThreshold = $0 },
            "openMilliseconds": .int { draft.circuit.openMilliseconds = $0 },
        ])
        try apply(object, fields, at: prefix)
        let resolved: String
        if name == nil {
            resolved = type
        } else {
            guard let given = draft.name else { throw fail(prefix + ".name", "missing; every sink needs a unique name") }
            guard AgentConfiguration.SinkConfiguration.isValidName(given) else {
                throw fail(prefix + ".name", "\"\(given)\" is invalid: use 1-64 letters, digits, '-' or '_' (it names the cursor file)")
            }
            resolved = given
        }
        return AgentConfiguration.SinkConfiguration(
            name: resolved, kind: draft.kind, batch: draft.batch, retry: draft.retry, circuit: draft.circuit)
    }
}

/// Applies a JSON object to setters, with precise errors naming the key path. Shared by the
/// loaders of nested configurations (`HTTPSinkConfiguration+File.swift`).
struct FieldReader {
    let path: String

    indirect enum Field {
        case string((String) -> Void)
        case int((Int) -> Void)
        /// Anything: the closure gets the value and its key path and throws its own errors.
        case custom((Any, String) throws -> Void)
        case choice([String], (String) -> Void)
        case object([String: Field])
        /// A JSON `true`/`false` (not 0/1).
        case bool((Bool) -> Void)
        case strings(([String]) throws -> Void)
        /// An object whose keys are free-form and whose values are strings.
        case stringMap(([String: String]) throws -> Void)
        case intMap(([String: Int]) throws -> Void)
        /// An integer or `null`.
        case optionalInt((Int?) -> Void)
        /// Any JSON value, checked by the caller.
        case raw((Any) -> Void)
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
                try checked(name) { try set(strings) }
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
            case .strings(let set):
                guard let strings = value as? [Any], strings.allSatisfy({ $0 is String }) else {
                    throw fail(name, "expected an array of strings")
                }
                try checked(name) { try set(strings.map { $0 as! String }) }
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
            case .raw(let set):
                set(value)
            }
        }
    }
}
