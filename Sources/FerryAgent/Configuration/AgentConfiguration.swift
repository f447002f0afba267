import FerryProtocol
import FerryStorage
import Logging

/// Everything `ferryd` can be told. Every field has a default but ``sinks``, so
/// `AgentConfiguration(sinks: …)` is a working agent using the standard directories; `ferryd`
/// without a configuration file delivers to its registry's default sink, the file sink named
/// `file` (``SinkRegistry/defaultSinks(delivery:)``).
///
/// Load it from a JSON file with ``AgentConfiguration/load(fromFile:base:sinkKinds:ingestPathKinds:)``;
/// see `daemon/ferryd.example.json` for every field.
public struct AgentConfiguration: Sendable, Hashable {
    /// A per-user agent or the host's system agent (docs/PROTOCOL.md, "Where the agent is").
    public enum Mode: String, Sendable, Hashable, CaseIterable {
        /// One agent per user: sockets in the user's runtime directory, data in their home.
        case user
        /// One agent for the host: sockets in `/run/ferry`, data in `/var/lib/ferry`, shared by
        /// every local user under ``AgentConfiguration/access``.
        case system
    }

    /// Per-user or system agent. Changing it with ``init(mode:)`` picks the mode's directories
    /// and access defaults.
    public var mode: Mode
    /// Who may use which socket (kernel-verified).
    public var access: AccessPolicy
    /// Directory for the sockets (`ingest`, `events`, `control`); created 0700. An existing one
    /// must be safe (daemon/README.md, "Directories"), else the agent refuses to start.
    public var runtimeDirectory: String
    /// Directory for the log, cursors and dedup snapshot; created 0700, files 0600; the same
    /// safety rule as the runtime directory, for it and everything in it.
    public var dataDirectory: String
    /// Largest accepted event frame in bytes; larger events are rejected with `too_large`.
    public var maxEventBytes: Int
    /// The durable log.
    public var log: LogConfiguration
    /// The dedup window.
    public var dedup: Dedup
    /// Delivery defaults: the batching and retry every sink gets unless it sets its own.
    public var delivery: Delivery
    /// Where delivered events go: each sink has its own delivery loop, cursor and policies.
    public var sinks: [SinkConfiguration]
    /// The consent state's starting point and policies.
    public var consent: ConsentConfiguration
    /// The log level (`"logLevel"`; `ferryd --log-level` overrides it). Reloadable.
    public var logLevel: Logger.Level = .info
    /// The optional HTTP endpoint for Prometheus (`GET /metrics`); off by default.
    public var metrics: Metrics
    /// The settings of the ingest paths that have a table (not ZeroMQ), read by their kinds from their tables
    /// (the local HTTP API's, key `http`, by `FerryHTTPIngest`).
    public var ingestPaths = IngestPaths()
    /// The tracking plan and its action (key `quality`, docs/QUALITY.md). Reloadable but for
    /// `quality.quarantineMaxBytes`.
    public var quality = Quality()
    /// PII redaction before the write (key `redact`, docs/QUALITY.md); nil for none. Reloadable.
    public var redact: Redaction?

    /// Where `ferryd` serves `GET /metrics` (the same exposition as `ferry metrics`).
    public struct Metrics: Sendable, Hashable {
        /// `host:port` to listen on (`"127.0.0.1:9464"`, `"[::1]:9464"`); a bare port or
        /// `:port` listens on the loopback address 127.0.0.1. nil (the default): no HTTP endpoint.
        public var listen: String?

        /// The default port of the endpoint (the Prometheus exporter port registered for it).
        public static let defaultPort = 9464

        /// Creates a metrics configuration.
        public init(listen: String? = nil) { self.listen = listen }

        /// ``listen`` as a host and a port (nil when off); throws ``AgentError`` for an address
        /// it cannot read.
        public func listenAddress() throws -> (host: String, port: Int)? {
            guard let listen else { return nil }
            return try Self.address(listen, key: "metrics.listen")
        }

