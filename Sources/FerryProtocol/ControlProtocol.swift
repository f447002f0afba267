#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

// The control protocol (`docs/PROTOCOL.md`, "Control"): one JSON object per request, with a string
// field `op`, and one JSON object per reply, `{"ok": true, …}` or `{"ok": false, "error": …}`.
// These types are its only definition: the agent decodes requests and encodes replies with them,
// the client library and the CLI encode requests and decode replies with them.

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
        /// `start`: starts delivery on an agent waiting for it.
        case start
        /// `deadletter_replay` {`id`, `sink` (optional when one sink holds `id`)}.
        case deadLetterReplay(id: String, sink: String?)
        /// `whoami`: the caller as the kernel reports it and what the access policy lets it do
        /// (``WhoAmIReply``). Answered to everyone.
        case whoami

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
            case .start: "start"
            case .deadLetterReplay: "deadletter_replay"
            case .whoami: "whoami"
            }
        }
    }

    /// Every `op` the agent answers, in the order its refusal of an unknown op lists them.
    public static let ops = [
        "status", "deadletter_replay", "consent_state", "consent_log", "set_tracking", "set_consent", "set_persistence", "set_gdpr",
        "enable_features", "disable_features", "purge", "forget", "start", "whoami", "metrics",
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
    /// `start`.
    public static func start() -> Self { .init(.start) }
    /// `whoami`.
    public static func whoami() -> Self { .init(.whoami) }
    /// `deadletter_replay` of dead letter `id` (of `sink`, needed only when several sinks hold `id`).
    public static func deadLetterReplay(id: String, sink: String? = nil) -> Self { .init(.deadLetterReplay(id: id, sink: sink)) }

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
        case .status, .metrics, .consentState, .start, .whoami:
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
        case .forget(let userID):
            fields["user_id"] = .string(userID)
        case .deadLetterReplay(let id, let sink):
            fields["id"] = .string(id)
            if let sink { fields["sink"] = .string(sink) }
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
        case "start":
            return .start
        case "whoami":
            return .whoami
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

// MARK: - Replies

/// A refused request: the reply `{"ok": false, "error": message, "valid": […]}` (`valid`, the
/// accepted values of the field the message names, only when there is such a list).
public struct ControlRefusal: Error, Sendable, Hashable, Codable, CustomStringConvertible {
    /// Why the agent refused.
    public var message: String
    /// The accepted values, when the refusal is about a value with a fixed set (may be empty).
    public var valid: [String]
    /// A machine-readable reason, when there is one: ``accessDenied`` (`"access_denied"`).
    public var code: String?

    /// The ``code`` of a refusal by the access policy.
    public static let accessDenied = "access_denied"

    /// A refusal with `message`, the accepted values and a code.
    public init(_ message: String, valid: [String] = [], code: String? = nil) {
        self.message = message
        self.valid = valid
        self.code = code
    }

    /// The refusal of a request that is not a JSON object with a string field `op`.
    public static let notARequest = ControlRefusal("request must be a JSON object with a string field \"op\"")


    /// Whether the access policy turned the caller away: `code` is `access_denied`, or (from an
    /// agent that sends no code) the message starts with "access denied".
    public var isAccessDenied: Bool {
        code == Self.accessDenied || message.lowercased().hasPrefix("access denied")
    }

    public var description: String { message }

    private enum CodingKeys: String, CodingKey { case ok, error, valid, code }

    /// Decodes a refusal; a missing `error` reads as "no reason given", a missing `valid` as [].
    public init(from decoder: any Decoder) throws {
        let object = try decoder.container(keyedBy: CodingKeys.self)
        message = try object.decodeIfPresent(String.self, forKey: .error) ?? "no reason given"
        valid = try object.decodeIfPresent([String].self, forKey: .valid) ?? []
        code = try? object.decodeIfPresent(String.self, forKey: .code)
    }

    public func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: CodingKeys.self)
        try object.encode(false, forKey: .ok)
        try object.encode(message, forKey: .error)
        if !valid.isEmpty { try object.encode(valid, forKey: .valid) }
        if let code { try object.encode(code, forKey: .code) }
    }
}

