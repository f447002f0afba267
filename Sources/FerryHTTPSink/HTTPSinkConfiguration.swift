import FerryAgent
import FerryStorage
import Foundation

/// How the HTTP sink posts batches to a collector. See `docs/HTTP-SINK.md`.
///
/// Credentials are never part of the configuration: only where to read them from
/// (``tokenFile`` or ``tokenEnvironment`` for a bearer token, ``writeKeyFile`` for a Segment
/// write key), so they stay out of config files, command lines, `ferry status` and logs.
public struct HTTPSinkConfiguration: Sendable, Hashable, CustomStringConvertible {
    /// The JSON shape of a request body.
    public enum BodyFormat: String, Sendable, Hashable, CaseIterable {
        /// `{"batch_id", "sent_at", "consent", "events": [...]}` with Ferry's own event objects.
        case envelope
        /// A batch for Segment's HTTP tracking API (`/v1/batch`) and compatible collectors:
        /// `{"batch": [...], "sentAt", "context": {"consent"}}`, split to Segment's limits
        /// (32 KB per message, 500 KB per request; see `docs/HTTP-SINK.md`).
        case segment
    }

    /// The collector's URL (`http://` or `https://`); batches are POSTed to it. Must not carry
    /// credentials (`user:pass@`): use ``tokenFile``, ``tokenEnvironment`` or ``writeKeyFile``.
    public var url: String
    /// Extra request headers (for example a tenant id). Values are never logged. The headers
    /// the sink sets itself (``reservedHeaders``) cannot be overridden.
    public var headers: [String: String]
    /// A file holding the bearer token (surrounding whitespace ignored), sent as
    /// `Authorization: Bearer <token>`. Read when the agent starts and again after a reload.
    public var tokenFile: String?
    /// The name of an environment variable of `ferryd` holding the bearer token.
    public var tokenEnvironment: String?
    /// A file holding a Segment write key (surrounding whitespace ignored), sent as HTTP Basic
    /// authentication with the key as the user name and an empty password:
    /// `Authorization: Basic base64("<key>:")`. Read when the agent starts and again after a
    /// reload. At most one of ``tokenFile``, ``tokenEnvironment`` and this.
    public var writeKeyFile: String?
    /// Whether the server's TLS certificate and host name are verified (default `true`).
    public var tlsVerify: Bool
    /// A PEM file of CA certificates to trust instead of the system's.
    public var caFile: String?
    /// Longest a request may take, connection included, before it counts as failed (retried).
    public var requestTimeoutMilliseconds: Int
    /// Longest a connection attempt may take.
    public var connectTimeoutMilliseconds: Int
    /// The body shape.
    public var format: BodyFormat
    /// Whether bodies are gzip-compressed (`Content-Encoding: gzip`).
    public var gzip: Bool
    /// The body version (`bodyVersion`): 2, the default, carries the consent stamp of
    /// docs/PROTOCOL.md ("Consent stamp": `consent_seq` a number, `ad_personalization`) and, in
    /// `envelope`, a leading `"version":2`; 1 is the body before it (`consent_seq` a string,
    /// `ads_personalization`, no `version`), for consumers not yet updated.
    public var bodyVersion: Int = HTTPSinkConfiguration.currentBodyVersion
    /// Where and how `ferry forget --user` reaches the collector (`erasure`; docs/HTTP-SINK.md,
    /// "Erasure").
    public var erasure = Erasure()

    /// The `erasure` keys: how a user's erasure is carried upstream.
    public struct Erasure: Sendable, Hashable {
        /// `envelope`: where the erasure message is POSTed (`erasure.url`); `nil`: the sink's ``url``.
        public var url: String?
        /// `segment`: the base URL of Segment's Public API (`erasure.apiURL`).
        public var apiURL: String
        /// `segment`: a file holding a Segment Public API token (`erasure.tokenFile`), sent as
        /// `Authorization: Bearer <token>`; checked like ``tokenFile``. Without it the `segment`
        /// sink cannot erase: each request fails for good, in the audit log.
        public var tokenFile: String?

