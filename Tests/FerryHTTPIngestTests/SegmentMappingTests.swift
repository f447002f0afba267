import FerryProtocol
import Testing

@testable import FerryHTTPIngest

/// The pure parts of the HTTP API: JSON parsing, Segment shapes → Ferry events, the request
/// head's admission and the outcomes → response decision. No sockets, no agent.
@Suite struct SegmentMappingTests {
    static let sender = SegmentSender(uid: 1000, pid: 42, writeKey: "key", source: "http")
    static let categories: [String: UInt8] = ["analytics": 1, "advertising": 2, "personalization": 3, "diagnostics": 4, "push": 5]
    static let typeCategories = ["track": "analytics", "page": "analytics", "screen": "analytics", "identify": "personalization",
                                 "group": "analytics", "alias": "personalization"]

    static func map(_ json: String, endpoint: SegmentEndpoint = .batch) -> Result<SegmentEvent, SegmentRefusal> {
        let body = Array(json.utf8)
        let node = try! BodyValue.parse(body).0
        return SegmentMapping.event(node, endpoint: endpoint, sender: sender, categories: categories,
                                    typeCategories: typeCategories, now: 1_000, newID: { EventID(high: 7, low: 7) })
    }

    @Test func trackMapsEveryField() throws {
        let json = #"{"type":"track","event":"Order Completed","userId":"u1","anonymousId":"a1","messageId":"m-1","#
            + #""properties":{"total": 1.50, "b":[1,2]},"context":{"locale":"fr-FR"},"timestamp":"2026-01-31T12:00:00.250Z"}"#
        let event = try Self.map(json).get()
        let wire = try WireEvent(decoding: event.frame)
        #expect(wire.type == .track)
        #expect(wire.name == "Order Completed")
        #expect(wire.userID == "u1")
        #expect(wire.anonymousID == "a1")
        #expect(String(decoding: wire.properties, as: UTF8.self) == #"{"total": 1.50, "b":[1,2]}"#)
        #expect(String(decoding: wire.context, as: UTF8.self) == #"{"locale":"fr-FR"}"#)
        #expect(wire.timestamp == 1_769_860_800_250)
        #expect(wire.messageID == "m-1")
        #expect(wire.source == "http")
        #expect(wire.pid == 42)
        #expect(wire.id == SegmentMapping.eventID(uid: 1000, writeKey: "key", messageID: "m-1"))
    }