/// The reply to `whoami`: the caller as the kernel reported it when it connected (`SO_PEERCRED`)
/// and what the agent's access policy lets it do (`{"ok":true,"uid":1000,"gid":1000,"pid":4242,
/// "mode":"system","ingest":true,"control":false,"events":false}`).
public struct WhoAmIReply: Sendable, Hashable, Codable {
    /// The caller's uid, gid and pid; nil when the kernel did not say.
    public var uid: UInt32?
    public var gid: UInt32?
    public var pid: Int32?
    /// `user` or `system`.
    public var mode: String
    /// Whether the caller may send events, make changes over the control socket, and subscribe
    /// to the bus.
    public var ingest: Bool
    public var control: Bool
    public var events: Bool

    /// Creates a reply.
    public init(uid: UInt32?, gid: UInt32?, pid: Int32?, mode: String, ingest: Bool, control: Bool, events: Bool) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.mode = mode
        self.ingest = ingest
        self.control = control
        self.events = events
    }

    private enum CodingKeys: String, CodingKey { case ok, uid, gid, pid, mode, ingest, control, events }

    public init(from decoder: any Decoder) throws {
        let object = try decoder.container(keyedBy: CodingKeys.self)
        uid = try object.decodeIfPresent(UInt32.self, forKey: .uid)
        gid = try object.decodeIfPresent(UInt32.self, forKey: .gid)
        pid = try object.decodeIfPresent(Int32.self, forKey: .pid)
        mode = try object.decode(String.self, forKey: .mode)
        ingest = try object.decode(Bool.self, forKey: .ingest)
        control = try object.decode(Bool.self, forKey: .control)
        events = try object.decode(Bool.self, forKey: .events)

    }

    public func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: CodingKeys.self)
        try object.encode(true, forKey: .ok)
        try object.encodeIfPresent(uid, forKey: .uid)
        try object.encodeIfPresent(gid, forKey: .gid)
        try object.encodeIfPresent(pid, forKey: .pid)
        try object.encode(mode, forKey: .mode)
        try object.encode(ingest, forKey: .ingest)
        try object.encode(control, forKey: .control)
        try object.encode(events, forKey: .events)
    }
}

/// The reply to `metrics`: `{"ok":true,"content_type":"text/plain; version=0.0.4","text":"…"}`,
/// the agent's metrics in the Prometheus text exposition (read them with
/// `FerryMetricSamples.MetricSamples`, or `samples` there).
public struct MetricsReply: Sendable, Hashable, Codable {
    /// The exposition.
    public var text: String
    /// Its media type, `text/plain; version=0.0.4`.
    public var contentType: String

    /// The media type of the Prometheus text exposition.
    public static let prometheusContentType = "text/plain; version=0.0.4"

    /// A reply carrying `text`.
    public init(text: String, contentType: String = MetricsReply.prometheusContentType) {
        self.text = text
        self.contentType = contentType
    }

    private enum CodingKeys: String, CodingKey { case ok, text, contentType = "content_type" }

    public init(from decoder: any Decoder) throws {
        let object = try decoder.container(keyedBy: CodingKeys.self)
        text = try object.decode(String.self, forKey: .text)
        contentType = try object.decodeIfPresent(String.self, forKey: .contentType) ?? Self.prometheusContentType
    }

    public func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: CodingKeys.self)
        try object.encode(true, forKey: .ok)
        try object.encode(text, forKey: .text)
        try object.encode(contentType, forKey: .contentType)
    }
}

/// The `ok` field every reply carries: whether to read the rest as the op's result or as a
/// ``ControlRefusal``.
package struct ControlReplyHeader: Sendable, Hashable, Decodable {
    package var ok: Bool
}

/// The reply to `consent_state` and to every consent change: the whole consent state and, when the
/// change erased events, how many (`{"ok":true,"consent":{…},"purged":{"queued":7,"held":2}}`);
/// `start` adds `"delivery_started": true`.
public struct ConsentUpdate: Sendable, Hashable, Codable {
    /// The whole consent state after the change.
    public var consent: ConsentSnapshot
    /// What the change erased (denying a category, disabling features, GDPR data usage denied,
    /// `purge`, `forget`); nil when nothing was purged.
    public var purged: PurgeReport?
    /// `true` in the reply to `start`; nil otherwise.
    public var deliveryStarted: Bool?

