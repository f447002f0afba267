/// The reply to `status` (`ferry status --json` prints it): the agent, its queue, each sink,
/// the consent state, counters and what recovery found. See `docs/PROTOCOL.md` ("Control").
///
/// Fields without a value are `null` in `queue` (`oldest_undelivered_age_ms` of an empty queue)
/// and in each ``Sink`` (`cursor`, `last_success_at`, `last_error`, `retry_at`), and absent in
/// ``Delivery``.
public struct StatusReply: Sendable, Hashable, Codable {
    /// The agent's process id.
    public var pid: Int
    /// The wire protocol version the agent speaks.
    public var protocolVersion: Int
    /// Milliseconds since the agent started.
    public var uptimeMilliseconds: Int
    /// The agent's runtime directory (its sockets).
    public var runtimeDirectory: String
    /// The agent's data directory (its queue).
    public var dataDirectory: String
    /// The durable queue.
    public var queue: Queue
    /// The first sink, in the shape of the single-sink versions (`{}` when there is no sink).
    public var delivery: Delivery?
    /// The consent state (as in `consent_state`).
    public var consent: ConsentSnapshot
    /// Every sink, in configuration order.
    public var sinks: [Sink]
    /// Counters by name (`accepted`, `duplicate`, `rejected`, `delivered`, …).
    public var counters: [String: Int]
    /// What recovery found at start (and the deferred verification since).
    public var recovery: Recovery
    /// Client events known lost (gaps in session sequences), by the client's source name.
    public var clientEventsLost: [String: Int]
    /// The ingest paths besides ZeroMQ (the local HTTP API's listeners `unix`, `tcp`) with their
    /// figures: `requests`, `requests_<status>`, the event outcomes (`accepted`, `duplicate`,
    /// `blocked`, `suppressed`, `refused`, `retry`) and `connections`; absent when none is on.
    public var ingestPaths: [String: [String: Int]]?
    /// Where each of those paths is served, by the same names: the HTTP API's Unix socket path
    /// (`unix`) and TCP address (`tcp`, `127.0.0.1:8088`); absent when none is on.
    public var ingestAddresses: [String: String]?

    /// Creates a status document.
    public init(
        pid: Int, protocolVersion: Int, uptimeMilliseconds: Int, runtimeDirectory: String, dataDirectory: String,
        queue: Queue, delivery: Delivery?, consent: ConsentSnapshot, sinks: [Sink], counters: [String: Int], recovery: Recovery,
        clientEventsLost: [String: Int] = [:], ingestPaths: [String: [String: Int]]? = nil, ingestAddresses: [String: String]? = nil
    ) {
        self.clientEventsLost = clientEventsLost
        self.ingestPaths = ingestPaths
        self.ingestAddresses = ingestAddresses
        self.pid = pid
        self.protocolVersion = protocolVersion
        self.uptimeMilliseconds = uptimeMilliseconds
        self.runtimeDirectory = runtimeDirectory
        self.dataDirectory = dataDirectory
        self.queue = queue
        self.delivery = delivery
        self.consent = consent
        self.sinks = sinks
        self.counters = counters
        self.recovery = recovery
    }

    /// The `queue` section.
    public struct Queue: Sendable, Hashable, Codable {
        /// Events not yet delivered to every sink.
        public var events: Int
        /// Bytes of the log's segments.
        public var bytes: Int
        /// Segment files.
        public var segments: Int
        /// Age of the oldest undelivered event (nil, `null` on the wire, for an empty queue).
        public var oldestUndeliveredAgeMilliseconds: Int?
        /// The oldest sink cursor (`segment:offset`).
        public var cursor: String
        /// Sealed segments still being verified in the background after start.
        public var verifyingSegments: Int
        /// The retention cap (`log.retentionMaxBytes`) that ``bytes`` is held under (nil from
        /// agents before it was reported).
        public var retentionMaxBytes: Int?

        /// Creates a queue section.
        public init(
            events: Int, bytes: Int, segments: Int, oldestUndeliveredAgeMilliseconds: Int?, cursor: String, verifyingSegments: Int,
            retentionMaxBytes: Int? = nil
        ) {
            self.retentionMaxBytes = retentionMaxBytes
            self.events = events
            self.bytes = bytes
            self.segments = segments
            self.oldestUndeliveredAgeMilliseconds = oldestUndeliveredAgeMilliseconds
            self.cursor = cursor
            self.verifyingSegments = verifyingSegments
        }