    @Test func identifyTakesTraitsGroupAndAliasTheirIds() throws {
        let identify = try WireEvent(decoding: Self.map(#"{"userId":"u","traits":{"plan":"pro"}}"#, endpoint: .identify).get().frame)
        #expect(identify.type == .identify)
        #expect(String(decoding: identify.properties, as: UTF8.self) == #"{"plan":"pro"}"#)
        let group = try WireEvent(decoding: Self.map(#"{"type":"group","userId":"u","groupId":"acme","traits":{}}"#).get().frame)
        #expect(group.groupID == "acme")
        let alias = try WireEvent(decoding: Self.map(#"{"type":"alias","userId":"u","previousId":"old"}"#).get().frame)
        #expect(alias.previousID == "old")
        let page = try WireEvent(decoding: Self.map(#"{"type":"page","userId":"u","name":"Home"}"#).get().frame)
        #expect(page.name == "Home")
    }

    @Test func theIdDependsOnUserKeyAndMessageIdOnly() {
        let a = SegmentMapping.eventID(uid: 1000, writeKey: "k", messageID: "m")
        #expect(a == SegmentMapping.eventID(uid: 1000, writeKey: "k", messageID: "m"))
        #expect(a != SegmentMapping.eventID(uid: 1001, writeKey: "k", messageID: "m"))
        #expect(a != SegmentMapping.eventID(uid: 1000, writeKey: "j", messageID: "m"))
        #expect(a != SegmentMapping.eventID(uid: 1000, writeKey: "k", messageID: "n"))
        #expect((a.high >> 12) & 0xF == 8)
        // The ids ferryd has always given (recorded before swift-crypto's SHA-256 replaced our
        // own; Python's hashlib gives the same): a message sent again after an upgrade is still
        // answered `duplicate`.
        #expect(a.description == "829b3e7e-a285-8fa3-871d-a06eedc7e450")
        #expect(SegmentMapping.eventID(uid: nil, writeKey: "", messageID: "deep").description == "579eedaf-e735-8f9a-9546-6e56e7e19daf")
    }

    @Test(arguments: [
        (#"{"type":"track","userId":"u"}"#, "invalid_message"),
        (#"{"type":"bogus","userId":"u","event":"e"}"#, "invalid_message"),
        (#"{"type":"track","event":"e"}"#, "invalid_message"),
        (#"{"type":"track","event":"e","userId":"u","properties":[1]}"#, "invalid_field"),
        (#"{"type":"track","event":"e","userId":"u","context":"x"}"#, "invalid_field"),
        (#"{"type":"track","event":"e","userId":"u","timestamp":"yesterday"}"#, "invalid_field"),
        (#"{"type":"track","event":"e","userId":"u","messageId":""}"#, "invalid_field"),
        (#"{"type":"track","event":"e","userId":{"a":1}}"#, "invalid_field"),
        (#"{"type":"track","event":"e","userId":"u","context":{"ferry":{"category":"nope"}}}"#, "unknown_category"),
        (#"[1]"#, "invalid_message"),
    ])
    func refusals(json: String, code: String) {
        guard case .failure(let refusal) = Self.map(json) else {
            Issue.record("\(json) was accepted")
            return
        }
        #expect(refusal.code == code)
    }

    @Test func messageIdLimitIsOneHundredCharacters() {
        let ok = String(repeating: "é", count: 100), long = String(repeating: "x", count: 101)
        #expect((try? Self.map(#"{"type":"track","event":"e","userId":"u","messageId":"\#(ok)"}"#).get()) != nil)
        guard case .failure(let refusal) = Self.map(#"{"type":"track","event":"e","userId":"u","messageId":"\#(long)"}"#) else {
            Issue.record("a 101-character messageId was accepted")
            return
        }
        #expect(refusal.code == "invalid_field")
    }

    @Test func aMessageOver32KiBIsTooLarge() {
        let big = String(repeating: "x", count: 33 << 10)
        guard case .failure(let refusal) = Self.map(#"{"type":"track","event":"e","userId":"u","properties":{"p":"\#(big)"}}"#) else {
            Issue.record("accepted")
            return
        }
        #expect(refusal.reason == .tooLarge)
    }

    @Test func categoryAndPreferences() throws {
        let explicit = try Self.map(#"{"type":"track","event":"e","userId":"u","context":{"ferry":{"category":"advertising"}}}"#).get()
        #expect(try WireEvent(decoding: explicit.frame).category == 2)
        let denied = try Self.map(#"{"type":"track","event":"e","userId":"u","context":{"consent":{"categoryPreferences":{"analytics":false}}}}"#).get()
        #expect(denied.deniedCategory == "analytics")
        let allowed = try Self.map(#"{"type":"track","event":"e","userId":"u","context":{"consent":{"categoryPreferences":{"analytics":true,"advertising":false}}}}"#).get()
        #expect(allowed.deniedCategory == nil)
    }

    @Test(arguments: [
        ("2026-01-31T12:00:00Z", UInt64(1_769_860_800_000)),
        ("2026-01-31T12:00:00.123456+00:00", 1_769_860_800_123),
        ("2026-01-31T13:00:00.5+01:00", 1_769_860_800_500),
        ("2026-01-31T12:00:00.123456", 1_769_860_800_123),
        ("2026-01-31 12:00:00-0130", 1_769_866_200_000),
    ])
    func timestamps(text: String, milliseconds: UInt64) {
        #expect(ISO8601.milliseconds(text) == milliseconds)
    }

    @Test(arguments: ["", "2026-13-01T00:00:00Z", "2026-01-31", "2026-01-31T12:00:00Q", "2026-01-31T12:00:00."])
    func badTimestamps(text: String) {
        #expect(ISO8601.milliseconds(text) == nil)
    }

    @Test(arguments: [
        ("{\"a\":1,}", false), ("{\"a\":01}", false), ("[1,2", false), ("\"\\ud800\"", false), ("{\"a\":\"\u{1}\"}", false),
        ("{\"a\":[1,-2.5e+3,true,false,null,\"\\u00e9\\ud83d\\ude00\"]}", true), (" {} ", true), ("{} {}", false),
    ])
    func jsonParser(text: String, valid: Bool) {
        let parsed = (try? BodyValue.parse(Array(text.utf8))) != nil
        #expect(parsed == valid)
    }

    @Test func deepNestingIsRefusedNotACrash() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect((try? JSONTape.parse(Array(deep.utf8))) == nil)
    }

    @Test func writeKeyFromBodyOrBasicAuth() throws {
        let body = try BodyValue.parse(Array(#"{"writeKey":"wk","batch":[]}"#.utf8)).0
        #expect(SegmentMapping.writeKey(body: body, authorization: "Basic b3RoZXI6") == "wk")
        let bare = try BodyValue.parse(Array(#"{"batch":[]}"#.utf8)).0
        #expect(SegmentMapping.writeKey(body: bare, authorization: "Basic b3RoZXI6") == "other")
        #expect(SegmentMapping.writeKey(body: bare, authorization: nil) == "")
    }
}

/// The request → verdict decisions.
@Suite struct IngestVerdictTests {
    @Test(arguments: [
        ("POST", "/v1/batch", "application/json", nil, 10, 0),
        ("POST", "/v1/track?x=1", "application/json; charset=utf-8", "gzip", nil, 0),
        ("POST", "/v1/nope", "application/json", nil, 10, 404),
        ("GET", "/v1/batch", "application/json", nil, nil, 405),
        ("POST", "/v1/batch", "text/plain", nil, 10, 415),
        ("POST", "/v1/batch", nil, nil, 10, 415),
        ("POST", "/v1/batch", "application/x-www-form-urlencoded", nil, 10, 415),
        ("POST", "/v1/batch", "application/json", "br", 10, 415),
        ("POST", "/v1/batch", "application/json", nil, 10 << 20, 413),
    ] as [(String, String, String?, String?, Int?, Int)])
    func admission(method: String, uri: String, type: String?, encoding: String?, length: Int?, status: Int) {
        let verdict = IngestVerdict.admit(method: method, uri: uri, contentType: type, contentEncoding: encoding, contentLength: length)
        switch verdict {
        case .success: #expect(status == 0)
        case .failure(let refusal): #expect(refusal.status == status)
        }
    }

    @Test(arguments: [
        ([EventOutcome.accepted(held: false), .duplicate], 200, nil as Int?),
        ([.accepted(held: false), .refused(code: "invalid_field", message: "m")], 200, nil),
        ([.blocked("consent_denied")], 200, nil),
        ([.refused(code: "invalid_field", message: "m"), .refused(code: "too_large", message: "n")], 400, nil),
        ([.accepted(held: false), .retry(.full)], 429, IngestVerdict.retryAfterFull),
        ([.accepted(held: false), .retry(.storage)], 503, IngestVerdict.retryAfterFull),
        ([.retry(.shuttingDown), .refused(code: "x", message: "y")], 503, IngestVerdict.retryAfterBusy),
    ])
    func responses(outcomes: [EventOutcome], status: Int, retryAfter: Int?) {
        let response = IngestVerdict.response(outcomes.map { (nil, $0) })
        #expect(response.status == status)
        #expect(response.retryAfter == retryAfter)
        let text = String(decoding: response.body, as: UTF8.self)
        if status >= 400 {
            #expect(text.hasPrefix(#"{"code":"#) && text.contains(#""message":"#))
        } else {
            #expect(text.contains(#""results":["#))
        }
    }

    @Test func procNetTCPForms() {
        #expect(TCPPeer.procForm(ip: "127.0.0.1", port: 8080) == "0100007F:1F90")
        #expect(TCPPeer.procForm(ip: "::1", port: 1) == "00000000000000000000000001000000:0001")
        let table = """
              sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
               0: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000   998        0 1 1 0
               1: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 2 1 0
            """
        #expect(TCPPeer.uid(inTable: table, local: "0100007F:D431", remote: "0100007F:1F90") == 1000)
        #expect(TCPPeer.uid(inTable: table, local: "0100007F:D432", remote: "0100007F:1F90") == nil)
    }
}