    /// Creates an update.
    public init(consent: ConsentSnapshot, purged: PurgeReport? = nil, deliveryStarted: Bool? = nil) {
        self.consent = consent
        self.purged = purged
        self.deliveryStarted = deliveryStarted
    }

    private enum CodingKeys: String, CodingKey { case ok, consent, purged, deliveryStarted = "delivery_started" }

    public init(from decoder: any Decoder) throws {
        let object = try decoder.container(keyedBy: CodingKeys.self)
        consent = try object.decode(ConsentSnapshot.self, forKey: .consent)
        purged = try object.decodeIfPresent(PurgeReport.self, forKey: .purged)
        deliveryStarted = try object.decodeIfPresent(Bool.self, forKey: .deliveryStarted)
    }

    public func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: CodingKeys.self)
        try object.encode(true, forKey: .ok)
        try object.encode(consent, forKey: .consent)
        try object.encodeIfPresent(purged, forKey: .purged)
        try object.encodeIfPresent(deliveryStarted, forKey: .deliveryStarted)
    }
}

/// The `purged` field of a `purge`/`forget` reply, read without the rest of the reply (an absent
/// `purged` means nothing was erased).
package struct PurgeReply: Sendable, Hashable, Codable {
    package var purged: PurgeReport?

    package init(purged: PurgeReport?) { self.purged = purged }

    /// What was erased (zero when the reply has no `purged`).
    package var report: PurgeReport { purged ?? PurgeReport(queued: 0, held: 0) }

    private enum CodingKeys: String, CodingKey { case ok, purged }

    package init(from decoder: any Decoder) throws {
        purged = try decoder.container(keyedBy: CodingKeys.self).decodeIfPresent(PurgeReport.self, forKey: .purged)
    }

    package func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: CodingKeys.self)
        try object.encode(true, forKey: .ok)
        try object.encodeIfPresent(purged, forKey: .purged)
    }
}

/// The consent audit log as served by `consent_log`
/// (`{"ok":true,"entries":[…],"verified":true}`, with `problem` when not verified).
public struct ConsentAuditLog: Sendable, Hashable, Codable {
    /// The entries asked for, oldest first.
    public var entries: [AuditEntry]
    /// Whether the agent verified the whole hash chain (every entry's `prev` is the previous
    /// entry's `hash`, and every `hash` matches its entry).
    public var verified: Bool
    /// The first broken link, when not verified.
    public var problem: String?

    /// Creates a log.
    public init(entries: [AuditEntry], verified: Bool, problem: String? = nil) {
        self.entries = entries
        self.verified = verified
        self.problem = problem
    }

    private enum CodingKeys: String, CodingKey { case ok, entries, verified, problem }

    public init(from decoder: any Decoder) throws {
        let object = try decoder.container(keyedBy: CodingKeys.self)
        entries = try object.decode([AuditEntry].self, forKey: .entries)
        verified = try object.decode(Bool.self, forKey: .verified)
        problem = try object.decodeIfPresent(String.self, forKey: .problem)
    }

    public func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: CodingKeys.self)
        try object.encode(true, forKey: .ok)
        try object.encode(entries, forKey: .entries)
        try object.encode(verified, forKey: .verified)
        try object.encodeIfPresent(problem, forKey: .problem)
    }
}

/// The reply to `deadletter_replay`: `{"ok":true,"sink","id","events"}` once the sink took the
/// batch, or `{"ok":false,"sink","id","error"}` (`sink` and `id` absent when the agent refused
/// before picking a sink).
package struct DeadLetterReplayReply: Sendable, Hashable, Codable {
    /// Whether the sink acknowledged the batch (and the dead letter was deleted).
    package var ok: Bool
    /// The sink the batch was handed to.
    package var sink: String?
    /// The dead letter's id.
    package var id: String?
    /// Events delivered, on success.
    package var events: Int?
    /// Why it failed, on failure.
    package var error: String?

    package init(ok: Bool, sink: String? = nil, id: String? = nil, events: Int? = nil, error: String? = nil) {
        self.ok = ok
        self.sink = sink
        self.id = id
        self.events = events
        self.error = error
    }

    /// A failure before any sink was tried.
    package static func refused(_ message: String) -> Self { .init(ok: false, error: message) }
}
