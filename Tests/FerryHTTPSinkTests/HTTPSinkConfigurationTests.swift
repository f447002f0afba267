@testable import FerryFileSink
import Foundation
@testable import FerryAgent
import FerryTestKit
@testable import FerryStorage
@testable import FerryHTTPSink
import Testing

@Suite("HTTP sink configuration and Retry-After")
struct HTTPSinkConfigurationTests {
    static func load(_ json: String) throws -> AgentConfiguration {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.appending("ferryd.json")
        try writeBytes(Array(json.utf8), to: path)
        return try AgentConfiguration.load(fromFile: path, sinkKinds: .builtIn.registering(.http))
    }

    static func error(_ json: String) -> String {
        do {
            _ = try load(json)
            return "<no error>"
        } catch {
            return "\(error)"
        }
    }

    @Test("every key of an http sink is read")
    func fullConfiguration() throws {
        let config = try Self.load(#"""
        {"sink": {"type": "http", "url": "https://collector.example/v1/batch", "headers": {"X-Tenant": "acme"},
                  "tokenFile": "/etc/ferry/token", "tlsVerify": false, "caFile": "/etc/ferry/ca.pem",
                  "requestTimeoutMilliseconds": 5000, "connectTimeoutMilliseconds": 1000,
                  "format": "segment", "gzip": true}}
        """#)
        #expect(config.sinks.first?.settings(as: HTTPSinkConfiguration.self) == .http(HTTPSinkConfiguration(
            url: "https://collector.example/v1/batch", headers: ["X-Tenant": "acme"], tokenFile: "/etc/ferry/token",
            tlsVerify: false, caFile: "/etc/ferry/ca.pem", requestTimeoutMilliseconds: 5000,
            connectTimeoutMilliseconds: 1000, format: .segment, gzip: true)))
    }

    @Test("defaults: envelope, no gzip, TLS verified, 30 s request and 10 s connect timeouts")
    func defaults() throws {
        let config = try Self.load(#"{"sink": {"type": "http", "url": "http://127.0.0.1:8080/ingest"}}"#)
        guard let http = config.sinks.first?.settings(as: HTTPSinkConfiguration.self) else {
            Issue.record("expected an http sink")
            return
        }
        #expect(http == HTTPSinkConfiguration(url: "http://127.0.0.1:8080/ingest"))
        #expect(http.format == .envelope && !http.gzip && http.tlsVerify)
        #expect(http.requestTimeoutMilliseconds == 30_000 && http.connectTimeoutMilliseconds == 10_000)
    }

    @Test("the file sink still loads, with or without a type")
    func fileSink() throws {
        #expect(try Self.load(#"{"sink": {"directory": "/x"}}"#).sinks.first?.settings(as: FileSinkSettings.self) == .file(directory: "/x", maxFileBytes: 64 << 20))
        #expect(try Self.load(#"{"sink": {"type": "file", "maxFileBytes": 4096}}"#).sinks.first?.settings(as: FileSinkSettings.self) == .file(directory: nil, maxFileBytes: 4096))
    }

    @Test("mistakes are errors naming the key", arguments: [
        (#"{"sink": {"type": "http"}}"#, "sink.url: required"),
        (#"{"sink": {"type": "http", "url": "x", "token": "abc"}}"#, "sink.token: unknown key"),
        (#"{"sink": {"type": "http", "url": "http://h/", "directory": "/x"}}"#, "sink.directory: unknown key"),
        (#"{"sink": {"type": "file", "url": "http://h/"}}"#, "sink.url: unknown key"),
        (#"{"sink": {"type": "kafka"}}"#, "sink.type: expected one of: file, http"),
        (#"{"sink": {"type": 3}}"#, "sink.type: expected one of: file, http"),
        (#"{"sink": "http"}"#, "sink: expected an object"),
        (#"{"sink": {"type": "http", "url": "http://h/", "gzip": 1}}"#, "sink.gzip: expected true or false"),
        (#"{"sink": {"type": "http", "url": "http://h/", "tlsVerify": "no"}}"#, "sink.tlsVerify: expected true or false"),
        (#"{"sink": {"type": "http", "url": "http://h/", "format": "xml"}}"#, "sink.format: expected one of: envelope, segment"),
        (#"{"sink": {"type": "http", "url": "http://h/", "headers": {"X-A": 1}}}"#, "sink.headers.X-A: expected a string"),
        (#"{"sink": {"type": "http", "url": "ftp://h/"}}"#, "url must be an absolute http:// or https:// URL"),
        (#"{"sink": {"type": "http", "url": "/relative"}}"#, "url must be an absolute http:// or https:// URL"),
        (#"{"sink": {"type": "http", "url": "https://u:p@h/"}}"#, "url must not contain credentials"),
        (#"{"sink": {"type": "http", "url": "http://h/", "tokenFile": "/t", "tokenEnvironment": "T"}}"#, "at most one of tokenFile, tokenEnvironment and writeKeyFile"),
        (#"{"sink": {"type": "http", "url": "http://h/", "tokenFile": "/t", "writeKeyFile": "/k"}}"#, "at most one of tokenFile, tokenEnvironment and writeKeyFile"),
        (#"{"sink": {"type": "http", "url": "http://h/", "tokenEnvironment": "T", "writeKeyFile": "/k"}}"#, "at most one of tokenFile, tokenEnvironment and writeKeyFile"),
        (#"{"sink": {"type": "http", "url": "http://h/", "writeKeyFile": ""}}"#, "writeKeyFile must not be empty"),
        (#"{"sink": {"type": "http", "url": "http://h/", "writeKeyFile": 7}}"#, "sink.writeKeyFile: expected a string"),
        (#"{"sink": {"type": "http", "url": "http://h/", "writeKey": "abc"}}"#, "sink.writeKey: unknown key"),
        (#"{"sink": {"type": "http", "url": "http://h/", "headers": {"Authorization": "Bearer x"}}}"#, "use tokenFile, tokenEnvironment or writeKeyFile"),
        (#"{"sink": {"type": "http", "url": "http://h/", "headers": {"Content-Type": "text/plain"}}}"#, "set by the sink"),
        (#"{"sink": {"type": "http", "url": "http://h/", "headers": {"Bad Name": "x"}}}"#, "not a valid HTTP field name"),
        (#"{"sink": {"type": "http", "url": "http://h/", "requestTimeoutMilliseconds": 0}}"#, "must be positive"),
    ])
    func mistakes(json: String, expected: String) {
        let message = Self.error(json)
        #expect(message.contains(expected), "\(message)")
        #expect(message.contains("configuration"), "\(message)")
    }

    @Test("the description names where the token comes from, never header values")
    func description() {
        let config = HTTPSinkConfiguration(url: "https://c.example/", headers: ["X-Api-Key": "secret-value"], tokenEnvironment: "FERRY_TOKEN")
        #expect(config.description.contains("token: <redacted, from $FERRY_TOKEN>"))
        #expect(config.description.contains("X-Api-Key"))
        #expect(!config.description.contains("secret-value"))
        let segment = HTTPSinkConfiguration(url: "https://api.segment.io/v1/batch", writeKeyFile: "/etc/ferry/segment.key", format: .segment)
        #expect(segment.description.contains("writeKey: <redacted, from file /etc/ferry/segment.key>"))
    }

    @Test("writeKeyFile is read from the file")
    func writeKeyFile() throws {
        let config = try Self.load(#"""
        {"sink": {"type": "http", "url": "https://api.segment.io/v1/batch", "writeKeyFile": "/etc/ferry/segment.key", "format": "segment"}}
        """#)
        #expect(config.sinks.first?.settings(as: HTTPSinkConfiguration.self) == .http(HTTPSinkConfiguration(
            url: "https://api.segment.io/v1/batch", writeKeyFile: "/etc/ferry/segment.key", format: .segment)))
    }

    // MARK: Retry-After

    /// 2024-05-01T12:00:00Z.
    static let now: UInt64 = 1_714_564_800_000

    @Test("Retry-After values", arguments: [
        ("0", Duration.zero), ("7", .seconds(7)), (" 120 ", .seconds(120)), ("3600", .seconds(3600)),
        ("3601", RetryAfter.maximum), ("99999999999999999999", RetryAfter.maximum),
        // IMF-fixdate, RFC 850 and asctime, 90 s after `now`.
        ("Wed, 01 May 2024 12:01:30 GMT", .seconds(90)),
        ("Wednesday, 01-May-24 12:01:30 GMT", .seconds(90)),
        ("Wed May  1 12:01:30 2024", .seconds(90)),
        // In the past: now.
        ("Sun, 06 Nov 1994 08:49:37 GMT", .zero), ("Wed, 01 May 2024 11:59:59 GMT", .zero),
        ("Sunday, 06-Nov-94 08:49:37 GMT", .zero),
        // Far in the future: capped.
        ("Fri, 31 Dec 9999 23:59:59 GMT", RetryAfter.maximum),
        // Leap day.
        ("Thu, 29 Feb 2024 00:00:00 GMT", .zero),
    ] as [(String, Duration)])
    func retryAfter(value: String, expected: Duration) {
        #expect(RetryAfter.delay(value, now: Self.now) == expected)
    }

    @Test("garbage Retry-After values mean normal backoff", arguments: [
        "", " ", "-1", "1.5", "+5", "5s", "soon", "0x10",
        "Wed, 01 May 2024 12:01:30 UTC", "Wed, 1 May 2024 12:01:30 GMT", "Wed, 01 Foo 2024 12:01:30 GMT",
        "Wed, 31 Apr 2024 12:01:30 GMT", "Wed, 30 Feb 2024 12:01:30 GMT", "Wed, 01 May 2024 24:00:00 GMT",
        "Wed, 01 May 2024 12:1:30 GMT", "Xyz, 01 May 2024 12:01:30 GMT", "Wednesday, 01-May-2024 12:01:30 GMT",
        "Wed May 1 12:01:30", "Wed, 01 May 2024 12:01:30 GMT extra",
    ])
    func garbage(value: String) {
        #expect(RetryAfter.delay(value, now: Self.now) == nil, "\(value)")
    }

    @Test("RFC 850 two-digit years: more than 50 years ahead means the previous century")
    func twoDigitYears() {
        // Seen in 2024: "49" is 2049 (ahead, capped), "94" is 1994 (past).
        #expect(RetryAfter.delay("Monday, 01-Jan-49 00:00:00 GMT", now: Self.now) == RetryAfter.maximum)
        #expect(RetryAfter.delay("Monday, 01-Jan-94 00:00:00 GMT", now: Self.now) == .zero)
    }

    @Test("ISO 8601 and the civil calendar agree with Foundation")
    func iso8601() {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        for milliseconds: UInt64 in [0, 951_782_400_000, 1_714_564_799_500, 4_102_444_800_250, 253_402_300_799_000] {
            let expected = formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
            #expect(CivilTime.iso8601(milliseconds: milliseconds) == expected)
        }
    }
}
