import FerryProtocol

/// An event to send: what the app knows. Ids, timestamps, sequence numbers and the source are
/// filled in by the ``FerryClient``.
public struct Event: Sendable, Hashable {
    /// The kind of event.
    public var type: EventType
    /// The event name (`"Order Completed"`, a screen name, …).
    public var name: String
    /// JSON object properties, already encoded (see ``init(type:name:properties:userID:onceKey:category:localOnly:anonymousID:groupID:previousID:context:)``).
    public var propertiesJSON: [UInt8]
    /// The user the event is about, if known.
    public var userID: String
    /// A once-key for conversion-style dedup (empty = none).
    public var onceKey: String
    /// Consent category code; 0 = derived from the type by the agent.
    public var category: UInt8
    /// Record locally but never deliver upstream.
    public var localOnly: Bool
    /// An id for a user not (yet) known by ``userID`` (Segment's `anonymousId`); empty means the
    /// client's ``FerryClientConfiguration/anonymousID``. At most 1024 bytes (the agent rejects a
    /// longer one with reason `invalidField`).
    public var anonymousID: String
    /// The group a `group` event joins the user to (Segment's `groupId`); empty =
    /// none. At most 1024 bytes.
    public var groupID: String
    /// The user's former id, which an `alias` event links to ``userID`` (Segment's
    /// `previousId`); empty = none. At most 1024 bytes.
    public var previousID: String
    /// The event's context (Segment's `context`: app, device, locale …) as an encoded JSON object,
    /// or empty for none. The agent rejects a context that is not a JSON object (reason
    /// `invalidField`).
    public var contextJSON: [UInt8]

    /// Creates an event with structured properties and context.
    public init(
        type: EventType = .track, name: String, properties: [String: FerryValue] = [:], userID: String = "",
        onceKey: String = "", category: UInt8 = 0, localOnly: Bool = false, anonymousID: String = "",
        groupID: String = "", previousID: String = "", context: [String: FerryValue] = [:]
    ) {
        self.init(type: type, name: name, propertiesJSON: Self.object(properties), userID: userID, onceKey: onceKey,
                  category: category, localOnly: localOnly, anonymousID: anonymousID, groupID: groupID,
                  previousID: previousID, contextJSON: Self.object(context))
    }

    /// Creates an event whose properties (and context) are already encoded JSON objects (or empty).
    public init(
        type: EventType = .track, name: String, propertiesJSON: [UInt8], userID: String = "",
        onceKey: String = "", category: UInt8 = 0, localOnly: Bool = false, anonymousID: String = "",
        groupID: String = "", previousID: String = "", contextJSON: [UInt8] = []
    ) {
        self.type = type
        self.name = name
        self.propertiesJSON = propertiesJSON
        self.userID = userID
        self.onceKey = onceKey
        self.category = category
        self.localOnly = localOnly
        self.anonymousID = anonymousID
        self.groupID = groupID
        self.previousID = previousID
        self.contextJSON = contextJSON
    }

    /// The JSON object text of `fields`, or empty for none.
    static func object(_ fields: [String: FerryValue]) -> [UInt8] {
        guard !fields.isEmpty else { return [] }
        var json: [UInt8] = []
        // One allocation for typical fields instead of several growth steps.
        json.reserveCapacity(16 + 32 * fields.count)
        FerryValue.appendObject(fields, to: &json)
        return json
    }
}

/// What finally became of an event, as reported to ``FerryClient/send(_:)``.
///
/// ```swift
/// let receipt = await ferry.send(Event(name: "Signed Up"))
/// if receipt.status == .blocked, receipt.reason == .consentDenied { … }
/// ```
public struct Receipt: Sendable, Hashable {
    /// The event's id.
    public var id: EventID
    /// Its final status.
    public var status: Status
    /// Why the agent gave that status, as its ack said: the reject reason of
    /// ``Status/rejected(_:)``, the consent state's verdict for ``Status/blocked`` (such as
    /// `trackingDisabled`, `consentDenied`, `consentUndetermined`), `localOnly` for
    /// ``Status/suppressed``, `onceKey` for a ``Status/duplicate`` of an already used once-key,
    /// `held` for an ``Status/accepted`` event held until consent for its category is decided,
    /// `quarantined` for an ``Status/accepted`` event that breaks the host's tracking plan and is
    /// kept in the agent's quarantine (durable, not delivered unless released: do not resend),
    /// `planViolation` for one ``Status/rejected(_:)`` by the plan. `none` otherwise, and from agents older than these reasons.
    public var reason: RejectReason

