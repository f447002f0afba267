import FerryAgent
import FerryFileSink
import FerryProtocol
import Testing

@testable import FerryHTTPIngest

/// The defects of issue 29 in the HTTP API's pure parts: a message nested too deep, RudderStack's
/// `context.traits`, the error naming `http.listen`, and the `Host` / `Origin` policy.
@Suite struct IngestDefectTests {
    static func messages(_ json: String, endpoint: SegmentEndpoint = .batch) -> Result<[SegmentRequest.Message], IngestRefusal> {
        SegmentRequest.messages(
            body: Array(json.utf8), admitted: IngestVerdict.Admitted(endpoint: endpoint, gzip: false), authorization: nil,
            peer: SegmentRequest.Peer(uid: 1000, pid: 42), writeKeys: [:], categories: SegmentMappingTests.categories,
            typeCategories: SegmentMappingTests.typeCategories, now: 1_000, newID: { EventID(high: 7, low: 7) })
    }

    static func nested(_ levels: Int) -> String {
        String(repeating: #"{"a":"#, count: levels) + "1" + String(repeating: "}", count: levels)
    }

    @Test("a batch with one message nested past the limit refuses that message only, and keeps the others")
    func oneTooDeepMessageOfABatch() throws {
        let deep = #"{"type":"track","event":"e","userId":"u","messageId":"deep","properties":"# + Self.nested(100) + "}"
        let good = #"{"type":"track","event":"e","userId":"u","messageId":"good-1"}"#
        let other = #"{"type":"track","event":"e","userId":"u","messageId":"good-2"}"#
        let results = try Self.messages(#"{"batch":["# + [good, deep, other].joined(separator: ",") + "]}").get()
        #expect(results.count == 3)
        guard case .event(let first) = results[0], case .refused(let refusal) = results[1], case .event(let last) = results[2] else {
            Issue.record("expected event, refused, event: \(results)")
            return
        }
        #expect(first.messageID == "good-1")
        #expect(last.messageID == "good-2")
        #expect(refusal.messageID == "deep")
        #expect(refusal.code == "invalid_json")
        #expect(refusal.message.contains("deeper than \(JSONTape.maxDepth)"))
        #expect(refusal.id == SegmentMapping.eventID(uid: 1000, writeKey: "", messageID: "deep"))
        // The whole answer is a 200 naming the refused message.
        let response = IngestVerdict.response([(first.messageID, .accepted(held: false)),
                                               (refusal.messageID, .refused(code: refusal.code, message: refusal.message)),
                                               (last.messageID, .accepted(held: false))])
        #expect(response.status == 200)
    }

    @Test("nesting at the limit is a message like any other; past it, as the only message, a 400 invalid_json")
    func theLimitItself() throws {
        // The message object is level 1 on /v1/track: 63 more levels inside it make 64.
        let atLimit = #"{"event":"e","userId":"u","properties":"# + Self.nested(63) + "}"
        guard case .event = try Self.messages(atLimit, endpoint: .track).get().first else {
            Issue.record("a message at the limit was refused")
            return
        }
        let past = #"{"event":"e","userId":"u","properties":"# + Self.nested(64) + "}"
        guard case .refused(let refusal) = try Self.messages(past, endpoint: .track).get().first else {
            Issue.record("a message past the limit was accepted")
            return
        }
        #expect(refusal.code == "invalid_json")
        // Deep nesting outside any message (a batch-level member) still refuses the body.
        guard case .failure(let whole) = Self.messages(#"{"extra":"# + Self.nested(100) + #","batch":[{"type":"track","event":"e","userId":"u"}]}"#) else {
            Issue.record("deep nesting outside the messages was accepted")
            return
        }
        #expect(whole.status == 400 && whole.code == "invalid_json")
    }

    @Test("deep nesting is checked without recursion and must still be JSON", arguments: [
        (String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000), true),
        (String(repeating: "[", count: 100) + "1,{\"a\":[]}" + String(repeating: "]", count: 100), true),
        (String(repeating: "[", count: 100) + "1,}" + String(repeating: "]", count: 100), false),
        (String(repeating: "[", count: 100) + String(repeating: "]", count: 99), false),
        (String(repeating: "{\"k\":", count: 70) + "tru" + String(repeating: "}", count: 70), false),
    ])
    func deepSyntax(text: String, json: Bool) {
        let parsed = try? BodyValue.parse(Array(text.utf8))
        #expect((parsed != nil) == json)
        if let parsed { #expect(parsed.tooDeep.count == 1) }
        // The strict parse refuses any of it.
        #expect((try? JSONTape.parse(Array(text.utf8))) == nil)
    }

    @Test("identify without traits takes context.traits, as RudderStack's data plane does (rudder-sdk-python)")
    func rudderIdentifyTraits() throws {
        // rudder-sdk-python 2.x: `context['traits'] = traits`, no top-level traits.
        let rudder = #"{"type":"identify","userId":"u1","context":{"traits":{"plan":"pro","seats":3},"library":{"name":"analytics-python"}}}"#
        let event = try WireEvent(decoding: SegmentMappingTests.map(rudder).get().frame)
        #expect(String(decoding: event.properties, as: UTF8.self) == #"{"plan":"pro","seats":3}"#)
        // The context is still kept as sent.
        #expect(String(decoding: event.context, as: UTF8.self).contains(#""traits":{"plan":"pro","seats":3}"#))
        // Top-level traits (Segment's libraries) win over context.traits.
        let both = #"{"type":"identify","userId":"u1","traits":{"a":1},"context":{"traits":{"b":2}}}"#
        #expect(String(decoding: try WireEvent(decoding: SegmentMappingTests.map(both).get().frame).properties, as: UTF8.self) == #"{"a":1}"#)
        // A track's context.traits are context, not properties.
        let track = #"{"type":"track","event":"e","userId":"u1","context":{"traits":{"b":2}}}"#
        #expect(try WireEvent(decoding: SegmentMappingTests.map(track).get().frame).properties.isEmpty)
        // context.traits that are not an object are refused like traits that are not.
        guard case .failure(let refusal) = SegmentMappingTests.map(#"{"type":"identify","userId":"u1","context":{"traits":[1]}}"#) else {
            Issue.record("context.traits [1] was accepted")
            return
        }
        #expect(refusal.code == "invalid_field")
    }

    @Test("a bad http.listen is reported as http.listen, not metrics.listen", arguments: ["nope", "127.0.0.1:x", "[::1]8088", ":99999"])
    func badHTTPListen(listen: String) throws {
        let http = HTTPIngestConfiguration(listen: listen)
        let error = #expect(throws: AgentError.self) { _ = try http.listenAddress() }
        #expect(error?.message.hasPrefix("http.listen \"\(listen)\"") == true)
        #expect(error?.message.contains("metrics.listen") == false)
        let metrics = AgentConfiguration.Metrics(listen: listen)
        let metricsError = #expect(throws: AgentError.self) { _ = try metrics.listenAddress() }
        #expect(metricsError?.message.hasPrefix("metrics.listen") == true)
    }
}

/// `Host` and `Origin`: the DNS rebinding defence, as a table.
@Suite struct HostPolicyTests {
    static let tcp = HostPolicy.tcp(listenHost: "127.0.0.1", allowedHosts: ["ferry.internal"], allowedOrigins: ["http://app.local:3000"])

    @Test(arguments: [
        ("127.0.0.1:8088", nil, 0),
        ("127.0.0.1", nil, 0),
        ("localhost:8088", nil, 0),
        ("LOCALHOST", nil, 0),
        ("localhost.:8088", nil, 0),
        ("[::1]:8088", nil, 0),
        ("[::1]", nil, 0),
        ("ferry.internal:8088", nil, 0),
        (nil, nil, 0),
        ("evil.example", nil, 421),
        ("evil.example:8088", nil, 421),
        ("127.0.0.1.evil.example", nil, 421),
        ("localhost:9999", nil, 421),
        ("[::2]:8088", nil, 421),
        ("127.0.0.1:8088", "http://evil.example", 403),
        ("127.0.0.1:8088", "null", 403),
        ("127.0.0.1:8088", "http://app.local:3000", 0),
        ("127.0.0.1:8088", "HTTP://APP.LOCAL:3000/", 0),
        ("evil.example", "http://evil.example", 421),
    ] as [(String?, String?, Int)])
    func tcpListener(host: String?, origin: String?, status: Int) {
        #expect(Self.tcp.refusal(host: host, origin: origin, port: 8088)?.status ?? 0 == status)
    }

    @Test("the Unix socket serves any Host but checks Origin")
    func unixSocket() {
        let unix = HostPolicy.unix(allowedOrigins: [])
        #expect(unix.refusal(host: "localhost", origin: nil, port: nil) == nil)
        #expect(unix.refusal(host: "%2Frun%2Fferry%2Fhttp", origin: nil, port: nil) == nil)
        #expect(unix.refusal(host: "evil.example", origin: "http://evil.example", port: nil)?.code == "origin_not_allowed")
    }

    @Test("the listener's own host is one of its names; a wildcard address is not")
    func ownNames() {
        let ipv6 = HostPolicy.tcp(listenHost: "::1", allowedHosts: [], allowedOrigins: [])
        #expect(ipv6.refusal(host: "[::1]:1234", origin: nil, port: 1234) == nil)
        let lan = HostPolicy.tcp(listenHost: "192.168.1.5", allowedHosts: [], allowedOrigins: [])
        #expect(lan.refusal(host: "192.168.1.5:1234", origin: nil, port: 1234) == nil)
        let any = HostPolicy.tcp(listenHost: "0.0.0.0", allowedHosts: [], allowedOrigins: [])
        #expect(any.refusal(host: "0.0.0.0", origin: nil, port: 1234)?.status == 421)
    }

    @Test("allowedHosts and allowedOrigins are checked when the configuration is", arguments: [
        (["ferry.local"], [] as [String], true),
        (["[fd00::1]"], [], true),
        (["ferry.local:80"], [], false),
        (["http://ferry.local"], [], false),
        ([""], [], false),
        ([], ["http://app.local:3000"], true),
        ([], ["app.local"], false),
        ([], ["http://app.local/path"], false),
    ])
    func configuration(hosts: [String], origins: [String], valid: Bool) throws {
        var configuration = AgentConfiguration(runtimeDirectory: "/tmp/fh-run", dataDirectory: "/tmp/fh-data", sinks: [.defaultFile()])
        configuration.httpIngest.allowedHosts = hosts
        configuration.httpIngest.allowedOrigins = origins
        let thrown = (try? configuration.validate()) == nil
        #expect(thrown == !valid)
    }

    @Test("the keys are read from the file")
    func fileKeys() throws {
        let json = #"{"http":{"listen":"127.0.0.1:8088","allowedHosts":["ferry.local"],"allowedOrigins":["http://app.local:3000"]}}"#
        let configuration = try AgentConfiguration.load(json: Array(json.utf8), path: "ferryd.json",
                                                        base: AgentConfiguration(runtimeDirectory: "/tmp/fh-run", dataDirectory: "/tmp/fh-data", sinks: [.defaultFile()]),
                                                        ingestPathKinds: IngestPathRegistry([.http]))
        #expect(configuration.httpIngest.allowedHosts == ["ferry.local"])
        #expect(configuration.httpIngest.allowedOrigins == ["http://app.local:3000"])
    }

    @Test("the http table is the kind's: its errors name their key path; its validate line and metrics are its own")
    func tableOfTheKind() throws {
        let kinds = IngestPathRegistry([.http])
        let base = AgentConfiguration(runtimeDirectory: "/tmp/fh-run", dataDirectory: "/tmp/fh-data", sinks: [.defaultFile()])
        func load(_ json: String) throws -> AgentConfiguration {
            try AgentConfiguration.load(json: Array(json.utf8), path: "f.json", base: base, ingestPathKinds: kinds)
        }
        let typed = #expect(throws: AgentError.self) { _ = try load(#"{"http":{"listen":5}}"#) }
        #expect(typed?.message == "f.json: http.listen: expected a string")
        let range = #expect(throws: AgentError.self) { _ = try load(#"{"http":{"maxConnections":0}}"#) }
        #expect(range?.message == "f.json: http.maxConnections must be 1 to 65536")
        let remote = #expect(throws: AgentError.self) { _ = try load(#"{"http":{"listen":"10.0.0.1:8088"}}"#) }
        #expect(remote?.message.hasPrefix(#"f.json: http.listen "10.0.0.1:8088" is not a loopback address"#) == true)
        #expect(kinds.summaryLines(base) == ["http: socket=true listen=off writeKeys=0 maxConnections=256"])
        var flagged = try load(#"{"http":{"maxConnections":8}}"#)
        try kinds.apply(["listen": "127.0.0.1:8088"], toKind: "http", of: &flagged, source: "--http-listen")
        #expect(flagged.httpIngest == HTTPIngestConfiguration(listen: "127.0.0.1:8088", maxConnections: 8))
        #expect(IngestPathKind.http.metrics.map(\.name) == ["ferry_http_requests_total", "ferry_http_events_total", "ferry_http_connections"])
    }
}
