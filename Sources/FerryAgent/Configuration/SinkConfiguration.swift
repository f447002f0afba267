import Logging
extension AgentConfiguration {
    /// One sink events are delivered to, with its own delivery loop, cursor file
    /// (`<data>/cursors/<name>.cursor`), batching, retry policy and circuit breaker.
    ///
    /// Adding a sink type: a case in ``Kind``, its JSON keys in `AgentConfiguration+File.swift`
    /// (`sinkKinds`), and its construction in ``makeSink(dataDirectory:)``.
    public struct SinkConfiguration: Sendable, Hashable {
        /// Unique among the sinks; names the cursor file and the dead-letter directory
        /// (letters, digits, `-`, `_`; at most 64).
        public var name: String
        /// What kind of sink, with its own settings.
        public var kind: Kind
        /// How events are grouped into batches.
        public var batch: Batch
        /// How failed batches are retried.
        public var retry: Retry
        /// When the sink is left alone after repeated failures.
        public var circuit: Circuit

        /// The sink types.
        public enum Kind: Sendable, Hashable {
            /// JSON Lines files in a directory (the embedded default). `nil` = `<data dir>/delivered`.
            case file(directory: String?, maxFileBytes: Int64)
            /// POSTs batches to an HTTP collector (see `docs/HTTP-SINK.md`).
            case http(HTTPSinkConfiguration)
            /// Publishes each event to a NATS JetStream stream (see `docs/JETSTREAM.md`).
            case jetstream(JetStreamSinkConfiguration)

            /// The `type` name in the configuration file.
            public var typeName: String {
                switch self {
                case .file: "file"
                case .http: "http"
                case .jetstream: "jetstream"
                }
            }
        }

        /// Batching: a batch is sent when it holds `maxEvents` events or about `maxBytes` bytes, or
        /// when its oldest event has waited `maxWaitMilliseconds` since it was accepted.
        public struct Batch: Sendable, Hashable {
            /// Most events per batch.
            public var maxEvents: Int
            /// About the most bytes per batch (a single larger event still goes alone).
            public var maxBytes: Int
            /// How long to wait for a fuller batch before sending a partial one (0: send at once).
            public var maxWaitMilliseconds: Int
            /// Creates a batch policy.
            public init(maxEvents: Int = 1000, maxBytes: Int = 1 << 20, maxWaitMilliseconds: Int = 0) {
                self.maxEvents = maxEvents
                self.maxBytes = maxBytes
                self.maxWaitMilliseconds = maxWaitMilliseconds
            }
        }

        /// Retry with exponential backoff and full jitter: the n-th pause is uniform in
        /// `[0, min(maxMilliseconds, initialMilliseconds·2ⁿ)]`, or what the upstream asked for.
        public struct Retry: Sendable, Hashable {
            /// Backoff base.
            public var initialMilliseconds: Int
            /// Backoff cap.
            public var maxMilliseconds: Int
            /// After this long since the batch's first attempt, a failed batch is dead-lettered
            /// instead of retried. `nil`: retry for ever.
            public var maxElapsedMilliseconds: Int?
            /// Creates a retry policy.
            public init(initialMilliseconds: Int = 100, maxMilliseconds: Int = 30_000, maxElapsedMilliseconds: Int? = nil) {
                self.initialMilliseconds = initialMilliseconds
                self.maxMilliseconds = maxMilliseconds
                self.maxElapsedMilliseconds = maxElapsedMilliseconds
            }
        }

        /// The circuit breaker: after `failureThreshold` consecutive failed attempts no attempt is
        /// made for `openMilliseconds`; then one probe decides (success closes, failure re-opens).
        public struct Circuit: Sendable, Hashable {
            /// Consecutive failures that open the circuit.
            public var failureThreshold: Int
            /// How long the circuit stays open.
            public var openMilliseconds: Int
            /// Creates a breaker policy.
            public init(failureThreshold: Int = 5, openMilliseconds: Int = 30_000) {
                self.failureThreshold = failureThreshold
                self.openMilliseconds = openMilliseconds
            }
        }

