import FerryProtocol
import FerryQuality
import FerryStorage
import Foundation
import Logging

extension AgentConfiguration {
    /// Loads a configuration from a JSON file, starting from the defaults: only the fields present
    /// in the file change. Unknown keys are an error, so a typo never silently falls back to a
    /// default. See `daemon/ferryd.example.json`.
    ///
    /// `sinkKinds` are the sink types the file may name (none by default: pass the registry of
    /// the sink modules linked, as `ferryd` does); any other `type` is an error listing the known
    /// ones. A file that names no sink, over a `base` without sinks, gets the registry's default
    /// sink (``SinkRegistry/defaultSinks(delivery:)``). `ingestPathKinds` are the ingest paths
    /// whose tables the file may have (`http` for the local HTTP API): each kind reads its own.
    public static func load(
        fromFile path: String, base: AgentConfiguration = AgentConfiguration(), sinkKinds: SinkRegistry = SinkRegistry(),
        ingestPathKinds: IngestPathRegistry = .none
    ) throws -> AgentConfiguration {
        guard let bytes = try FileIO.readFile(path, followSymlinks: true) else {
            throw AgentError(code: .configuration, message: "configuration file \(path) does not exist")
        }
        return try load(json: bytes, path: path, base: base, sinkKinds: sinkKinds, ingestPathKinds: ingestPathKinds)
    }