        private enum CodingKeys: String, CodingKey {
            case events, bytes, segments, oldestUndeliveredAgeMilliseconds = "oldest_undelivered_age_ms", cursor
            case verifyingSegments = "verifying_segments", retentionMaxBytes = "retention_max_bytes"
        }

        public init(from decoder: any Decoder) throws {
            let object = try decoder.container(keyedBy: CodingKeys.self)
            events = try object.decode(Int.self, forKey: .events)
            bytes = try object.decode(Int.self, forKey: .bytes)
            segments = try object.decode(Int.self, forKey: .segments)
            oldestUndeliveredAgeMilliseconds = try object.decodeIfPresent(Int.self, forKey: .oldestUndeliveredAgeMilliseconds)
            cursor = try object.decode(String.self, forKey: .cursor)
            verifyingSegments = try object.decode(Int.self, forKey: .verifyingSegments)
            retentionMaxBytes = try object.decodeIfPresent(Int.self, forKey: .retentionMaxBytes)
        }

        public func encode(to encoder: any Encoder) throws {
            var object = encoder.container(keyedBy: CodingKeys.self)
            try object.encode(events, forKey: .events)
            try object.encode(bytes, forKey: .bytes)
            try object.encode(segments, forKey: .segments)
            try object.encode(oldestUndeliveredAgeMilliseconds, forKey: .oldestUndeliveredAgeMilliseconds)  // null when nil
            try object.encode(cursor, forKey: .cursor)
            try object.encode(verifyingSegments, forKey: .verifyingSegments)
            try object.encodeIfPresent(retentionMaxBytes, forKey: .retentionMaxBytes)
        }
    }

    /// One entry of `sinks` (see docs/DELIVERY.md).
    public struct Sink: Sendable, Hashable, Codable {
        /// The sink's name.
        public var name: String
        /// Its type (`file`, `http`, `jetstream`, …).
        public var type: String
        /// The delivery loop's phase (`starting`, `delivering`, `retrying`, `paused`, …).
        public var state: String
        /// The circuit breaker (`closed`, `open`, `half_open`).
        public var circuit: String
        /// Failures since the last success.
        public var consecutiveFailures: Int
        /// Events this sink has still to take.
        public var backlogEvents: Int
        /// Events delivered since start.
        public var delivered: Int
        /// Retries since start.
        public var retried: Int
        /// Events dead-lettered since start.
        public var deadLettered: Int
        /// Dead letters (batches) waiting in the sink's dead-letter directory now, replayed or
        /// dropped with `ferry deadletter` (nil from agents before it was reported).
        public var deadLetters: Int?
        /// The sink's cursor (`segment:offset`), when it has one.
        public var cursor: String?
        /// When the last batch was acknowledged (Unix ms).
        public var lastSuccessAt: Int?
        /// The last failure's message.
        public var lastError: String?
        /// When the next attempt is due (Unix ms), while retrying.
        public var retryAt: Int?
        /// Events the sink passed by since start because its route or consent requirement does
        /// not let it have them, by reason (`route`, `consent_denied`, …; reasons with none left
        /// out; nil from agents before it was reported).
        public var skipped: [String: Int]?
        /// The consent categories the sink requires (`requiresConsent`; empty: none).
        public var requiresConsent: [String]?
        /// The sink's route, as `ferryd validate` prints it (nil, absent from the JSON: every event).
        public var route: String?

        /// Creates a sink entry.
        public init(
            name: String, type: String, state: String, circuit: String, consecutiveFailures: Int, backlogEvents: Int,
            delivered: Int, retried: Int, deadLettered: Int, cursor: String?, lastSuccessAt: Int?, lastError: String?, retryAt: Int?,
            deadLetters: Int? = nil
        ) {
            self.deadLetters = deadLetters
            self.name = name
            self.type = type
            self.state = state
            self.circuit = circuit
            self.consecutiveFailures = consecutiveFailures
            self.backlogEvents = backlogEvents
            self.delivered = delivered
            self.retried = retried
            self.deadLettered = deadLettered
            self.cursor = cursor
            self.lastSuccessAt = lastSuccessAt
            self.lastError = lastError
            self.retryAt = retryAt
        }