        /// Segment's Public API.
        public static let defaultAPIURL = "https://api.segmentapis.com"

        /// Creates erasure settings.
        public init(url: String? = nil, apiURL: String = Erasure.defaultAPIURL, tokenFile: String? = nil) {
            self.url = url
            self.apiURL = apiURL
            self.tokenFile = tokenFile
        }
    }

    /// The newest body version, sent by default.
    public static let currentBodyVersion = 2
    /// The body versions this sink can send.
    public static let bodyVersions = 1...2

    /// Headers the sink sets itself; ``headers`` may not name them (case-insensitive).
    public static let reservedHeaders: Set<String> = [
        "authorization", "content-type", "content-encoding", "content-length", "transfer-encoding",
        "host", "idempotency-key", "ferry-batch-size", "user-agent",
    ]

    /// Creates a configuration; only `url` is required.
    public init(
        url: String, headers: [String: String] = [:], tokenFile: String? = nil, tokenEnvironment: String? = nil,
        writeKeyFile: String? = nil, tlsVerify: Bool = true, caFile: String? = nil, requestTimeoutMilliseconds: Int = 30_000,
        connectTimeoutMilliseconds: Int = 10_000, format: BodyFormat = .envelope, gzip: Bool = false
    ) {
        self.url = url
        self.headers = headers
        self.tokenFile = tokenFile
        self.tokenEnvironment = tokenEnvironment
        self.writeKeyFile = writeKeyFile
        self.tlsVerify = tlsVerify
        self.caFile = caFile
        self.requestTimeoutMilliseconds = requestTimeoutMilliseconds
        self.connectTimeoutMilliseconds = connectTimeoutMilliseconds
        self.format = format
        self.gzip = gzip
    }

    /// Checks the values; throws ``AgentError`` with code `configuration` listing every problem
    /// of ``problems``, one a line.
    public func validate() throws {
        let problems = problems()
        guard problems.isEmpty else {
            throw AgentError(code: .configuration, message: problems.map { "sink (http): " + $0 }.joined(separator: "\n"))
        }
    }

