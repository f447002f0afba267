#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

// A control request (`docs/PROTOCOL.md`, "Control"): its operations, how each is written and how
// the agent decodes and checks it. The replies are in ControlProtocol.swift.

/// One control request: an operation with its fields, and the caller's optional `actor` text.
///
/// ```swift
/// let request = ControlRequest.setConsent(.denied, for: "advertising")
/// String(decoding: request.encoded(), as: UTF8.self)
/// // {"category":"advertising","op":"set_consent","status":"denied"}
/// ```
///
/// Decoding checks every field the way the agent always has and throws ``ControlRefusal`` with
/// the agent's message (and the valid values, where there is a list) for a request it refuses:
/// an unknown `op`, a field missing or of the wrong type, an unknown status or GDPR field.
public struct ControlRequest: Sendable, Hashable, Codable {
    /// What to do.
    public var operation: Operation
    /// Free text recorded in the consent audit log beside the caller (`actor`; the agent keeps at
    /// most 200 bytes of it). Ignored by ops that change nothing.
    public var actor: String?

    /// A request for `operation`.
    public init(_ operation: Operation, actor: String? = nil) {
        self.operation = operation
        self.actor = actor
    }

    /// The operations of the control socket, with their request fields.
    public enum Operation: Sendable, Hashable {
        /// `status`: the status document (``StatusReply``).
        case status
        /// `metrics`: the agent's metrics in the Prometheus text exposition (``MetricsReply``).
        case metrics
        /// `consent_state`: the consent state (``ConsentUpdate``).
        case consentState
        /// `consent_log`: the newest `limit` audit entries (all when nil), ``ConsentAuditLog``.
        case consentLog(limit: Int?)
        /// `set_tracking` {`enabled`}.
        case setTracking(enabled: Bool)
        /// `set_consent` {`category` (a category or `all`), `status`}.
        case setConsent(category: String, status: ConsentStatus)
        /// `set_persistence` {`status`}.
        case setPersistence(status: ConsentStatus)
        /// `set_gdpr` {`fields`: GDPR field name → value}.
        case setGDPR(fields: [String: GDPRValue])
        /// `enable_features` {`features`}.
        case enableFeatures([String])
        /// `disable_features` {`features`}.
        case disableFeatures([String])
        /// `purge` {`category`, optional: absent means every pending and held event}.
        case purge(category: String?)
        /// `forget` {`user_id`}.
        case forget(userID: String)
        /// `forget_status`: the upstream erasures `forget` recorded, per sink (``ErasureStatusReply``).
        case forgetStatus
        /// `start`: starts delivery on an agent waiting for it.
        case start
        /// `deadletter_replay` {`id`, `sink` (optional when one sink holds `id`)}.
        case deadLetterReplay(id: String, sink: String?)
        /// `quarantine_replay` {`id`, or `all`: true}: judges quarantined events again against the
        /// current quality gate and stores those that pass (``QuarantineReply``). `id` nil: all.
        case quarantineReplay(id: String?)
        /// `quarantine_drop` {`id`, or `all`: true}: deletes quarantined events for good
        /// (``QuarantineReply``). `id` nil: all.
        case quarantineDrop(id: String?)
        /// `whoami`: the caller as the kernel reports it and what the access policy lets it do
        /// (``WhoAmIReply``). Answered to everyone.
        case whoami
        /// `recipients` {`user_id`}: whether each sink received the user's events (``RecipientsReply``).
        case recipients(userID: String)
        /// `reload`: read the configuration again and apply what can change while running, as
        /// SIGHUP does (``ReloadReply``: what was applied, or the key and the problem refused).
        case reload

        /// The `op` string.
        public var name: String {
            switch self {
            case .status: "status"
            case .metrics: "metrics"
            case .consentState: "consent_state"
            case .consentLog: "consent_log"
            case .setTracking: "set_tracking"
            case .setConsent: "set_consent"
            case .setPersistence: "set_persistence"
            case .setGDPR: "set_gdpr"
            case .enableFeatures: "enable_features"
            case .disableFeatures: "disable_features"
            case .purge: "purge"
            case .forget: "forget"
            case .forgetStatus: "forget_status"
            case .start: "start"
            case .deadLetterReplay: "deadletter_replay"
            case .quarantineReplay: "quarantine_replay"
            case .quarantineDrop: "quarantine_drop"
            case .whoami: "whoami"
            case .reload: "reload"
            case .recipients: "recipients"
            }
        }
    }

