import FerryProtocol

/// An event to send: what the app knows. Ids, timestamps, sequence numbers and the source are
/// filled in by the ``FerryClient``.
public struct Event: Sendable, Hashable {
    /// The kind of event.
    public var type: EventType
    /// The event name (`"Order Completed"`, a screen name, …).
    public var name: String
    /// JSON object properties, already encoded (see ``init(type:name:properties:userID:onceKey:category:localOnly:)``).
    public var propertiesJSON: [UInt8]
    /// The user the event is about, if known.
    public var userID: String
    /// A once-key for conversion-style dedup (empty = none).
    public var onceKey: String
    /// Consent category code; 0 = derived from the type by the agent.
    public var category: UInt8
    /// Record locally but never deliver upstream.
    public var localOnly: Bool

    /// Creates an event with structured properties.
    public init(
        type: EventType = .track, name: String, properties: [String: FerryValue] = [:], userID: String = "",
        onceKey: String = "", category: UInt8 = 0, localOnly: Bool = false
    ) {
        var json: [UInt8] = []
        if !properties.isEmpty {
            // One allocation for typical properties instead of several growth steps.
            json.reserveCapacity(16 + 32 * properties.count)
            FerryValue.appendObject(properties, to: &json)
        }
        self.init(type: type, name: name, propertiesJSON: json, userID: userID, onceKey: onceKey,
                  category: category, localOnly: localOnly)
    }

    /// Creates an event whose properties are an already encoded JSON object (or empty).
    public init(
        type: EventType = .track, name: String, propertiesJSON: [UInt8], userID: String = "",
        onceKey: String = "", category: UInt8 = 0, localOnly: Bool = false
    ) {
        self.type = type
        self.name = name
        self.propertiesJSON = propertiesJSON
        self.userID = userID
        self.onceKey = onceKey
        self.category = category
        self.localOnly = localOnly
    }
}

/// What finally became of an event, as reported to ``FerryClient/send(_:)``.
public struct Receipt: Sendable, Hashable {
    /// The event's id.
    public var id: EventID
    /// Its final status.
    public var status: Status

    /// Final statuses.
    public enum Status: Sendable, Hashable {
        /// Durable in the agent's queue.
        case accepted
        /// The agent already had it (a re-send); the first copy is durable.
        case duplicate
        /// The agent refused it.
        case rejected(RejectReason)
        /// Refused by consent.
        case blocked
        /// Recorded locally, never delivered.
        case suppressed
        /// Dropped by the client's outbox overflow policy; never reached the agent.
        case droppedFromOutbox
        /// The client was shut down before the agent acked it.
        case clientClosed
    }

    /// Creates a receipt.
    public init(id: EventID, status: Status) {
        self.id = id
        self.status = status
    }
}

/// Counters of a ``FerryClient``.
public struct FerryClientStatistics: Sendable, Hashable {
    /// Events handed to the client.
    public var enqueued = 0
    /// Events acked `accepted`.
    public var accepted = 0
    /// Events acked `duplicate`.
    public var duplicate = 0
    /// Events acked `rejected`, `blocked` or refused with an error reply.
    public var rejected = 0
    /// Events acked `suppressed`.
    public var suppressed = 0
    /// Events dropped by the overflow policy.
    public var droppedFromOutbox = 0
    /// Messages sent again after no ack came.
    public var resentBatches = 0
    /// Events waiting for an ack (sent or not).
    public var pending = 0
}

/// Errors of the client library.
public struct FerryClientError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Base: Hashable, Sendable { case timeout, closed, socket }
    private let base: Base
    /// Details.
    public let message: String

    /// ``FerryClient/flush(timeout:)`` ran out of time before everything was acked.
    public static func timeout(_ message: String) -> Self { .init(base: .timeout, message: message) }
    /// The client was shut down.
    public static let closed = FerryClientError(base: .closed, message: "the client is shut down")
    /// A ZeroMQ error while setting up the client.
    public static func socket(_ message: String) -> Self { .init(base: .socket, message: message) }

    /// Compares kinds, ignoring messages.
    public static func ~= (pattern: Self, value: any Error) -> Bool { (value as? Self)?.base == pattern.base }

    public var description: String { "\(base): \(message)" }
}
