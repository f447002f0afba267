import FerryProtocol
import FerryStorage
import FerryThreads
import Logging

extension AgentConfiguration {
    /// One sink events are delivered to, with its own delivery loop, cursor file
    /// (`<data>/cursors/<name>.cursor`), batching, retry policy and circuit breaker.
    ///
    /// Adding a sink type: a ``SinkSettings`` type that builds the sink and a ``SinkKind`` that
    /// reads its keys, registered in the ``SinkRegistry`` the configuration is loaded with.
    public struct SinkConfiguration: Sendable, Hashable {
        /// Unique among the sinks; names the cursor file and the dead-letter directory
        /// (letters, digits, `-`, `_`; at most 64).
        public var name: String
        /// The settings of the sink's type, a type a sink module registers (the file, HTTP and
        /// JetStream sinks' `FileSinkSettings`, `HTTPSinkConfiguration`, `JetStreamSinkConfiguration`).
        public var settings: any SinkSettings
        /// How events are grouped into batches.
        public var batch: Batch
        /// How failed batches are retried.
        public var retry: Retry
        /// When the sink is left alone after repeated failures.
        public var circuit: Circuit
        /// What the sink's bodies say about the host and the emitting process (`disclose`), as
        /// configured; ``disclosure`` is the effective choice.
        public var disclose: Disclose = Disclose()
        /// The consent categories the sink's purpose needs (`requiresConsent`): an event goes to
        /// it only while every one is granted (docs/DELIVERY.md, "Routes and consent per sink").
        public var requiresConsent: [String] = []
        /// Which events the sink takes (`route`); `nil`: every event.
        public var route: Route?

        /// The effective ``Disclosure``: each choice the configuration leaves out takes the sink
        /// type's default (``SinkSettings/defaultDisclosure``).
        public var disclosure: Disclosure {
            let defaults = settings.defaultDisclosure
            return Disclosure(origin: disclose.origin ?? defaults.origin, process: disclose.process ?? defaults.process,
                              dropContext: disclose.dropContext, anonymousID: disclose.anonymousID ?? defaults.anonymousID)
        }

        /// The `disclose` object of a sink: `{"origin": true, "process": false, "dropContext": ["ip"]}`.
        /// Every key may be left out (docs/DELIVERY.md, "What leaves the host").
        public struct Disclose: Sendable, Hashable {
            /// Send each event's origin `{uid, gid, pid, comm, exe, unit}`; `nil`: the type's default.
            public var origin: Bool?
            /// Send the emitting process's `pid`, `seq` and `session`; `nil`: the type's default.
            public var process: Bool?
            /// Top-level keys of each event's `context` removed before sending.
            public var dropContext: [String]
            /// Send the agent's anonymous id for an event with neither a user id nor an anonymous
            /// id (`anonymousId`); `nil`: the type's default (on).
            public var anonymousID: Bool?
            /// Creates a setting; every choice left out takes the sink type's default.
            public init(origin: Bool? = nil, process: Bool? = nil, dropContext: [String] = [], anonymousID: Bool? = nil) {
                self.origin = origin
                self.process = process
                self.dropContext = dropContext
                self.anonymousID = anonymousID
            }
        }

        /// The `type` name in the configuration file.
        public var type: String { Swift.type(of: settings).type }

        /// The settings if they are of type `Settings`.
        public func settings<Settings: SinkSettings>(as _: Settings.Type) -> Settings? {
            settings as? Settings
        }

        /// Batching: a batch is sent at once when it holds `maxEvents` events or about `maxBytes`
        /// bytes; a partial batch once `maxWaitMilliseconds` have passed since the sink's previous
        /// delivery or since its oldest event was accepted, whichever is first (docs/DELIVERY.md,
        /// "Batching").
        public struct Batch: Sendable, Hashable {
            /// Most events per batch.
            public var maxEvents: Int
            /// About the most bytes per batch (a single larger event still goes alone).
            public var maxBytes: Int
            /// The longest an event waits for a fuller batch (0: every batch goes at once).
            public var maxWaitMilliseconds: Int
            /// The default ``maxWaitMilliseconds``: a trickle of events is delivered five times a
            /// second, not once per commit (docs/bench/HISTORY.md, "Round 4 work in progress").
            public static let defaultMaxWaitMilliseconds = 200
            /// Creates a batch policy.
            public init(maxEvents: Int = 1000, maxBytes: Int = 1 << 20, maxWaitMilliseconds: Int = Batch.defaultMaxWaitMilliseconds) {
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
            name: String, settings: some SinkSettings, batch: Batch? = nil, retry: Retry? = nil, circuit: Circuit = Circuit(),
            delivery: Delivery = Delivery()
        ) {
            self.name = name
            self.settings = settings
            self.batch = batch ?? Batch(maxEvents: delivery.batchMaxEvents, maxBytes: delivery.batchMaxBytes)
            self.retry = retry ?? Retry(initialMilliseconds: delivery.retryInitialMilliseconds,
                                        maxMilliseconds: delivery.retryMaxMilliseconds)
            self.circuit = circuit
        }