        private enum CodingKeys: String, CodingKey {
            case name, type, state, circuit, consecutiveFailures = "consecutive_failures", backlogEvents = "backlog_events"
            case delivered, retried, deadLettered = "dead_lettered", cursor, lastSuccessAt = "last_success_at"
            case lastError = "last_error", retryAt = "retry_at", deadLetters = "dead_letters"
            case skipped, requiresConsent = "requires_consent", route
        }

        public init(from decoder: any Decoder) throws {
            let object = try decoder.container(keyedBy: CodingKeys.self)
            deadLetters = try object.decodeIfPresent(Int.self, forKey: .deadLetters)
            name = try object.decode(String.self, forKey: .name)
            type = try object.decode(String.self, forKey: .type)
            state = try object.decode(String.self, forKey: .state)
            circuit = try object.decode(String.self, forKey: .circuit)
            consecutiveFailures = try object.decode(Int.self, forKey: .consecutiveFailures)
            backlogEvents = try object.decode(Int.self, forKey: .backlogEvents)
            delivered = try object.decode(Int.self, forKey: .delivered)
            retried = try object.decode(Int.self, forKey: .retried)
            deadLettered = try object.decode(Int.self, forKey: .deadLettered)
            cursor = try object.decodeIfPresent(String.self, forKey: .cursor)
            lastSuccessAt = try object.decodeIfPresent(Int.self, forKey: .lastSuccessAt)
            lastError = try object.decodeIfPresent(String.self, forKey: .lastError)
            retryAt = try object.decodeIfPresent(Int.self, forKey: .retryAt)
            skipped = try object.decodeIfPresent([String: Int].self, forKey: .skipped)
            requiresConsent = try object.decodeIfPresent([String].self, forKey: .requiresConsent)
            route = try object.decodeIfPresent(String.self, forKey: .route)
        }

        /// Encodes the entry; fields without a value are `null`, not absent.
        public func encode(to encoder: any Encoder) throws {
            var object = encoder.container(keyedBy: CodingKeys.self)
            try object.encode(name, forKey: .name)
            try object.encode(type, forKey: .type)
            try object.encode(state, forKey: .state)
            try object.encode(circuit, forKey: .circuit)
            try object.encode(consecutiveFailures, forKey: .consecutiveFailures)
            try object.encode(backlogEvents, forKey: .backlogEvents)
            try object.encode(delivered, forKey: .delivered)
            try object.encode(retried, forKey: .retried)
            try object.encode(deadLettered, forKey: .deadLettered)
            try object.encode(cursor, forKey: .cursor)
            try object.encode(lastSuccessAt, forKey: .lastSuccessAt)
            try object.encode(lastError, forKey: .lastError)
            try object.encode(retryAt, forKey: .retryAt)
            try object.encodeIfPresent(skipped, forKey: .skipped)
            try object.encodeIfPresent(requiresConsent, forKey: .requiresConsent)
            try object.encodeIfPresent(route, forKey: .route)
            try object.encodeIfPresent(deadLetters, forKey: .deadLetters)
        }
    }

    /// The `delivery` section: the first sink, as reported before there were several.
    public struct Delivery: Sendable, Hashable, Codable {
        /// The first sink's name.
        public var sink: String
        /// Its phase.
        public var state: String
        /// Its failures since the last success.
        public var consecutiveFailures: Int
        /// When its last batch was acknowledged (Unix ms); absent when never.
        public var lastSuccessAt: Int?
        /// Its last failure's message; absent when none.
        public var lastError: String?
        /// When its next attempt is due (Unix ms); absent unless retrying.
        public var retryAt: Int?

        /// Creates a delivery section.
        public init(sink: String, state: String, consecutiveFailures: Int, lastSuccessAt: Int? = nil, lastError: String? = nil, retryAt: Int? = nil) {
            self.sink = sink
            self.state = state
            self.consecutiveFailures = consecutiveFailures
            self.lastSuccessAt = lastSuccessAt
            self.lastError = lastError
            self.retryAt = retryAt
        }

        /// The section for `sink`, the first sink's entry.
        public init(_ sink: Sink) {
            self.init(sink: sink.name, state: sink.state, consecutiveFailures: sink.consecutiveFailures,
                      lastSuccessAt: sink.lastSuccessAt, lastError: sink.lastError, retryAt: sink.retryAt)
        }