    /// Final statuses.
    public enum Status: Sendable, Hashable {
        /// Durable in the agent's queue.
        case accepted
        /// The agent already had it (a re-send); the first copy is durable.
        case duplicate
        /// The agent refused it.
        case rejected(RejectReason)
        /// Refused by consent; ``Receipt/reason`` says why.
        case blocked
        /// Recorded locally, never delivered; ``Receipt/reason`` says why.
        case suppressed
        /// Dropped by the client's outbox overflow policy; never reached the agent.
        case droppedFromOutbox
        /// The client was shut down before the agent acked it.
        case clientClosed
        /// The agent refused the whole message it travelled in (an error reply, such as
        /// `access_denied` from a system agent whose policy does not let this user send events);
        /// nothing of it was stored.
        case refusedByAgent(ErrorCode)
    }

    /// Creates a receipt.
    public init(id: EventID, status: Status, reason: RejectReason = .none) {
        self.id = id
        self.status = status
        self.reason = reason
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
    /// Of ``rejected``, events acked `blocked` by the agent's consent state.
    public var blocked = 0
    /// Events dropped by the overflow policy.
    public var droppedFromOutbox = 0
    /// Messages sent again after no ack came.
    public var resentBatches = 0
    /// Messages of events sent (re-sends not counted): fewer than the events acked when events
    /// travel together (a full batch, events gathered by the send delay, or queued while a message
    /// was in flight).
    public var sentMessages = 0
    /// Of ``sentMessages``, those sent by the thread that queued, sent or flushed the events (the
    /// socket was free), not by the client's I/O thread.
    public var sentByCaller = 0
    /// Events waiting for an ack (sent or not).
    public var pending = 0
}

/// Errors of the client library.
///
/// ```swift
/// do {
///     try await control.setConsent(.granted, for: "analytcs")
/// } catch let error as FerryClientError where error.code == .refused {
///     print(error.message, "- valid:", error.valid)    // unknown category "analytcs" - valid: [analytics, …]
/// }
/// ```
public struct FerryClientError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of error; new kinds may be added.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case timeout, closed, socket
            case agentNotRunning = "agent not running", refused, badReply = "bad reply", accessDenied = "access denied"
        }
        private let base: Base

        /// ``FerryClient/flush(timeout:)`` ran out of time before everything was acked.
        public static let timeout = Code(base: .timeout)
        /// The client was shut down.
        public static let closed = Code(base: .closed)
        /// A ZeroMQ error (setting up the client or a control socket).
        public static let socket = Code(base: .socket)
        /// No agent answered on the control socket (``FerryClientError/endpoint``).
        public static let agentNotRunning = Code(base: .agentNotRunning)
        /// The agent refused a control request; see ``FerryClientError/message`` and ``FerryClientError/valid``.
        public static let refused = Code(base: .refused)
        /// The agent's control reply could not be read.
        public static let badReply = Code(base: .badReply)
        /// The agent's access policy refused the caller (a refusal with `code` `access_denied`).
        public static let accessDenied = Code(base: .accessDenied)

        public var description: String { base.rawValue }
    }

    /// The kind of error.
    public let code: Code
    /// Details (for ``Code/refused``, the agent's own message).
    public let message: String
    /// The endpoint that did not answer (``Code/agentNotRunning``), else nil.
    public let endpoint: String?
    /// For ``Code/refused``: the values the agent accepts for the field it named, when it sent them.
    public let valid: [String]

    private init(code: Code, message: String, endpoint: String? = nil, valid: [String] = []) {
        self.code = code
        self.message = message
        self.endpoint = endpoint
        self.valid = valid
    }

    /// ``FerryClient/flush(timeout:)`` ran out of time before everything was acked.
    public static func timeout(_ message: String) -> Self { .init(code: .timeout, message: message) }
    /// The client was shut down.
    public static let closed = FerryClientError(code: .closed, message: "the client is shut down")
    /// A ZeroMQ error while setting up the client or a control socket.
    public static func socket(_ message: String) -> Self { .init(code: .socket, message: message) }
    /// No agent answered on `endpoint` (no socket file, or no reply in time).
    public static func agentNotRunning(endpoint: String, detail: String) -> Self {
        .init(code: .agentNotRunning, message: "ferryd is not running (\(detail); endpoint \(endpoint))", endpoint: endpoint)
    }
    /// The agent refused a control request with `message`; `valid` lists accepted values, if sent.
    public static func refused(_ message: String, valid: [String] = []) -> Self {
        .init(code: .refused, message: message, valid: valid)
    }
    /// The agent's reply could not be read.
    public static func badReply(_ message: String) -> Self { .init(code: .badReply, message: message) }
    /// The agent's access policy refused the caller, with the agent's `message`.
    public static func accessDenied(_ message: String) -> Self { .init(code: .accessDenied, message: message) }

    /// Compares kinds, ignoring messages.
    public static func ~= (pattern: Self, value: any Error) -> Bool { (value as? Self)?.code == pattern.code }

    public var description: String {
        switch code {
        case .agentNotRunning: message
        case .refused where !valid.isEmpty: "refused: \(message) (valid: \(valid.joined(separator: ", ")))"
        default: "\(code): \(message)"
        }
    }
}