        /// `listen` (`host:port`, `[ipv6]:port`, `:port` or a port) as a host and a port; throws
        /// ``AgentError`` naming the configuration `key` it came from.
        package static func address(_ listen: String, key: String) throws -> (host: String, port: Int) {
            func fail() -> AgentError {
                AgentError(code: .configuration, message: "\(key) \"\(listen)\" must be host:port, [ipv6]:port or a port")
            }
            var host = "127.0.0.1", portText = Substring(listen)
            if listen.hasPrefix("[") {
                guard let close = listen.firstIndex(of: "]"), listen[listen.index(after: close)...].hasPrefix(":") else { throw fail() }
                host = String(listen[listen.index(after: listen.startIndex)..<close])
                portText = listen[listen.index(close, offsetBy: 2)...]
            } else if let colon = listen.lastIndex(of: ":") {
                if colon != listen.startIndex { host = String(listen[..<colon]) }
                portText = listen[listen.index(after: colon)...]
            }
            guard !host.isEmpty, let port = Int(portText), (0...65535).contains(port) else { throw fail() }
            return (host, port)
        }
    }

    /// Duplicate detection: the session table for clients that send a session (protocol 2), and
    /// the id window for those that do not. See docs/PROTOCOL.md, "Exactly once".
    public struct Dedup: Sendable, Hashable {
        /// Most ids the id window remembers.
        public var maxEntries: Int
        /// Longest the id window remembers an id, in seconds.
        public var maxAgeSeconds: Int
        /// A session that stored nothing for this long is forgotten (its open gaps are reported
        /// lost); a re-send after that is judged by the id window only.
        public var sessionIdleSeconds: Int
        /// Most sessions remembered at once (least recently seen forgotten first).
        public var maxSessions: Int
        /// A gap in a session's sequence still open after this long is reported as lost events.
        public var lossGraceSeconds: Int
        /// Creates a dedup configuration.
        public init(maxEntries: Int = 100_000, maxAgeSeconds: Int = 900, sessionIdleSeconds: Int = 3600,
                    maxSessions: Int = 65_536, lossGraceSeconds: Int = 30) {
            self.maxEntries = maxEntries
            self.maxAgeSeconds = maxAgeSeconds
            self.sessionIdleSeconds = sessionIdleSeconds
            self.maxSessions = maxSessions
            self.lossGraceSeconds = lossGraceSeconds
        }
    }

    /// Defaults for the sinks' batching and retry (see ``SinkConfiguration``).
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

    /// Creates a configuration; every argument has a default. `mode` picks the default
    /// directories (`/run/ferry` and `/var/lib/ferry` for ``Mode/system``) and access policy.
    /// `sinks` defaults to none: a configuration names its sinks, or takes the default sink of
    /// the registry it is loaded with (`ferryd`'s: the file sink `file`,
    /// ``SinkRegistry/defaultSinks(delivery:)``).
    public init(
        mode: Mode = .user,
        access: AccessPolicy? = nil,
        runtimeDirectory: String? = nil,
        dataDirectory: String? = nil,
        maxEventBytes: Int = 64 << 10,
        log: LogConfiguration = LogConfiguration(),
        dedup: Dedup = Dedup(),
        delivery: Delivery = Delivery(),
        sinks: [SinkConfiguration] = [],
        consent: ConsentConfiguration = ConsentConfiguration(),
        metrics: Metrics = Metrics()
    ) {
        self.consent = consent
        self.metrics = metrics
        self.mode = mode
        self.access = access ?? AccessPolicy.defaults(for: mode)
        self.runtimeDirectory = runtimeDirectory
            ?? (mode == .system ? FerryPaths.systemRuntimeDirectory : FerryPaths.runtimeDirectory())
        self.dataDirectory = dataDirectory ?? (mode == .system ? FerryPaths.systemDataDirectory : FerryPaths.dataDirectory())
        self.maxEventBytes = maxEventBytes
        self.log = log
        self.dedup = dedup
        self.delivery = delivery
        self.sinks = sinks
    }

    /// ``LogConfiguration/uidSharePercent`` with the mode's default applied: 50 for a system
    /// agent, 100 (no limit) per user.
    public var effectiveUIDSharePercent: Int { log.uidSharePercent ?? (mode == .system ? 50 : 100) }

    /// The first sink's local directory (the first file sink's) once defaults are applied
    /// (`<data dir>/delivered` if none).
    public var fileSinkDirectory: String {
        sinks.lazy.compactMap { $0.fileDirectory(dataDirectory: self.dataDirectory) }.first ?? dataDirectory + "/delivered"
    }