        /// Creates a sink configuration; `batch` and `retry` default to `delivery`'s values.
        public init(
            name: String, kind: Kind, batch: Batch? = nil, retry: Retry? = nil, circuit: Circuit = Circuit(),
            delivery: Delivery = Delivery()
        ) {
            self.name = name
            self.kind = kind
            self.batch = batch ?? Batch(maxEvents: delivery.batchMaxEvents, maxBytes: delivery.batchMaxBytes)
            self.retry = retry ?? Retry(initialMilliseconds: delivery.retryInitialMilliseconds,
                                        maxMilliseconds: delivery.retryMaxMilliseconds)
            self.circuit = circuit
        }

        /// The embedded file sink named `file` (the default when no sink is configured).
        public static func defaultFile(delivery: Delivery = Delivery()) -> SinkConfiguration {
            SinkConfiguration(name: "file", kind: .file(directory: nil, maxFileBytes: 64 << 20), delivery: delivery)
        }

        /// Whether `name` is a valid sink name.
        public static func isValidName(_ name: String) -> Bool {
            !name.isEmpty && name.utf8.count <= 64 && name.utf8.allSatisfy { byte in
                (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                    || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
            }
        }

        /// The file sink's directory once defaults are applied; `nil` for other kinds.
        public func fileDirectory(dataDirectory: String) -> String? {
            switch kind {
            case .file(let directory, _): directory ?? dataDirectory + "/delivered"
            case .http, .jetstream: nil
            }
        }

        /// Builds the sink.
        public func makeSink(dataDirectory: String, logger: Logger) -> any Sink {
            switch kind {
            case .file(_, let maxFileBytes):
                FileSink(name: name, directory: fileDirectory(dataDirectory: dataDirectory)!, maxFileBytes: maxFileBytes)
            case .http(let http):
                HTTPSink(name: name, configuration: http, logger: logger)
            case .jetstream(let jetstream):
                JetStreamSink(name: name, configuration: jetstream, logger: logger)
            }
        }

        /// Checks the values; `fail` builds the error for a message.
        func validate(_ fail: (String) -> AgentError) throws {
            let label = "sink \"\(name)\""
            guard Self.isValidName(name) else {
                throw fail("sink name \"\(name)\" is invalid: use 1-64 letters, digits, '-' or '_'")
            }
            guard batch.maxEvents > 0 else { throw fail("\(label): batch.maxEvents must be positive") }
            guard batch.maxBytes > 0 else { throw fail("\(label): batch.maxBytes must be positive") }
            guard batch.maxWaitMilliseconds >= 0 else { throw fail("\(label): batch.maxWaitMilliseconds must not be negative") }
            guard retry.initialMilliseconds >= 0 else { throw fail("\(label): retry.initialMilliseconds must not be negative") }
            guard retry.maxMilliseconds >= retry.initialMilliseconds else {
                throw fail("\(label): retry.maxMilliseconds (\(retry.maxMilliseconds)) must be at least retry.initialMilliseconds (\(retry.initialMilliseconds))")
            }
            if let elapsed = retry.maxElapsedMilliseconds, elapsed <= 0 {
                throw fail("\(label): retry.maxElapsedMilliseconds must be positive")
            }
            guard circuit.failureThreshold > 0 else { throw fail("\(label): circuit.failureThreshold must be positive") }
            guard circuit.openMilliseconds >= 0 else { throw fail("\(label): circuit.openMilliseconds must not be negative") }
            switch kind {
            case .file(let directory, let maxFileBytes):
                guard maxFileBytes > 0 else { throw fail("\(label): maxFileBytes must be positive") }
                if let directory, directory.isEmpty { throw fail("\(label): directory must not be empty") }
            case .http(let http):
                try http.validate()
            case .jetstream(let jetstream):
                try jetstream.validate()
            }
        }
    }
}
