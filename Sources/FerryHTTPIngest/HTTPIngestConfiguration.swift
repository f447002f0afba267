import FerryAgent
import Foundation

/// The local Segment-compatible HTTP API's settings (see docs/HTTP-INGEST.md): `POST /v1/batch`,
/// `/v1/track` … on a Unix socket in the runtime directory (on by default) and, optionally, on a
/// TCP listener. The configuration file's table `http`, read by ``IngestPathKind/http`` (the
/// agent core holds no HTTP setting); who may send is `access.ingest`, the same policy as for the
/// ZeroMQ ingest socket. A configuration's are ``FerryAgent/AgentConfiguration/httpIngest``.
public struct HTTPIngestConfiguration: IngestPathSettings {
    /// Serve on the Unix socket `<runtimeDirectory>/http` (`curl --unix-socket`). Default true.
    public var socket: Bool
    /// `host:port` of a TCP listener (`"127.0.0.1:8088"`, `"[::1]:8088"`, or a port for
    /// 127.0.0.1); nil (the default): none. The sender's uid is read from `/proc/net/tcp`.
    public var listen: String?
    /// Let ``listen`` name an address that is not loopback. Default false: such an address
    /// is refused at start (a remote sender has no uid the kernel can tell).
    public var allowNonLoopback: Bool
    /// Write keys and the source name each gives its events (optional); an event sent with
    /// another key, or none, gets the source `http`.
    public var writeKeys: [String: String]
    /// The most connections each listener keeps open; more are answered 503 and closed.
    /// Default 256 (the unit's `LimitNOFILE` covers two listeners at this figure).
    public var maxConnections: Int
    /// Names the TCP listener answers to besides its own (`127.0.0.1`, `localhost`, `[::1]`
    /// and the host of ``listen``), as a request's `Host` header gives them (`"ferry.local"`,
    /// `"[fd00::1]"`; a port is not part of the name). A request naming any other host is
    /// answered 421 (DNS rebinding). Default none; the Unix socket does not check `Host`.
    public var allowedHosts: [String]
    /// Web origins (`scheme://host[:port]`, as browsers send them in `Origin`) whose pages may
    /// send events. A request that carries an `Origin` not listed is answered 403 on every
    /// listener; one without an `Origin` (every server library) is not affected. Default none.
    public var allowedOrigins: [String]

    /// The source name of events sent without a mapped write key.
    public static let defaultSource = "http"
    /// The shortest id window (seconds) while the HTTP API is on: Segment's libraries expect
    /// retries to be dropped by `messageId` for about a day.
    public static let minimumDedupSeconds = 86_400

    /// Creates the HTTP API's configuration; every argument has a default.
    public init(socket: Bool = true, listen: String? = nil, allowNonLoopback: Bool = false,
                writeKeys: [String: String] = [:], maxConnections: Int = 256, allowedHosts: [String] = [],
                allowedOrigins: [String] = []) {
        self.socket = socket
        self.listen = listen
        self.allowNonLoopback = allowNonLoopback
        self.writeKeys = writeKeys
        self.maxConnections = maxConnections
        self.allowedHosts = allowedHosts
        self.allowedOrigins = allowedOrigins
    }

    /// Whether any listener is on.
    public var isEnabled: Bool { socket || listen != nil }

    /// ``listen`` as a host and a port (nil when off); throws ``AgentError`` for an address
    /// it cannot read, or a non-loopback one without ``allowNonLoopback``.
    public func listenAddress() throws -> (host: String, port: Int)? {
        guard let listen else { return nil }
        let address = try AgentConfiguration.Metrics.address(listen, key: "http.listen")
        let loopback = address.host == "localhost" || address.host == "::1" || address.host.hasPrefix("127.")
        guard loopback || allowNonLoopback else {
            throw AgentError(code: .configuration, message: "http.listen \"\(listen)\" is not a loopback address; "
                + "set http.allowNonLoopback to serve it (a remote sender has no uid the kernel can tell: only a policy of every user lets it in)")
        }
        return address
    }

    /// The key of its table in the configuration file.
    public static let key = "http"

    /// The defaults: the Unix socket, no TCP listener.
    public init() {
        self.init(socket: true)
    }