    /// Every problem of the values, one message each, in the order of the keys below (not only
    /// the first: `ferryd validate` lists them all); empty when the values are fine.
    public func problems() -> [String] {
        var problems: [String] = []
        if let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
           scheme == "http" || scheme == "https", let host = components.host, !host.isEmpty {
            if components.user != nil || components.password != nil {
                problems.append("url must not contain credentials; use tokenFile, tokenEnvironment or writeKeyFile")
            }
        } else {
            problems.append("url must be an absolute http:// or https:// URL with a host")
        }
        if [tokenFile, tokenEnvironment, writeKeyFile].compactMap({ $0 }).count > 1 {
            problems.append("set at most one of tokenFile, tokenEnvironment and writeKeyFile")
        }
        for (key, value) in [("tokenFile", tokenFile), ("writeKeyFile", writeKeyFile), ("tokenEnvironment", tokenEnvironment),
                             ("caFile", caFile)] where value?.isEmpty == true {
            problems.append("\(key) must not be empty")
        }
        for (key, value) in [("erasure.url", erasure.url), ("erasure.apiURL", erasure.apiURL)] {
            guard let value else { continue }
            let parts = URLComponents(string: value)
            let scheme = parts?.scheme?.lowercased()
            if scheme != "http" && scheme != "https" || parts?.host?.isEmpty != false || parts?.user != nil || parts?.password != nil {
                problems.append("\(key) must be an absolute http:// or https:// URL with a host and no credentials")
            }
        }
        if let tokenFile = erasure.tokenFile, tokenFile.isEmpty { problems.append("erasure.tokenFile must not be empty") }
        if !Self.bodyVersions.contains(bodyVersion) {
            problems.append("bodyVersion must be \(Self.bodyVersions.map(String.init).joined(separator: " or ")), not \(bodyVersion)")
        }
        if requestTimeoutMilliseconds <= 0 || connectTimeoutMilliseconds <= 0 {
            problems.append("requestTimeoutMilliseconds and connectTimeoutMilliseconds must be positive")
        }
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) {
            if name.isEmpty || !name.utf8.allSatisfy(Self.isTokenCharacter) {
                problems.append("header name \"\(name)\" is not a valid HTTP field name")
            } else if Self.reservedHeaders.contains(name.lowercased()) {
                problems.append("header \(name) is set by the sink and cannot be configured"
                    + (name.lowercased() == "authorization" ? " (use tokenFile, tokenEnvironment or writeKeyFile)" : ""))
            }
            if !value.utf8.allSatisfy({ $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }) {
                problems.append("header \(name) has a control character in its value")
            }
        }
        return problems
    }

    /// `!#$%&'*+-.^_`|~`, digits and letters (RFC 9110 `tchar`).
    static func isTokenCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        default:
            Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }

    /// A description safe for logs: header values are left out, and the token or write key only
    /// appears as where it comes from.
    public var description: String {
        var parts = ["url: \(url)", "format: \(format.rawValue)", "gzip: \(gzip)", "tlsVerify: \(tlsVerify)"]
        if let caFile { parts.append("caFile: \(caFile)") }
        if let tokenFile { parts.append("token: <redacted, from file \(tokenFile)>") }
        if let tokenEnvironment { parts.append("token: <redacted, from $\(tokenEnvironment)>") }
        if let writeKeyFile { parts.append("writeKey: <redacted, from file \(writeKeyFile)>") }
        if let url = erasure.url { parts.append("erasure.url: \(url)") }
        if let tokenFile = erasure.tokenFile { parts += ["erasure.apiURL: \(erasure.apiURL)", "erasure.token: <redacted, from file \(tokenFile)>"] }
        if !headers.isEmpty { parts.append("headers: \(headers.keys.sorted().joined(separator: ", ")) (values redacted)") }
        parts.append("requestTimeoutMilliseconds: \(requestTimeoutMilliseconds)")
        parts.append("connectTimeoutMilliseconds: \(connectTimeoutMilliseconds)")
        return "HTTPSinkConfiguration(" + parts.joined(separator: ", ") + ")"
    }
}

extension HTTPSinkConfiguration: SinkSettings {
    public static let type = "http"

    public func validate(name: String) throws {
        try validate()
    }

    /// Nothing about the host or the process in `segment` (a third party), everything in `envelope`.
    public var defaultDisclosure: Disclosure { HTTPBatchBody.defaultDisclosure(format) }

    public func makeSink(_ context: SinkContext) -> any Sink {
        HTTPSink(name: context.name, configuration: self, logger: context.logger, io: context.io)
    }

    /// The credential (`tokenFile`, `tokenEnvironment` or `writeKeyFile`), `erasure.tokenFile`
    /// (format `segment`) and `caFile`, read as the sink reads them at start.
    public func checkFiles() -> [String] {
        HTTPSink.fileProblems(self)
    }

    /// `url=… format=… gzip=…`, where the credential comes from, the CA file.
    public var summary: String {
        var parts = ["url=\(url)", "format=\(format.rawValue)", "gzip=\(gzip)", "tlsVerify=\(tlsVerify)"]
        if let caFile { parts.append("caFile=\(caFile)") }
        if let tokenFile { parts.append("tokenFile=\(tokenFile)") }
        if let tokenEnvironment { parts.append("tokenEnvironment=\(tokenEnvironment)") }
        if let writeKeyFile { parts.append("writeKeyFile=\(writeKeyFile)") }
        return parts.joined(separator: " ")
    }
}

extension SinkSettings where Self == HTTPSinkConfiguration {
    /// POSTs batches to an HTTP collector (see `docs/HTTP-SINK.md`).
    public static func http(_ configuration: HTTPSinkConfiguration) -> HTTPSinkConfiguration { configuration }
}

extension SinkKind {
    /// The HTTP sink, `"type": "http"` (see `docs/HTTP-SINK.md` for its keys).
    public static let http = SinkKind(HTTPSinkConfiguration.self) { object, fields, keyPath in
        try HTTPSinkConfiguration.parse(object, reader: &fields, at: keyPath)
    }
}
