#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

// The control protocol (`docs/PROTOCOL.md`, "Control"): one JSON object per request, with a string
// field `op`, and one JSON object per reply, `{"ok": true, …}` or `{"ok": false, "error": …}`.
// These types are its only definition: the agent decodes requests and encodes replies with them,
// the client library and the CLI encode requests and decode replies with them.
//
// By role: ControlRequest.swift (requests), ControlRefusal.swift (the refusal every op may get),
// this file (the replies of single ops), StatusReply.swift (`status`), ControlReplyJSON.swift
// (how the agent writes a reply's bytes).

// MARK: - Replies

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

/// The reply to `quarantine_replay` and `quarantine_drop`: `{"ok":true,"results":[…]}`, one
/// result per quarantined event the request named (every one for `all`); an event that could
/// not be replayed or dropped (still violating, a storage error) stays quarantined and its
/// result says why. `{"ok":false,"error":…}` when the request was refused as a whole (no such
/// event).
package struct QuarantineReply: Sendable, Hashable, Codable {
    /// What became of one quarantined event.
    package struct Result: Sendable, Hashable, Codable {
        /// The event's id.
        package var id: String
        /// `stored` (judged again, it passed and is now in the log), `duplicate` (it was in the log
        /// already: an earlier replay stored it), `blocked` (consent refuses it now: removed, never
        /// stored), `violating` (still breaks the current plan: kept), `dropped`, `failed` (kept;
        /// see `error`), `corrupt` (the entry cannot be read: kept, `drop` removes it).
        package var outcome: String
        /// The violations found when judged again (`violating`), as their JSON objects.
        package var violations: [String]?
        /// Why it failed (`failed`, `corrupt`).
        package var error: String?

        package init(id: String, outcome: String, violations: [String]? = nil, error: String? = nil) {
            self.id = id
            self.outcome = outcome
            self.violations = violations
            self.error = error
        }
    }

    /// False when the request was refused as a whole (``error`` says why).
    package var ok: Bool
    /// The results, oldest event first.
    package var results: [Result]
    /// Why the request was refused as a whole (no such event).
    package var error: String?

    /// Whether every result is settled (`stored`, `duplicate`, `blocked`, `dropped`): nothing
    /// the request named is left in the quarantine.
    package var settled: Bool {
        ok && results.allSatisfy { ["stored", "duplicate", "blocked", "dropped"].contains($0.outcome) }
    }

    package init(ok: Bool, results: [Result] = [], error: String? = nil) {
        self.ok = ok
        self.results = results
        self.error = error
    }

    /// A refusal of the whole request.
    package static func refused(_ message: String) -> Self { .init(ok: false, error: message) }
}

/// The reply to `reload` (`ferry reload`, and what SIGHUP does): the configuration was read again
/// and either applied (`{"ok":true,"applied":true,"changed":["logLevel"],"errors":[]}`; `changed`
/// empty when no key changed) or refused whole, the running configuration kept, with every
/// problem naming its key (`{"ok":true,"applied":false,"changed":[],"errors":["/etc/ferry/ferryd.json:
/// quality.plan: …"]}`).
public struct ReloadReply: Sendable, Hashable, Codable {
    /// Whether the configuration read is now in effect.
    public var applied: Bool
    /// The key paths that changed (when applied).
    public var changed: [String]
    /// Why the reload was refused, one problem each naming its key (empty when applied).
    public var errors: [String]

    /// An applied reload that changed `changed`.
    public static func applied(changed: [String]) -> Self { .init(applied: true, changed: changed, errors: []) }
    /// A refused reload, for `errors`.
    public static func refused(_ errors: [String]) -> Self { .init(applied: false, changed: [], errors: errors) }

    /// Creates a reply.
    public init(applied: Bool, changed: [String], errors: [String]) {
        self.applied = applied
        self.changed = changed
        self.errors = errors
    }

    private enum CodingKeys: String, CodingKey { case ok, applied, changed, errors }

    public init(from decoder: any Decoder) throws {
        let object = try decoder.container(keyedBy: CodingKeys.self)
        applied = try object.decode(Bool.self, forKey: .applied)
        changed = try object.decode([String].self, forKey: .changed)
        errors = try object.decode([String].self, forKey: .errors)
    }

    public func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: CodingKeys.self)
        try object.encode(true, forKey: .ok)
        try object.encode(applied, forKey: .applied)
        try object.encode(changed, forKey: .changed)
        try object.encode(errors, forKey: .errors)
    }
}