    /// Checks the values; throws ``AgentError`` (code `configuration`) naming the key.
    public func validate() throws {
        func fail(_ message: String) -> AgentError { AgentError(code: .configuration, message: message) }
        guard (1...65_536).contains(maxConnections) else { throw fail("http.maxConnections must be 1 to 65536") }
        for (key, source) in writeKeys where key.isEmpty || source.isEmpty || source.utf8.count > 255 {
            throw fail("http.writeKeys: keys and source names must be non-empty (names at most 255 bytes)")
        }
        _ = try listenAddress()
        for host in allowedHosts where !Self.isHostName(host) {
            throw fail("http.allowedHosts: \"\(host)\" is not a host name (a name, an IPv4 address or a bracketed IPv6 address, without a port)")
        }
        for origin in allowedOrigins where !Self.isOrigin(origin) {
            throw fail("http.allowedOrigins: \"\(origin)\" is not an origin (scheme://host or scheme://host:port, no path)")
        }
    }

    /// The line of `ferryd validate` (after `http: `).
    public var summary: String {
        "socket=\(socket) listen=\(listen ?? "off") writeKeys=\(writeKeys.count) maxConnections=\(maxConnections)"
    }

    /// Applies the `http` table `object` (at key path `prefix`) over `base`: unknown keys and
    /// values of the wrong type are errors naming their key path (`http.listen: expected a
    /// string`); the values are checked by ``validate()`` with the rest of the configuration.
    ///
    /// ```json
    /// "http": {"socket": true, "listen": "127.0.0.1:8088", "writeKeys": {"key": "web"}, "maxConnections": 256,
    ///          "allowNonLoopback": false, "allowedHosts": ["ferry.local"], "allowedOrigins": ["http://app.local:3000"]}
    /// ```
    static func parse(_ object: [String: Any], base: HTTPIngestConfiguration, fields: inout FieldReader, at prefix: String) throws
        -> HTTPIngestConfiguration {
        let config = FieldBox(base)
        try fields.apply(object, [
            "socket": .bool { config.value.socket = $0 },
            "listen": .string { config.value.listen = $0 },
            "allowNonLoopback": .bool { config.value.allowNonLoopback = $0 },
            "writeKeys": .stringMap { config.value.writeKeys = $0 },
            "maxConnections": .int { config.value.maxConnections = $0 },
            "allowedHosts": .strings { config.value.allowedHosts = $0 },
            "allowedOrigins": .strings { config.value.allowedOrigins = $0 },
        ], at: prefix)
        return config.value
    }

    /// Whether `text` is a host as a `Host` header names it, without its port.
    static func isHostName(_ text: String) -> Bool {
        guard !text.isEmpty, text.utf8.count <= 255 else { return false }
        if text.hasPrefix("[") { return text.hasSuffix("]") && text.count > 2 && !text.dropFirst().dropLast().contains("]") }
        return text.allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." || $0 == "_" }
    }

    /// Whether `text` is a web origin: `scheme://host` with an optional port, nothing after.
    static func isOrigin(_ text: String) -> Bool {
        guard let separator = text.range(of: "://") else { return false }
        let scheme = text[..<separator.lowerBound], authority = text[separator.upperBound...]
        guard !scheme.isEmpty, scheme.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "+" || $0 == "-" || $0 == "." }),
              !authority.isEmpty, !authority.contains("/"), !authority.contains("?"), !authority.contains("#"),
              !authority.contains("@"), !authority.contains(" ") else { return false }
        return true
    }
}

extension AgentConfiguration {
    /// The local HTTP API's settings (the table `http`): its defaults when the configuration
    /// has none.
    public var httpIngest: HTTPIngestConfiguration {
        get { ingestPaths[HTTPIngestConfiguration.self] }
        set { ingestPaths[HTTPIngestConfiguration.self] = newValue }
    }
}

extension IngestPathMetricSet {
    /// The local HTTP API's metrics, labelled by listener (`unix`, `tcp`).
    public static let http = IngestPathMetricSet(
        requests: MetricDescriptor(
            "ferry_http_requests_total", .counter, labels: ["listener", "status"],
            help: "Requests to the local HTTP API answered, by listener (unix, tcp) and HTTP status."),
        events: MetricDescriptor(
            "ferry_http_events_total", .counter, labels: ["listener", "outcome"],
            help: "Events of the local HTTP API's requests, by listener and outcome (accepted, quarantined, duplicate, blocked, suppressed, refused, retry)."),
        connections: MetricDescriptor(
            "ferry_http_connections", .gauge, labels: ["listener"], help: "Open connections to the local HTTP API, by listener."))
}
