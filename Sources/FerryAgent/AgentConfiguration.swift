import FerryProtocol

/// Everything `ferryd` can be told. Every field has a default, so `AgentConfiguration()` is a
/// working agent using the standard directories and the embedded file sink.
///
/// Load it from a JSON file with ``AgentConfiguration/load(fromFile:)``; see
/// `daemon/ferryd.example.json` for every field.
public struct AgentConfiguration: Sendable, Hashable {
    /// Directory for the sockets (`ingest`, `events`, `control`); created 0700.
    public var runtimeDirectory: String
    /// Directory for the log, cursors and dedup snapshot; created 0700, files 0600.
    public var dataDirectory: String
    /// Largest accepted event frame in bytes; larger events are rejected with `too_large`.
    public var maxEventBytes: Int
    /// The durable log.
    public var log: LogConfiguration
    /// The dedup window.
    public var dedup: Dedup
    /// Batching of delivery.
    public var delivery: Delivery
    /// Where delivered events go.
    public var sink: SinkConfiguration
    /// The consent state's starting point and policies.
    public var consent: ConsentConfiguration

    /// The dedup window: an id re-sent within it is answered `duplicate` and not stored again.
    public struct Dedup: Sendable, Hashable {
        /// Most ids remembered.
        public var maxEntries: Int
        /// Longest an id is remembered, in seconds.
        public var maxAgeSeconds: Int
        /// Creates a window configuration.
        public init(maxEntries: Int = 100_000, maxAgeSeconds: Int = 900) {
            self.maxEntries = maxEntries
            self.maxAgeSeconds = maxAgeSeconds
        }
    }

    /// How the delivery loop batches.
    public struct Delivery: Sendable, Hashable {
        /// Most events per batch handed to the sink.
        public var batchMaxEvents: Int
        /// About the most bytes per batch.
        public var batchMaxBytes: Int
        /// Shortest and longest pause after a failed delivery (exponential backoff with jitter).
        public var retryInitialMilliseconds: Int
        /// Upper bound of the backoff.
        public var retryMaxMilliseconds: Int
        /// Creates a delivery configuration.
        public init(batchMaxEvents: Int = 1000, batchMaxBytes: Int = 1 << 20,
                    retryInitialMilliseconds: Int = 100, retryMaxMilliseconds: Int = 30_000) {
            self.batchMaxEvents = batchMaxEvents
            self.batchMaxBytes = batchMaxBytes
            self.retryInitialMilliseconds = retryInitialMilliseconds
            self.retryMaxMilliseconds = retryMaxMilliseconds
        }
    }

    /// The sink events are delivered to.
    public enum SinkConfiguration: Sendable, Hashable {
        /// JSON Lines files in a directory (the embedded default). `nil` = `<data dir>/delivered`.
        case file(directory: String?, maxFileBytes: Int64)
    }

    /// Creates a configuration; every argument has a default.
    public init(
        runtimeDirectory: String = FerryPaths.runtimeDirectory(),
        dataDirectory: String = FerryPaths.dataDirectory(),
        maxEventBytes: Int = 64 << 10,
        log: LogConfiguration = LogConfiguration(),
        dedup: Dedup = Dedup(),
        delivery: Delivery = Delivery(),
        sink: SinkConfiguration = .file(directory: nil, maxFileBytes: 64 << 20),
        consent: ConsentConfiguration = ConsentConfiguration()
    ) {
        self.consent = consent
        self.runtimeDirectory = runtimeDirectory
        self.dataDirectory = dataDirectory
        self.maxEventBytes = maxEventBytes
        self.log = log
        self.dedup = dedup
        self.delivery = delivery
        self.sink = sink
    }

    /// The file sink's directory once defaults are applied.
    public var fileSinkDirectory: String {
        switch sink {
        case .file(let directory, _): directory ?? dataDirectory + "/delivered"
        }
    }

    /// Checks the values for consistency; throws ``AgentError`` with code `configuration`.
    public func validate() throws {
        func fail(_ message: String) -> AgentError { AgentError(code: .configuration, message: message) }
        guard maxEventBytes >= WireEvent.fixedHeaderSize else { throw fail("maxEventBytes must be at least \(WireEvent.fixedHeaderSize)") }
        guard maxEventBytes <= LogRecord.maxBodySize - LogRecord.bodyPrefixSize else {
            throw fail("maxEventBytes must be at most \(LogRecord.maxBodySize - LogRecord.bodyPrefixSize)")
        }
        guard log.segmentMaxBytes >= 4096 else { throw fail("log.segmentMaxBytes must be at least 4096") }
        guard log.retentionMaxBytes >= 2 * log.segmentMaxBytes else {
            throw fail("log.retentionMaxBytes (\(log.retentionMaxBytes)) must be at least twice log.segmentMaxBytes (\(log.segmentMaxBytes))")
        }
        guard dedup.maxEntries > 0, dedup.maxAgeSeconds > 0 else { throw fail("dedup limits must be positive") }
        guard delivery.batchMaxEvents > 0, delivery.batchMaxBytes > 0 else { throw fail("delivery batch limits must be positive") }
        try consent.validate()
        guard !runtimeDirectory.isEmpty, !dataDirectory.isEmpty else { throw fail("directories must not be empty") }
        // ipc:// paths are limited by sockaddr_un (108 bytes on Linux).
        guard runtimeDirectory.utf8.count + "/control".utf8.count < 108 else {
            throw fail("runtimeDirectory is too long for a Unix socket path (max ~100 bytes): \(runtimeDirectory)")
        }
    }
}
