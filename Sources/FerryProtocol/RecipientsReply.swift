#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The `recipients` reply: `{"ok":true,"sinks":[…]}`, one entry per configured sink in
/// configuration order, saying whether it received a user's events (docs/CONSENT.md, "Which
/// sinks"). `ferry forget --user` sends an erasure to exactly the sinks whose
/// ``RecipientStatus/receivesErasure`` is true.
public struct RecipientsReply: Sendable, Hashable, Codable {
    /// One entry per sink.
    public var sinks: [RecipientStatus]

    /// Creates a reply.
    public init(sinks: [RecipientStatus]) { self.sinks = sinks }

    private enum CodingKeys: String, CodingKey { case ok, sinks }

    public init(from decoder: any Decoder) throws {
        sinks = try decoder.container(keyedBy: CodingKeys.self).decode([RecipientStatus].self, forKey: .sinks)
    }

    public func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: CodingKeys.self)
        try object.encode(true, forKey: .ok)
        try object.encode(sinks, forKey: .sinks)
    }
}

/// Whether one sink received a user's events.
public struct RecipientStatus: Sendable, Hashable, Codable {
    /// The verdict.
    public enum Verdict: String, Sendable, Hashable, Codable, CaseIterable {
        /// Some of the user's events lie before the sink's cursor.
        case delivered
        /// One may be in the batch on the wire, or the log no longer tells (``RecipientStatus/reason``).
        case mayHaveDelivered = "may_have_delivered"
        /// Some wait after the sink's cursor; none was sent yet.
        case notYet = "not_yet"
        /// The sink provably never took any (``RecipientStatus/reason``).
        case never
    }

    /// The sink's name.
    public var sink: String
    /// The verdict.
    public var verdict: Verdict
    /// Why, for `may_have_delivered` and `never`: `on_the_wire`, `history_unknown`; or each reason
    /// found, joined by `; `: `no_events`, `route`, `category_preferences <category>`,
    /// `consent <category>` (not granted since ``since``).
    public var reason: String?
    /// For a `consent` reason: since when the category has not been granted, Unix ms.
    public var since: UInt64?
    /// How many of the user's events the verdict counts (delivered, or waiting).
    public var events: Int?
    /// When the agent accepted the first and the last of the user's events the sink delivered, Unix ms.
    public var firstAt: UInt64?
    /// See ``firstAt``.
    public var lastAt: UInt64?
    /// Whether `ferry forget --user` sends this sink an erasure.
    public var receivesErasure: Bool { verdict == .delivered || verdict == .mayHaveDelivered }

    /// Creates an entry.
    public init(sink: String, verdict: Verdict, reason: String? = nil, since: UInt64? = nil, events: Int? = nil,
                firstAt: UInt64? = nil, lastAt: UInt64? = nil) {
        self.sink = sink
        self.since = since
        self.verdict = verdict
        self.reason = reason
        self.events = events
        self.firstAt = firstAt
        self.lastAt = lastAt
    }

    private enum CodingKeys: String, CodingKey {
        case sink, verdict, reason, since, events, firstAt = "first_at", lastAt = "last_at", receivesErasure = "receives_erasure"
    }

    public init(from decoder: any Decoder) throws {
        let object = try decoder.container(keyedBy: CodingKeys.self)
        sink = try object.decode(String.self, forKey: .sink)
        verdict = try object.decode(Verdict.self, forKey: .verdict)
        reason = try object.decodeIfPresent(String.self, forKey: .reason)
        since = try object.decodeIfPresent(UInt64.self, forKey: .since)
        events = try object.decodeIfPresent(Int.self, forKey: .events)
        firstAt = try object.decodeIfPresent(UInt64.self, forKey: .firstAt)
        lastAt = try object.decodeIfPresent(UInt64.self, forKey: .lastAt)
    }

    public func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: CodingKeys.self)
        try object.encode(sink, forKey: .sink)
        try object.encode(verdict, forKey: .verdict)
        try object.encodeIfPresent(reason, forKey: .reason)
        try object.encodeIfPresent(since, forKey: .since)
        try object.encodeIfPresent(events, forKey: .events)
        try object.encodeIfPresent(firstAt, forKey: .firstAt)
        try object.encodeIfPresent(lastAt, forKey: .lastAt)
        try object.encode(receivesErasure, forKey: .receivesErasure)
    }
}
