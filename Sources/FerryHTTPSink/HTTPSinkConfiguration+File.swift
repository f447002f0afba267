import FerryAgent
import Foundation

extension HTTPSinkConfiguration {
    /// Reads the `sink` object of a configuration file whose `type` is `"http"`. Unknown keys are
    /// an error; `url` is required. `path` (the file) and `prefix` (the key path, `sink`) make
    /// the error messages precise.
    ///
    /// ```json
    /// {"type": "http", "url": "https://collector.example/v1/batch", "tokenFile": "/etc/ferry/token",
    ///  "headers": {"X-Tenant": "acme"}, "format": "envelope", "gzip": true,
    ///  "requestTimeoutMilliseconds": 30000, "connectTimeoutMilliseconds": 10000,
    ///  "tlsVerify": true, "caFile": "/etc/ferry/ca.pem"}
    /// ```
    ///
    /// For Segment: `{"type": "http", "url": "https://api.segment.io/v1/batch", "format": "segment",
    /// "writeKeyFile": "/etc/ferry/segment.key"}` (at most one of `tokenFile`, `tokenEnvironment`,
    /// `writeKeyFile`). The keys every sink shares (`name`, `batch`, `retry`, `circuit`,
    /// `disclose`) are read by the agent's configuration loader, not here.
    ///
    /// `reader` is the loader's: a wrong key is reported with every other error of the file, and
    /// an unknown key's message lists the shared keys too.
    static func parse(_ object: [String: Any], reader: inout FieldReader, at prefix: String) throws -> HTTPSinkConfiguration {
        var config = HTTPSinkConfiguration(url: "")
        try reader.apply(object, [
            "type": .choice(["http"]) { _ in },
            "url": .string { config.url = $0 },
            "headers": .stringMap { config.headers = $0 },
            "tokenFile": .string { config.tokenFile = $0 },
            "tokenEnvironment": .string { config.tokenEnvironment = $0 },
            "writeKeyFile": .string { config.writeKeyFile = $0 },
            "tlsVerify": .bool { config.tlsVerify = $0 },
            "caFile": .string { config.caFile = $0 },
            "requestTimeoutMilliseconds": .int { config.requestTimeoutMilliseconds = $0 },
            "connectTimeoutMilliseconds": .int { config.connectTimeoutMilliseconds = $0 },
            "format": .choice(BodyFormat.allCases.map(\.rawValue)) { config.format = BodyFormat(rawValue: $0)! },
            "gzip": .bool { config.gzip = $0 },
            "bodyVersion": .int { config.bodyVersion = $0 },
            "erasure": .object([
                "url": .string { config.erasure.url = $0 },
                "apiURL": .string { config.erasure.apiURL = $0 },
                "tokenFile": .string { config.erasure.tokenFile = $0 },
            ]),
        ], at: prefix)
        guard object["url"] != nil else { throw reader.fail(prefix + ".url", "required for an http sink") }
        // The values are checked with the rest of the file (every problem, each with its key
        // path: `SinkConfiguration.problems(keyPath:)`), not here one at a time.
        return config
    }
}
