#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

// The upstream erasures `ferry forget --user` records (docs/CONSENT.md, "Erasure upstream") and
// the `forget_status` reply that shows them.

/// One erasure request as the agent keeps it in its outbox and shows it (`forget_status`): one
/// user's erasure, to be carried to every sink that may have delivered that user's events.
/// The user id is never part of it (the outbox keeps it beside, until every sink is done).
public struct ErasureRequestStatus: Sendable, Hashable, Codable {
    /// The request's id (a UUIDv7), the one each upstream receives.
    public var id: String
    /// When `ferry forget` was asked, Unix ms.
    public var requestedAt: UInt64
    /// Where it stands with each sink it is for, by sink name.
    public var sinks: [ErasureSinkStatus]

    /// Whether every sink is done with it (sent or failed for good).
    public var done: Bool { sinks.allSatisfy { $0.state != .pending } }

    /// Creates a request status.
    public init(id: String, requestedAt: UInt64, sinks: [ErasureSinkStatus]) {
        self.id = id
        self.requestedAt = requestedAt
        self.sinks = sinks
    }

    private enum CodingKeys: String, CodingKey { case id, requestedAt = "requested_at", sinks, done }

    public init(from decoder: any Decoder) throws {
        let object = try decoder.container(keyedBy: CodingKeys.self)
        id = try object.decode(String.self, forKey: .id)
        requestedAt = try object.decode(UInt64.self, forKey: .requestedAt)
        sinks = try object.decode([ErasureSinkStatus].self, forKey: .sinks)
    }

    public func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: CodingKeys.self)
        try object.encode(id, forKey: .id)
        try object.encode(requestedAt, forKey: .requestedAt)
        try object.encode(sinks, forKey: .sinks)
        try object.encode(done, forKey: .done)
    }
}

/// An erasure request's state with one sink.
public struct ErasureSinkStatus: Sendable, Hashable, Codable {
    /// Where the request stands with the sink.
    public enum State: String, Sendable, Hashable, Codable, CaseIterable {
        /// Not yet confirmed by the upstream: being sent, or waiting for its retry.
        case pending
        /// The upstream accepted it.
        case sent
        /// It failed for good (refused, not supported by the sink, or retried past
        /// `retry.maxElapsedMilliseconds`).
        case failed
    }

    /// The sink's name.
    public var sink: String
    /// Where the request stands.
    public var state: State
    /// Attempts made so far.
    public var attempts: Int
    /// The last failure, if any.
    public var lastError: String?
    /// Unix ms of the last attempt or outcome.
    public var updatedAt: UInt64?
    /// What the upstream called the request (Segment's `regulateId`), once sent.
    public var reference: String?

    /// Creates a sink status.
    public init(sink: String, state: State = .pending, attempts: Int = 0, lastError: String? = nil, updatedAt: UInt64? = nil,
                reference: String? = nil) {
        self.sink = sink
        self.state = state
        self.attempts = attempts
        self.lastError = lastError
        self.updatedAt = updatedAt
        self.reference = reference
    }

    private enum CodingKeys: String, CodingKey {
        case sink, state, attempts, lastError = "last_error", updatedAt = "updated_at", reference
    }
}

/// The `forget_status` reply: `{"ok":true,"erasures":[…]}`, oldest request first (finished
/// requests are kept, without their user, up to ``ErasureStatusReply/keptFinished``).
public struct ErasureStatusReply: Sendable, Hashable, Codable {
    /// The requests.
    public var erasures: [ErasureRequestStatus]

    /// How many finished requests the agent keeps to show.
    public static let keptFinished = 100

    /// Creates a reply.
    public init(erasures: [ErasureRequestStatus]) { self.erasures = erasures }

    private enum CodingKeys: String, CodingKey { case ok, erasures }

    public init(from decoder: any Decoder) throws {
        erasures = try decoder.container(keyedBy: CodingKeys.self).decode([ErasureRequestStatus].self, forKey: .erasures)
    }

    public func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: CodingKeys.self)
        try object.encode(true, forKey: .ok)
        try object.encode(erasures, forKey: .erasures)
    }
}