    /// Checks the values for consistency; throws ``AgentError`` with code `configuration`
    /// whose message lists every problem found, one a line.
    public func validate() throws {
        let problems = self.problems()
        if !problems.isEmpty { throw AgentError(code: .configuration, message: problems.joined(separator: "\n")) }
    }

    /// Every problem of the values, one message each, in a stable order (``validate()`` throws
    /// them together; `ferryd validate` lists them).
    public func problems() -> [String] {
        var problems: [String] = []
        func check(_ ok: Bool, _ message: @autoclosure () -> String) { if !ok { problems.append(message()) } }
        func collect(_ body: () throws -> Void) {
            do { try body() } catch let error as AgentError { problems += error.message.split(separator: "\n").map(String.init) } catch {
                problems.append("\(error)")
            }
        }
        check(maxEventBytes >= WireEvent.fixedHeaderSize, "maxEventBytes must be at least \(WireEvent.fixedHeaderSize)")
        check(maxEventBytes <= LogRecord.maxBodySize - LogRecord.bodyPrefixSize,
              "maxEventBytes must be at most \(LogRecord.maxBodySize - LogRecord.bodyPrefixSize)")
        check(log.segmentMaxBytes >= 4096, "log.segmentMaxBytes must be at least 4096")
        if let share = log.uidSharePercent { check((1...100).contains(share), "log.uidSharePercent must be 1 to 100") }
        check((0...LogConfiguration.maxCommitDelayMicroseconds).contains(log.commitDelayMicroseconds),
              "log.commitDelayMicroseconds must be 0 to \(LogConfiguration.maxCommitDelayMicroseconds)")
        check(log.commitSiblings >= 1, "log.commitSiblings must be at least 1")
        // Halving the cap, not doubling the segment size: a huge segmentMaxBytes must not overflow.
        check(log.segmentMaxBytes <= log.retentionMaxBytes / 2,
              "log.retentionMaxBytes (\(log.retentionMaxBytes)) must be at least twice log.segmentMaxBytes (\(log.segmentMaxBytes))")
        check(dedup.maxEntries > 0 && dedup.maxAgeSeconds > 0 && dedup.sessionIdleSeconds > 0 && dedup.maxSessions > 0
              && dedup.lossGraceSeconds > 0, "dedup limits must be positive")
        check(delivery.batchMaxEvents > 0 && delivery.batchMaxBytes > 0, "delivery batch limits must be positive")
        collect { try consent.validate() }
        check(!runtimeDirectory.isEmpty && !dataDirectory.isEmpty, "directories must not be empty")
        check(!sinks.isEmpty, "at least one sink is needed")
        // A system agent guards its bus with the socket file's group: checked here, so that
        // `ferryd validate --system` (the unit's ExecStartPre) refuses what the start would.
        if mode == .system { collect { try AccessControl.checkBusRule(access.events) } }
        collect { _ = try metrics.listenAddress() }
        for key in ingestPaths.keys { collect { try ingestPaths[key]?.validate() } }
        check(quality.quarantineMaxBytes >= 4096, "quality.quarantineMaxBytes must be at least 4096")
        var names: Set<String> = [], fileDirectories: [String: String] = [:]
        for (index, sink) in sinks.enumerated() {
            problems += sink.problems(keyPath: "sinks[\(index)]")
            problems += sink.policyProblems(label: "sinks[\(index)]: sink \"\(sink.name)\"", categories: Set(consent.categories.keys))
            check(names.insert(sink.name).inserted, "two sinks are named \"\(sink.name)\"; names must be unique")
            if let directory = sink.fileDirectory(dataDirectory: dataDirectory) {
                if let other = fileDirectories[directory] {
                    problems.append("sinks \"\(other)\" and \"\(sink.name)\" both write to \(directory)")
                }
                fileDirectories[directory] = sink.name
            }
        }
        // ipc:// paths are limited by sockaddr_un (108 bytes on Linux).
        check(runtimeDirectory.utf8.count + "/control".utf8.count < 108,
              "runtimeDirectory is too long for a Unix socket path (max ~100 bytes): \(runtimeDirectory)")
        return problems
    }
}