    /// Every `op` the agent answers, in the order its refusal of an unknown op lists them.
    public static let ops = [
        "status", "deadletter_replay", "quarantine_replay", "quarantine_drop", "consent_state", "consent_log", "set_tracking", "set_consent", "set_persistence", "set_gdpr",
        "enable_features", "disable_features", "purge", "forget", "start", "whoami", "metrics", "forget_status",
        "reload", "recipients",
    ]

    /// The `op` string of ``operation``.
    public var op: String { operation.name }

    // MARK: Requests by name

    /// `status`.
    public static func status() -> Self { .init(.status) }
    /// `metrics`.
    public static func metrics() -> Self { .init(.metrics) }
    /// `consent_state`.
    public static func consentState() -> Self { .init(.consentState) }
    /// `consent_log`, the newest `limit` entries (all when nil).
    public static func consentLog(limit: Int?) -> Self { .init(.consentLog(limit: limit)) }
    /// `set_tracking`.
    public static func setTracking(_ enabled: Bool) -> Self { .init(.setTracking(enabled: enabled)) }
    /// `set_consent` for a category or `"all"`.
    public static func setConsent(_ status: ConsentStatus, for category: String) -> Self {
        .init(.setConsent(category: category, status: status))
    }
    /// `set_persistence`.
    public static func setPersistence(_ status: ConsentStatus) -> Self { .init(.setPersistence(status: status)) }
    /// `set_gdpr` with fields by wire name.
    public static func setGDPR(_ fields: [String: GDPRValue]) -> Self { .init(.setGDPR(fields: fields)) }
    /// `enable_features`.
    public static func enableFeatures(_ features: [String]) -> Self { .init(.enableFeatures(features)) }
    /// `disable_features`.
    public static func disableFeatures(_ features: [String]) -> Self { .init(.disableFeatures(features)) }
    /// `purge`, of one category or (nil) of everything pending.
    public static func purge(category: String?) -> Self { .init(.purge(category: category)) }
    /// `forget`.
    public static func forget(userID: String) -> Self { .init(.forget(userID: userID)) }
    /// `forget_status`.
    public static func forgetStatus() -> Self { .init(.forgetStatus) }
    /// `start`.
    public static func start() -> Self { .init(.start) }
    /// `whoami`.
    public static func whoami() -> Self { .init(.whoami) }
    /// `reload`.
    public static func reload() -> Self { .init(.reload) }
    /// `recipients` of `userID`'s events.
    public static func recipients(userID: String) -> Self { .init(.recipients(userID: userID)) }
    /// `deadletter_replay` of dead letter `id` (of `sink`, needed only when several sinks hold `id`).
    public static func deadLetterReplay(id: String, sink: String? = nil) -> Self { .init(.deadLetterReplay(id: id, sink: sink)) }
    /// `quarantine_replay` of quarantined event `id`, or of every one (nil).
    public static func quarantineReplay(id: String?) -> Self { .init(.quarantineReplay(id: id)) }
    /// `quarantine_drop` of quarantined event `id`, or of every one (nil).
    public static func quarantineDrop(id: String?) -> Self { .init(.quarantineDrop(id: id)) }

    // MARK: Wire form

    /// A field value of a request.
    private enum Value {
        case string(String), bool(Bool), int(Int), strings([String]), object([String: String])
    }

    /// The request's fields by wire name, `op` and `actor` included.
    private var fields: [String: Value] {
        var fields: [String: Value] = ["op": .string(op)]
        if let actor { fields["actor"] = .string(actor) }
        switch operation {
        case .status, .metrics, .consentState, .start, .whoami, .forgetStatus, .reload:
            break
        case .consentLog(let limit):
            if let limit { fields["limit"] = .int(limit) }
        case .setTracking(let enabled):
            fields["enabled"] = .bool(enabled)
        case .setConsent(let category, let status):
            fields["category"] = .string(category)
            fields["status"] = .string(status.rawValue)
        case .setPersistence(let status):
            fields["status"] = .string(status.rawValue)
        case .setGDPR(let values):
            fields["fields"] = .object(values.mapValues(\.rawValue))
        case .enableFeatures(let names), .disableFeatures(let names):
            fields["features"] = .strings(names)
        case .purge(let category):
            if let category { fields["category"] = .string(category) }
        case .forget(let userID), .recipients(let userID):
            fields["user_id"] = .string(userID)
        case .deadLetterReplay(let id, let sink):
            fields["id"] = .string(id)
            if let sink { fields["sink"] = .string(sink) }
        case .quarantineReplay(let id), .quarantineDrop(let id):
            if let id { fields["id"] = .string(id) } else { fields["all"] = .bool(true) }
        }
        return fields
    }