        public static func == (lhs: SinkConfiguration, rhs: SinkConfiguration) -> Bool {
            lhs.name == rhs.name && lhs.settings.anyHashable == rhs.settings.anyHashable && lhs.batch == rhs.batch
                && lhs.retry == rhs.retry && lhs.circuit == rhs.circuit && lhs.disclose == rhs.disclose
                && lhs.requiresConsent == rhs.requiresConsent && lhs.route == rhs.route
        }

        public func hash(into hasher: inout Hasher) {
            hasher.combine(name)
            hasher.combine(settings.anyHashable)
            hasher.combine(batch)
            hasher.combine(retry)
            hasher.combine(circuit)
            hasher.combine(disclose)
            hasher.combine(requiresConsent)
            hasher.combine(route)
        }

        /// Whether `name` is a valid sink name (it names the cursor file and dead-letter directory).
        public static func isValidName(_ name: String) -> Bool {
            CursorStore.isValidSinkName(name)
        }

        /// The local directory the sink writes into once defaults are applied (the file sink's:
        /// ``SinkSettings/outputDirectory(dataDirectory:)``); `nil` for a sink that has none.
        public func fileDirectory(dataDirectory: String) -> String? {
            settings.outputDirectory(dataDirectory: dataDirectory)
        }

        /// Builds the sink, with `io` as its thread for blocking work.
        package func makeSink(dataDirectory: String, logger: Logger, io: BlockingExecutor) -> any Sink {
            settings.makeSink(SinkContext(name: name, dataDirectory: dataDirectory, logger: logger, io: io))
        }

        /// Every problem of the values, each message starting with the sink's key path and name
        /// (`sinks[1]: sink "collector": batch.maxEvents must be positive`).
        func problems(keyPath: String) -> [String] {
            let label = "\(keyPath): sink \"\(name)\""
            var problems: [String] = []
            func check(_ ok: Bool, _ message: @autoclosure () -> String) { if !ok { problems.append("\(label): " + message()) } }
            check(Self.isValidName(name), "sink name \"\(name)\" is invalid: use 1-64 letters, digits, '-' or '_'")
            check(batch.maxEvents > 0, "batch.maxEvents must be positive")
            check(batch.maxBytes > 0, "batch.maxBytes must be positive")
            check(batch.maxWaitMilliseconds >= 0, "batch.maxWaitMilliseconds must not be negative")
            check(retry.initialMilliseconds >= 0, "retry.initialMilliseconds must not be negative")
            check(retry.maxMilliseconds >= retry.initialMilliseconds,
                  "retry.maxMilliseconds (\(retry.maxMilliseconds)) must be at least retry.initialMilliseconds (\(retry.initialMilliseconds))")
            if let elapsed = retry.maxElapsedMilliseconds { check(elapsed > 0, "retry.maxElapsedMilliseconds must be positive") }
            check(circuit.failureThreshold > 0, "circuit.failureThreshold must be positive")
            check(circuit.openMilliseconds >= 0, "circuit.openMilliseconds must not be negative")
            var seen: Set<String> = []
            for key in disclose.dropContext {
                if key.isEmpty {
                    problems.append("\(label): disclose.dropContext: a key must not be empty")
                } else if key.contains(".") {
                    problems.append("\(label): disclose.dropContext: \"\(key)\" has a '.'; list top-level keys of the event's context (nested paths are not supported: drop the whole top-level key)")
                } else if !seen.insert(key).inserted {
                    problems.append("\(label): disclose.dropContext: \"\(key)\" is listed twice")
                }
            }
            do {
                try settings.validate(name: name)
            } catch let error as AgentError {
                // The type's message names the sink itself (`sink "x": …`, `sink (http): …`).
                problems += error.message.split(separator: "\n").map { "\(keyPath): \($0)" }
            } catch {
                problems.append("\(label): \(error)")
            }
            return problems
        }
    }
}