        private enum CodingKeys: String, CodingKey {
            case sink, state, consecutiveFailures = "consecutive_failures", lastSuccessAt = "last_success_at"
            case lastError = "last_error", retryAt = "retry_at"
        }
    }

    /// The `recovery` section.
    public struct Recovery: Sendable, Hashable, Codable {
        /// Events found.
        public var events: Int
        /// Damaged regions skipped.
        public var corruptRegions: Int
        /// Bytes in damaged regions.
        public var corruptBytes: Int
        /// Bytes of torn tails cut off.
        public var truncatedBytes: Int

        /// Creates a recovery section.
        public init(events: Int, corruptRegions: Int, corruptBytes: Int, truncatedBytes: Int) {
            self.events = events
            self.corruptRegions = corruptRegions
            self.corruptBytes = corruptBytes
            self.truncatedBytes = truncatedBytes
        }

        private enum CodingKeys: String, CodingKey {
            case events, corruptRegions = "corrupt_regions", corruptBytes = "corrupt_bytes", truncatedBytes = "truncated_bytes"
        }
    }

    private enum CodingKeys: String, CodingKey {
        case ok, pid, protocolVersion = "protocol_version", uptimeMilliseconds = "uptime_ms", runtimeDirectory = "runtime_dir"
        case dataDirectory = "data_dir", queue, delivery, consent, sinks, counters, recovery
        case clientEventsLost = "client_events_lost", ingestPaths = "ingest_paths", ingestAddresses = "ingest_addresses"
    }

    public init(from decoder: any Decoder) throws {
        let object = try decoder.container(keyedBy: CodingKeys.self)
        pid = try object.decode(Int.self, forKey: .pid)
        protocolVersion = try object.decode(Int.self, forKey: .protocolVersion)
        uptimeMilliseconds = try object.decode(Int.self, forKey: .uptimeMilliseconds)
        runtimeDirectory = try object.decode(String.self, forKey: .runtimeDirectory)
        dataDirectory = try object.decode(String.self, forKey: .dataDirectory)
        queue = try object.decode(Queue.self, forKey: .queue)
        // `{}` when the agent has no sink.
        let delivery = try object.decode([String: EmptyOrAny].self, forKey: .delivery)
        self.delivery = delivery.isEmpty ? nil : try object.decode(Delivery.self, forKey: .delivery)
        consent = try object.decode(ConsentSnapshot.self, forKey: .consent)
        sinks = try object.decode([Sink].self, forKey: .sinks)
        counters = try object.decode([String: Int].self, forKey: .counters)
        recovery = try object.decode(Recovery.self, forKey: .recovery)
        clientEventsLost = try object.decodeIfPresent([String: Int].self, forKey: .clientEventsLost) ?? [:]
        ingestPaths = try object.decodeIfPresent([String: [String: Int]].self, forKey: .ingestPaths)
        ingestAddresses = try object.decodeIfPresent([String: String].self, forKey: .ingestAddresses)
    }

    public func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: CodingKeys.self)
        try object.encode(true, forKey: .ok)
        try object.encode(pid, forKey: .pid)
        try object.encode(protocolVersion, forKey: .protocolVersion)
        try object.encode(uptimeMilliseconds, forKey: .uptimeMilliseconds)
        try object.encode(runtimeDirectory, forKey: .runtimeDirectory)
        try object.encode(dataDirectory, forKey: .dataDirectory)
        try object.encode(queue, forKey: .queue)
        if let delivery {
            try object.encode(delivery, forKey: .delivery)
        } else {
            try object.encode([String: Int](), forKey: .delivery)
        }
        try object.encode(consent, forKey: .consent)
        try object.encode(sinks, forKey: .sinks)
        try object.encode(counters, forKey: .counters)
        try object.encode(recovery, forKey: .recovery)
        try object.encode(clientEventsLost, forKey: .clientEventsLost)
        try object.encodeIfPresent(ingestPaths, forKey: .ingestPaths)
        try object.encodeIfPresent(ingestAddresses, forKey: .ingestAddresses)
    }

    /// Any JSON value, read only to count an object's keys.
    private struct EmptyOrAny: Decodable {
        init(from decoder: any Decoder) throws {}
    }
}