    /// The JSON object sent on the socket: keys in sorted order, no insignificant whitespace
    /// (`{"category":"all","op":"set_consent","status":"denied"}`).
    public func encoded() -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "{")]
        let fields = self.fields
        for (index, key) in fields.keys.sorted().enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            JSONText.appendString(key, to: &out)
            out.append(UInt8(ascii: ":"))
            switch fields[key]! {
            case .string(let text):
                JSONText.appendString(text, to: &out)
            case .bool(let value):
                out += Array((value ? "true" : "false").utf8)
            case .int(let value):
                out += Array(String(value).utf8)
            case .strings(let texts):
                out.append(UInt8(ascii: "["))
                for (index, text) in texts.enumerated() {
                    if index > 0 { out.append(UInt8(ascii: ",")) }
                    JSONText.appendString(text, to: &out)
                }
                out.append(UInt8(ascii: "]"))
            case .object(let values):
                out.append(UInt8(ascii: "{"))
                for (index, name) in values.keys.sorted().enumerated() {
                    if index > 0 { out.append(UInt8(ascii: ",")) }
                    JSONText.appendString(name, to: &out)
                    out.append(UInt8(ascii: ":"))
                    JSONText.appendString(values[name]!, to: &out)
                }
                out.append(UInt8(ascii: "}"))
            }
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// Decodes a request as the agent does, or throws the ``ControlRefusal`` the agent answers
    /// with (`request must be a JSON object with a string field "op"` for anything that is not
    /// such an object).
    public static func decode(json: [UInt8]) throws(ControlRefusal) -> ControlRequest {
        do {
            return try JSONDecoder().decode(ControlRequest.self, from: Data(json))
        } catch let refusal as ControlRefusal {
            throw refusal
        } catch {
            throw ControlRefusal.notARequest
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: Key.self)
        for (key, value) in fields {
            switch value {
            case .string(let text): try object.encode(text, forKey: Key(key))
            case .bool(let flag): try object.encode(flag, forKey: Key(key))
            case .int(let number): try object.encode(number, forKey: Key(key))
            case .strings(let texts): try object.encode(texts, forKey: Key(key))
            case .object(let values): try object.encode(values, forKey: Key(key))
            }
        }
    }

    /// Decodes a request, checking its fields as the agent does; throws ``ControlRefusal``.
    /// Optional fields (`actor`, `limit`, `sink`, `category` of `purge`) may be absent or `null`;
    /// present with another type they are refused, never read as absent.
    public init(from decoder: any Decoder) throws {
        guard let object = try? decoder.container(keyedBy: Key.self),
              let op = try? object.decode(String.self, forKey: "op") else { throw ControlRefusal.notARequest }
        actor = try Self.optional(String.self, "actor", object, "a string")
        operation = try Self.operation(op, object)
    }

    /// The optional field `key`: `nil` when absent or `null`, refused when of another type.
    private static func optional<T: Decodable>(
        _ type: T.Type, _ key: Key, _ object: KeyedDecodingContainer<Key>, _ what: String
    ) throws(ControlRefusal) -> T? {
        guard object.contains(key), (try? object.decodeNil(forKey: key)) != true else { return nil }
        guard let value = try? object.decode(T.self, forKey: key) else {
            throw ControlRefusal("\"\(key.stringValue)\" must be \(what) when present")
        }
        return value
    }

    private static func operation(_ op: String, _ object: KeyedDecodingContainer<Key>) throws(ControlRefusal) -> Operation {
        func string(_ key: Key) -> String? { try? object.decodeIfPresent(String.self, forKey: key) }
        func status(_ key: Key) throws(ControlRefusal) -> ConsentStatus {
            let valid = ConsentStatus.allCases.map(\.rawValue)
            guard let text = string(key) else { throw ControlRefusal("\"\(key.stringValue)\" must be a string", valid: valid) }
            guard let status = ConsentStatus(rawValue: text) else { throw ControlRefusal("unknown status \"\(text)\"", valid: valid) }
            return status
        }
        func names(_ key: Key) throws(ControlRefusal) -> [String] {
            guard let names = try? object.decode([String].self, forKey: key), !names.isEmpty else {
                throw ControlRefusal("\"\(key.stringValue)\" must be a non-empty array of strings")
            }
            return names
        }
        switch op {
        case "status":
            return .status
        case "metrics":
            return .metrics
        case "consent_state":
            return .consentState
        case "consent_log":
            let limit = try optional(Int.self, "limit", object, "a non-negative integer")
            if let limit, limit < 0 { throw ControlRefusal("\"limit\" must be a non-negative integer when present") }
            return .consentLog(limit: limit)
        case "deadletter_replay":
            guard let id = string("id") else {
                throw ControlRefusal("deadletter_replay needs a string field \"id\" naming a dead letter")
            }
            return .deadLetterReplay(id: id, sink: try optional(String.self, "sink", object, "a string"))
        case "quarantine_replay", "quarantine_drop":
            let id = string("id")
            let all = (try? object.decodeIfPresent(Bool.self, forKey: "all")) ?? nil
            guard (id != nil) != (all == true) else {
                throw ControlRefusal("\(op) needs either a string field \"id\" naming a quarantined event or \"all\": true")
            }
            return op == "quarantine_replay" ? .quarantineReplay(id: id) : .quarantineDrop(id: id)
        case "set_tracking":
            guard let enabled = try? object.decode(Bool.self, forKey: "enabled") else {
                throw ControlRefusal("\"enabled\" must be true or false")
            }
            return .setTracking(enabled: enabled)
        case "set_consent":
            guard let category = string("category") else { throw ControlRefusal("\"category\" must be a string") }
            return .setConsent(category: category, status: try status("status"))
        case "set_persistence":
            return .setPersistence(status: try status("status"))
        case "set_gdpr":
            guard let fields = try? object.nestedContainer(keyedBy: Key.self, forKey: "fields"), !fields.allKeys.isEmpty else {
                throw ControlRefusal("\"fields\" must be a non-empty object", valid: GDPRRecord.fieldNames)
            }
            var values: [String: GDPRValue] = [:]
            for key in fields.allKeys {
                let field = key.stringValue
                guard GDPRRecord.fieldNames.contains(field) else {
                    throw ControlRefusal("unknown GDPR field \"\(field)\"", valid: GDPRRecord.fieldNames)
                }
                guard let text = try? fields.decode(String.self, forKey: key), let value = GDPRValue(rawValue: text) else {
                    throw ControlRefusal("\(field) must be one of unset, granted, denied", valid: GDPRValue.allCases.map(\.rawValue))
                }
                values[field] = value
            }
            return .setGDPR(fields: values)
        case "enable_features":
            return .enableFeatures(try names("features"))
        case "disable_features":
            return .disableFeatures(try names("features"))
        case "purge":
            guard object.contains("category"), (try? object.decodeNil(forKey: "category")) != true else { return .purge(category: nil) }
            guard let category = string("category") else { throw ControlRefusal("\"category\" must be a string") }
            return .purge(category: category)
        case "forget":
            guard let user = string("user_id"), !user.isEmpty else { throw ControlRefusal("\"user_id\" must be a non-empty string") }
            return .forget(userID: user)
        case "forget_status":
            return .forgetStatus
        case "recipients":
            guard let user = string("user_id"), !user.isEmpty else { throw ControlRefusal("\"user_id\" must be a non-empty string") }
            return .recipients(userID: user)
        case "start":
            return .start
        case "whoami":
            return .whoami
        case "reload":
            return .reload
        default:
            throw ControlRefusal("unknown op \"\(op)\"", valid: ops)
        }
    }

    /// Any JSON object key.
    private struct Key: CodingKey, ExpressibleByStringLiteral {
        var stringValue: String
        var intValue: Int? { nil }
        init(_ name: String) { stringValue = name }
        init(stringValue: String) { self.stringValue = stringValue }
        init(stringLiteral value: String) { stringValue = value }
        init?(intValue: Int) { nil }
    }
}