    /// Loads a configuration from the contents of a configuration file (what
    /// ``load(fromFile:base:sinkKinds:ingestPathKinds:)`` does once it has read the file); `path`
    /// names the file in errors. Throws ``AgentError`` with code ``AgentError/Code/configuration``
    /// for anything it refuses.
    public static func load(
        json bytes: [UInt8], path: String, base: AgentConfiguration = AgentConfiguration(), sinkKinds: SinkRegistry = SinkRegistry(),
        ingestPathKinds: IngestPathRegistry = .none
    ) throws -> AgentConfiguration {
        let object: Any
        do {
            object = try JSONSerialization.jsonObject(with: Data(bytes))
        } catch {
            throw AgentError(code: .configuration, message: "configuration file \(path) is not valid JSON: \(JSONSyntaxError(error, in: bytes))")
        }
        guard let root = object as? [String: Any] else {
            throw AgentError(code: .configuration, message: "configuration file \(path) must hold a JSON object")
        }
        // The mode comes first: it picks the defaults of the directories and the access policy
        // that the rest of the file may override.
        var config = base
        if let modeName = root["mode"] {
            guard let name = modeName as? String, let mode = Mode(rawValue: name) else {
                throw AgentError(code: .configuration, message: "\(path): mode: expected one of \(Mode.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            if mode != base.mode {
                var switched = AgentConfiguration(mode: mode)
                switched.sinks = base.sinks
                switched.consent = base.consent
                config = switched
            }
        }
        var reader = FieldReader(path: path)
        // Every key is read even after an error, so one run reports every wrong key path.
        reader.collectsErrors = true
        // Sinks are read after the rest: their batching and retry default to `delivery`.
        var sinkValue: Any?, sinksValue: Any?
        var fields: [String: FieldReader.Field] = [
            // Free text for people (the examples explain themselves with it); ignored.
            "comment": .string { _ in },
            "mode": .raw { _ in },
            // A scope given in the file replaces the mode's default rule for it entirely.
            "access": .object([
                "ingest": .custom { value, at in config.access.ingest = try Self.accessRule(value, at: at, file: path) },
                "control": .custom { value, at in config.access.control = try Self.accessRule(value, at: at, file: path) },
                "events": .custom { value, at in config.access.events = try Self.accessRule(value, at: at, file: path) },
            ]),
            "runtimeDirectory": .string { config.runtimeDirectory = $0 },
            "dataDirectory": .string { config.dataDirectory = $0 },
            "maxEventBytes": .int { config.maxEventBytes = $0 },
            "logLevel": .choice(Logger.Level.allCases.map(\.rawValue)) { config.logLevel = Logger.Level(rawValue: $0)! },
            "log": .object([
                "segmentMaxBytes": .int { config.log.segmentMaxBytes = Int64($0) },
                "retentionMaxBytes": .int { config.log.retentionMaxBytes = Int64($0) },
                "uidSharePercent": .int { config.log.uidSharePercent = $0 },
                "commitDelayMicroseconds": .int { config.log.commitDelayMicroseconds = $0 },
                "commitSiblings": .int { config.log.commitSiblings = $0 },
                "fullPolicy": .choice(LogConfiguration.FullPolicy.allCases.map(\.rawValue)) {
                    config.log.fullPolicy = LogConfiguration.FullPolicy(rawValue: $0)!
                },
            ]),
            "dedup": .object([
                "maxEntries": .int { config.dedup.maxEntries = $0 },
                "maxAgeSeconds": .int { config.dedup.maxAgeSeconds = $0 },
                "sessionIdleSeconds": .int { config.dedup.sessionIdleSeconds = $0 },
                "maxSessions": .int { config.dedup.maxSessions = $0 },
                "lossGraceSeconds": .int { config.dedup.lossGraceSeconds = $0 },
            ]),
            "delivery": .object([
                "batchMaxEvents": .int { config.delivery.batchMaxEvents = $0 },
                "batchMaxBytes": .int { config.delivery.batchMaxBytes = $0 },
                "retryInitialMilliseconds": .int { config.delivery.retryInitialMilliseconds = $0 },
                "retryMaxMilliseconds": .int { config.delivery.retryMaxMilliseconds = $0 },
            ]),
            "consent": .object(Self.consentFields { change in try change(&config.consent) }),
            "metrics": .object([
                "listen": .string { config.metrics.listen = $0 },
            ]),
            "quality": .object([
                "plan": .string { config.quality.configuration.planPath = $0 },
                "onViolation": .choice(ViolationAction.allCases.map(\.rawValue)) {
                    config.quality.configuration.onViolation = ViolationAction(rawValue: $0)!
                },
                "allowUnplanned": .bool { config.quality.configuration.allowUnplanned = $0 },
                "quarantineMaxBytes": .int { config.quality.quarantineMaxBytes = $0 },
            ]),
            "redact": .custom { value, at in config.redact = try Self.redaction(value, at: at, file: path) },
            "sink": .raw { sinkValue = $0 },
            "sinks": .raw { sinksValue = $0 },
        ]
        // The table of each registered ingest path kind that has one (`http`), read by the kind: its errors
        // come in the key order with the others, each naming its key path.
        for kind in ingestPathKinds.kinds where kind.hasSettings && fields[kind.name] == nil {
            fields[kind.name] = .custom { value, at in
                var table = FieldReader(path: path)
                table.collectsErrors = true
                guard let object = value as? [String: Any] else { throw table.fail(at, "expected an object") }
                try kind.load(object, &config, &table, at)
                if !table.errors.isEmpty {
                    throw AgentError(code: .configuration, message: table.errors.map(\.message).joined(separator: "\n"))
                }
            }
        }
        try reader.apply(root, fields, at: "")
        switch (sinkValue, sinksValue) {
        case (.some, .some):
            throw reader.fail("sink", "give either \"sink\" (one sink) or \"sinks\" (a list), not both")
        case (let single?, nil):
            guard let object = single as? [String: Any] else { throw reader.fail("sink", "expected an object") }
            // The single-sink form keeps its historical name ("file" for the file sink), so an
            // existing cursor file keeps working.
            do {
                config.sinks = [try reader.sink(object, at: "sink", name: nil, delivery: config.delivery, kinds: sinkKinds)]
            } catch let error as AgentError {
                reader.record(error)
            }
        case (nil, let list?):
            guard let array = list as? [Any] else { throw reader.fail("sinks", "expected an array of sink objects") }
            guard !array.isEmpty else { throw reader.fail("sinks", "needs at least one sink") }
            var sinks: [SinkConfiguration] = []
            for (index, element) in array.enumerated() {
                let at = "sinks[\(index)]"
                guard let object = element as? [String: Any] else { throw reader.fail(at, "expected an object") }
                let sink: SinkConfiguration
                do {
                    sink = try reader.sink(object, at: at, name: "", delivery: config.delivery, kinds: sinkKinds)
                } catch let error as AgentError {
                    reader.record(error)
                    continue
                }
                if let other = sinks.firstIndex(where: { $0.name == sink.name }) {
                    throw reader.fail(at + ".name", "\"\(sink.name)\" is already the name of sinks[\(other)]; names must be unique")
                }
                sinks.append(sink)
            }
            config.sinks = sinks
        case (nil, nil) where config.sinks.isEmpty:
            config.sinks = sinkKinds.defaultSinks(delivery: config.delivery)
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
        // Every error of the file at once: the keys', then the values' (checked on what was read).
        let errors = reader.errors.map(\.message) + config.problems().map { "\(path): \($0)" }
        if !errors.isEmpty {
            throw AgentError(code: .configuration, message: errors.joined(separator: "\n"))
        }
        return config
    }

    /// The `redact` table, parsed by FerryQuality from its JSON text; its error names the key.
    private static func redaction(_ value: Any, at key: String, file: String) throws -> Redaction {
        guard value is [String: Any], let data = try? JSONSerialization.data(withJSONObject: value) else {
            throw AgentError(code: .configuration, message: "\(file): \(key): expected an object")
        }
        do {
            return Redaction(try RedactionConfiguration(json: Array(data)))
        } catch {
            // The error names its key path itself (`redact: rules[0].path: …`).
            throw AgentError(code: .configuration, message: "\(file): \(error)")
        }
    }

    /// One scope of the `access` section: `users` and `groups` (names or numeric ids, `"*"`
    /// among the users for everyone); what it leaves out is empty.
    private static func accessRule(_ value: Any, at path: String, file: String) throws -> AccessPolicy.Rule {
        // A reader of its own: the file's reader is busy applying the section this is in.
        var reader = FieldReader(path: file)
        guard let object = value as? [String: Any] else { throw reader.fail(path, "expected an object with \"users\" and/or \"groups\"") }
        var rule = AccessPolicy.Rule()
        try reader.apply(object, [
            "users": .strings { rule.users = $0 },
            "groups": .strings { rule.groups = $0 },
        ], at: path)
        for (key, names) in [("users", rule.users), ("groups", rule.groups)] where names.contains(where: \.isEmpty) {
            throw reader.fail(path + "." + key, "names must not be empty")
        }
        return rule
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

/// The keys every sink object has, whatever its type.
private let sharedSinkKeys = ["name", "type", "batch", "retry", "circuit", "disclose", "requiresConsent", "route"]

extension FieldReader {
    /// One sink object. `name`: `nil` for the single `sink` form (named after its type), `""`
    /// when the object must carry its own `name`. The keys of its type are read by the
    /// registered ``SinkKind``; the shared keys here.
    fileprivate mutating func sink(
        _ object: [String: Any], at prefix: String, name: String?, delivery: AgentConfiguration.Delivery, kinds: SinkRegistry
    ) throws -> AgentConfiguration.SinkConfiguration {
        let types = kinds.types
        // The single-sink form predates other types: its type defaults to "file".
        guard let typeValue = object["type"] ?? (name == nil ? "file" : nil) else {
            throw fail(prefix + ".type", "missing; expected one of: \(types.joined(separator: ", "))")
        }
        guard let type = typeValue as? String, let kind = kinds.kinds[type] else {
            throw fail(prefix + ".type", "expected one of: \(types.joined(separator: ", "))")
        }
        sharedKeys[prefix] = sharedSinkKeys
        defer { sharedKeys[prefix] = nil }
        let settings = try kind.load(object.filter { !sharedSinkKeys.contains($0.key) }, &self, prefix)

        let defaults = AgentConfiguration.SinkConfiguration(name: "", settings: settings, delivery: delivery)
        let draft = FieldBox(defaults)
        var given: String?
        var fields: [String: Field] = [
            "type": .string { _ in },
            "batch": .object([
                "maxEvents": .int { draft.value.batch.maxEvents = $0 },
                "maxBytes": .int { draft.value.batch.maxBytes = $0 },
                "maxWaitMilliseconds": .int { draft.value.batch.maxWaitMilliseconds = $0 },
            ]),
            "retry": .object([
                "initialMilliseconds": .int { draft.value.retry.initialMilliseconds = $0 },
                "maxMilliseconds": .int { draft.value.retry.maxMilliseconds = $0 },
                "maxElapsedMilliseconds": .int { draft.value.retry.maxElapsedMilliseconds = $0 },
            ]),
            "circuit": .object([
                "failureThreshold": .int { draft.value.circuit.failureThreshold = $0 },
                "openMilliseconds": .int { draft.value.circuit.openMilliseconds = $0 },
            ]),
            "disclose": .object([
                "origin": .bool { draft.value.disclose.origin = $0 },
                "process": .bool { draft.value.disclose.process = $0 },
                "dropContext": .strings { draft.value.disclose.dropContext = $0 },
                "anonymousId": .bool { draft.value.disclose.anonymousID = $0 },
            ]),
            "requiresConsent": .strings { draft.value.requiresConsent = $0 },
            "route": .object([
                "include": .object(Self.routeMatch { change in
                    if var match = draft.value.route?.include { change(&match); draft.value.route?.include = match }
                }),
                "exclude": .object(Self.routeMatch { change in
                    if var match = draft.value.route?.exclude { change(&match); draft.value.route?.exclude = match }
                }),
            ]),
        ]
        // A `route` (or a side of it) given is there even when empty: the check refuses `{}`.
        if let route = object["route"] as? [String: Any] {
            typealias Match = AgentConfiguration.SinkConfiguration.Match
            draft.value.route = .init(include: route["include"] is [String: Any] ? Match() : nil,
                                      exclude: route["exclude"] is [String: Any] ? Match() : nil)
        }
        if name != nil { fields["name"] = .string { given = $0 } }
        try apply(object.filter { sharedSinkKeys.contains($0.key) }, fields, at: prefix)
        if name == nil {
            draft.value.name = type
        } else {
            guard let given else { throw fail(prefix + ".name", "missing; every sink needs a unique name") }
            guard AgentConfiguration.SinkConfiguration.isValidName(given) else {
                throw fail(prefix + ".name", "\"\(given)\" is invalid: use 1-64 letters, digits, '-' or '_' (it names the cursor file)")
            }
            draft.value.name = given
        }
        return draft.value
    }
}

extension FieldReader {
    /// The keys of one side of a sink's `route`; `update` changes that side.
    fileprivate static func routeMatch(
        _ update: @escaping ((inout AgentConfiguration.SinkConfiguration.Match) -> Void) -> Void
    ) -> [String: Field] {
        [
            "types": .strings { list in update { $0.types = list } },
            "names": .strings { list in update { $0.names = list } },
            "categories": .strings { list in update { $0.categories = list } },
            "sources": .strings { list in update { $0.sources = list } },
        ]
    }
}

/// Applies a JSON object to setters, with precise errors naming the key path: the reader of the
/// agent's configuration file, handed to each ``SinkKind`` for the keys of its sink type.
///
/// ```swift
/// try fields.apply(object, [
///     "url": .string { settings.url = $0 },
///     "gzip": .bool { settings.gzip = $0 },
/// ], at: keyPath)
/// ```
public struct FieldReader {
    /// The configuration file, named in every error.
    public let path: String
    /// Keys valid at a key path besides those of the table applied there (a sink object's
    /// shared keys while its type's keys are read), listed in unknown-key errors.
    fileprivate var sharedKeys: [String: [String]] = [:]
    /// When set, ``apply(_:_:at:)`` records a wrong key in ``errors`` and goes on with the next
    /// one instead of throwing (the loader sets it, to report every error at once).
    public var collectsErrors = false
    /// The errors recorded while ``collectsErrors`` is set, in the order found.
    public private(set) var errors: [AgentError] = []

    /// Records `error` with the others (for errors a caller finds outside ``apply(_:_:at:)``).
    public mutating func record(_ error: AgentError) {
        errors.append(error)
    }

    /// A reader of the file at `path`.
    public init(path: String) {
        self.path = path
    }

    /// What a key accepts and where its value goes.
    public indirect enum Field {
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

    /// An error for the key at `key` (its whole key path) in the file.
    public func fail(_ key: String, _ message: String) -> AgentError {
        AgentError(code: .configuration, message: "\(path): \(key): \(message)")
    }

    /// Applies every key of `object` (at key path `prefix`) to its entry in `fields`; a key
    /// with no entry, or a value of the wrong type, is an error naming its key path.
    public mutating func apply(_ object: [String: Any], _ fields: [String: Field], at prefix: String) throws {
        for (key, value) in object.sorted(by: { $0.key < $1.key }) {
            let name = prefix.isEmpty ? key : prefix + "." + key
            do {
                try apply(key: key, value: value, name: name, fields, at: prefix)
            } catch let error as AgentError where collectsErrors {
                errors.append(error)
            }
        }
    }

    private mutating func apply(key: String, value: Any, name: String, _ fields: [String: Field], at prefix: String) throws {
        guard let field = fields[key] else {
            let valid = Set(fields.keys).union(sharedKeys[prefix] ?? [])
            throw fail(name, "unknown key; valid keys here: \(valid.sorted().joined(separator: ", "))")
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

/// A value the setters of a ``FieldReader`` table write into (they are escaping closures, so
/// they cannot capture an `inout` parameter).
public final class FieldBox<Value> {
    /// The value being filled in.
    public var value: Value
    /// A box holding `value`.
    public init(_ value: Value) { self.value = value }
}

/// Where a JSON text stops parsing, for people: `line 3, column 8: Invalid value` (Foundation's
/// parser says only the byte offset, "around character 17", or nothing at the end of the text).
struct JSONSyntaxError: CustomStringConvertible {
    /// 1-based line and column (in bytes) of the offending byte.
    let line: Int, column: Int
    /// The parser's words, without its offset.
    let reason: String

    init(_ error: any Error, in bytes: [UInt8]) {
        let debug = ((error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String) ?? error.localizedDescription
        var offset = bytes.count
        var reason = debug
        if let range = debug.range(of: " around character ") {
            offset = Int(debug[range.upperBound...].prefix { $0.isNumber }) ?? offset
            reason = String(debug[..<range.lowerBound])
        }
        (line, column) = Self.position(of: min(offset, bytes.count), in: bytes)
        self.reason = reason.hasSuffix(".") ? String(reason.dropLast()) : reason
    }

    /// The 1-based line and column of byte `offset`.
    static func position(of offset: Int, in bytes: [UInt8]) -> (line: Int, column: Int) {
        var line = 1, column = 1
        for byte in bytes[..<offset] {
            if byte == UInt8(ascii: "\n") { line += 1; column = 1 } else { column += 1 }
        }
        return (line, column)
    }

    var description: String { "line \(line), column \(column): \(reason)" }
}
