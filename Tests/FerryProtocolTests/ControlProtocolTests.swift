import FerryMetricSamples
import FerryProtocol
import Foundation
import Testing

/// The control protocol's one definition: every request and reply encodes to the JSON clients and
/// agents have always exchanged and decodes back to itself; refusals carry the agent's texts.
@Suite("Control protocol")
struct ControlProtocolTests {
    static func decode<T: Decodable>(_ type: T.Type, _ text: String) throws -> T {
        try JSONDecoder().decode(type, from: Data(text.utf8))
    }

    static func roundTrip<T: Codable & Equatable>(_ value: T) throws -> T {
        try JSONDecoder().decode(T.self, from: JSONEncoder().encode(value))
    }

    /// The JSON object of `text`, for comparing documents whatever their key order.
    static func object(_ bytes: some Sequence<UInt8>) throws -> NSDictionary {
        try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? NSDictionary)
    }

    // MARK: Requests

    static let requests: [(ControlRequest, String)] = [
        (.status(), #"{"op":"status"}"#),
        (.metrics(), #"{"op":"metrics"}"#),
        (.consentState(), #"{"op":"consent_state"}"#),
        (.consentLog(limit: nil), #"{"op":"consent_log"}"#),
        (.consentLog(limit: 20), #"{"limit":20,"op":"consent_log"}"#),
        (.setTracking(false), #"{"enabled":false,"op":"set_tracking"}"#),
        (.setTracking(true), #"{"enabled":true,"op":"set_tracking"}"#),
        (.setConsent(.denied, for: "all"), #"{"category":"all","op":"set_consent","status":"denied"}"#),
        (.setPersistence(.granted), #"{"op":"set_persistence","status":"granted"}"#),
        (.setGDPR(["data_usage": .denied, "subject_to_gdpr": .granted]),
         #"{"fields":{"data_usage":"denied","subject_to_gdpr":"granted"},"op":"set_gdpr"}"#),
        (.setGDPR(["ads_personalization": .unset, "ad_storage": .granted]),
         #"{"fields":{"ad_storage":"granted","ads_personalization":"unset"},"op":"set_gdpr"}"#),
        (.enableFeatures(["analytics", "push"]), #"{"features":["analytics","push"],"op":"enable_features"}"#),
        (.disableFeatures(["all"]), #"{"features":["all"],"op":"disable_features"}"#),
        (.purge(category: nil), #"{"op":"purge"}"#),
        (.purge(category: "advertising"), #"{"category":"advertising","op":"purge"}"#),
        (.forget(userID: "u-\"42\"/\n"), #"{"op":"forget","user_id":"u-\"42\"/\n"}"#),
        (.start(), #"{"op":"start"}"#),
        (.forgetStatus(), #"{"op":"forget_status"}"#),
        (.deadLetterReplay(id: "0190f5c2-7a3b", sink: nil), #"{"id":"0190f5c2-7a3b","op":"deadletter_replay"}"#),
        (.deadLetterReplay(id: "0190f5c2-7a3b", sink: "collector"), #"{"id":"0190f5c2-7a3b","op":"deadletter_replay","sink":"collector"}"#),
        (ControlRequest(.setConsent(category: "advertising", status: .denied), actor: "ops"),
         #"{"actor":"ops","category":"advertising","op":"set_consent","status":"denied"}"#),
        (ControlRequest(.status, actor: "settings-ui"), #"{"actor":"settings-ui","op":"status"}"#),
        (ControlRequest(.whoami), #"{"op":"whoami"}"#),
        (.quarantineReplay(id: "0190f5c2-7a3b"), #"{"id":"0190f5c2-7a3b","op":"quarantine_replay"}"#),
        (.quarantineReplay(id: nil), #"{"all":true,"op":"quarantine_replay"}"#),
        (.quarantineDrop(id: "0190f5c2-7a3b"), #"{"id":"0190f5c2-7a3b","op":"quarantine_drop"}"#),
        (.quarantineDrop(id: nil), #"{"all":true,"op":"quarantine_drop"}"#),
        (.reload(), #"{"op":"reload"}"#),
        (.recipients(userID: "u-42"), #"{"op":"recipients","user_id":"u-42"}"#),
    ]

    @Test("every op encodes to the documented JSON object (sorted keys, as clients have always sent it)")
    func requestBytes() {
        for (request, expected) in Self.requests {
            #expect(String(decoding: request.encoded(), as: UTF8.self) == expected)
        }
    }

    @Test("every op covers the whole op list, in the order the agent lists them")
    func opNames() {
        let names = Set(Self.requests.map(\.0.op))
        #expect(names == Set(ControlRequest.ops))
        #expect(ControlRequest.ops.count == 20)
        #expect(ControlRequest.ops.first == "status" && ControlRequest.ops[1] == "deadletter_replay")
    }

    @Test("metrics reply and access-denied refusal: wire form both ways")
    func metricsAndAccessDenied() throws {
        let reply = MetricsReply(text: "ferry_events_accepted_total 3\n")
        let decoded = try JSONDecoder().decode(MetricsReply.self, from: JSONEncoder().encode(reply))
        #expect(decoded == reply && decoded.samples.value("ferry_events_accepted_total") == 3)
        let refusal = ControlRefusal("access denied: uid 1000", code: ControlRefusal.accessDenied)
        let json = try JSONEncoder().encode(refusal)
        let object = try JSONSerialization.jsonObject(with: json) as? [String: Any]
        #expect(object?["code"] as? String == "access_denied" && object?["error"] as? String == "access denied: uid 1000")
        #expect(try JSONDecoder().decode(ControlRefusal.self, from: json) == refusal)
        #expect(try JSONDecoder().decode(ControlRefusal.self, from: Data(#"{"ok":false,"error":"x"}"#.utf8)).code == nil)
    }

    @Test("requests round-trip: encoded() → decode, and JSONEncoder → JSONDecoder")
    func requestRoundTrips() throws {
        for (request, expected) in Self.requests {
            #expect(try ControlRequest.decode(json: request.encoded()) == request, "\(expected)")
            #expect(try ControlRequest.decode(json: Array(expected.utf8)) == request, "\(expected)")
            #expect(try Self.roundTrip(request) == request, "\(expected)")
            // JSONEncoder's form is the same document (its key order and escapes may differ).
            #expect(try Self.object(JSONEncoder().encode(request)) == Self.object(request.encoded()), "\(expected)")
        }
    }

    @Test("requests as other clients write them: whitespace, any key order, extra fields")
    func foreignRequests() throws {
        let cases: [(String, ControlRequest)] = [
            // The Python toggler of ConsentConcurrencyTests (json.dumps with its default separators).
            (#"{"op": "set_consent", "category": "analytics", "status": "granted", "actor": "toggler-granted"}"#,
             ControlRequest(.setConsent(category: "analytics", status: .granted), actor: "toggler-granted")),
            (#"{"op": "status"}"#, .status()),
            (" {\n  \"enabled\" : true ,\"op\":\"set_tracking\"}\n", .setTracking(true)),
            (#"{"op":"set_gdpr","fields":{"subject_to_gdpr":"granted","ad_storage":"denied","ads_personalization":"denied"}}"#,
             .setGDPR(["subject_to_gdpr": .granted, "ad_storage": .denied, "ads_personalization": .denied])),
            (#"{"op":"purge","category":null}"#, .purge(category: nil)),
            (#"{"op":"consent_log","limit":5,"verbose":true}"#, .consentLog(limit: 5)),
            (#"{"sink":"collector","op":"deadletter_replay","id":"abc"}"#, .deadLetterReplay(id: "abc", sink: "collector")),
            // Optional fields may be null.
            (#"{"op":"start","actor":null}"#, .start()),
            (#"{"op":"consent_log","limit":null}"#, .consentLog(limit: nil)),
            (#"{"op":"deadletter_replay","id":"abc","sink":null}"#, .deadLetterReplay(id: "abc", sink: nil)),
            (#"{"op":"forget","user_id":"ß😀","actor":"a\u0000b"}"#, ControlRequest(.forget(userID: "ß😀"), actor: "a\u{0}b")),
        ]
        for (text, expected) in cases {
            #expect(try ControlRequest.decode(json: Array(text.utf8)) == expected, "\(text)")
        }
    }

    static let statuses = ["undetermined", "granted", "denied"]
    static let gdprFields = ["subject_to_gdpr", "data_usage", "ads_personalization", "ad_storage"]

    @Test("refused requests get the agent's message and valid list", arguments: [
        ("", #"request must be a JSON object with a string field "op""#, [String]()),
        ("not json", #"request must be a JSON object with a string field "op""#, []),
        (#"[{"op":"status"}]"#, #"request must be a JSON object with a string field "op""#, []),
        (#""status""#, #"request must be a JSON object with a string field "op""#, []),
        (#"{"op":5}"#, #"request must be a JSON object with a string field "op""#, []),
        (#"{"operation":"status"}"#, #"request must be a JSON object with a string field "op""#, []),
        (#"{"op":"nope"}"#, #"unknown op "nope""#, ControlRequest.ops),
        (#"{"op":"x"}"#, #"unknown op "x""#, ControlRequest.ops),
        (#"{"op":"set_tracking"}"#, #""enabled" must be true or false"#, []),
        // Optional fields of the wrong type are refused (they were once read as absent).
        (#"{"op":"start","actor":5}"#, #""actor" must be a string when present"#, []),
        (#"{"op":"consent_log","limit":"ten"}"#, #""limit" must be a non-negative integer when present"#, []),
        (#"{"op":"consent_log","limit":-1}"#, #""limit" must be a non-negative integer when present"#, []),
        (#"{"op":"deadletter_replay","id":"abc","sink":7}"#, #""sink" must be a string when present"#, []),
        (#"{"op":"set_tracking","enabled":1}"#, #""enabled" must be true or false"#, []),
        (#"{"op":"set_tracking","enabled":"true"}"#, #""enabled" must be true or false"#, []),
        (#"{"op":"set_consent","status":"granted"}"#, #""category" must be a string"#, []),
        (#"{"op":"set_consent","category":3,"status":"granted"}"#, #""category" must be a string"#, []),
        (#"{"op":"set_consent","category":"analytics"}"#, #""status" must be a string"#, statuses),
        (#"{"op":"set_consent","category":"analytics","status":"maybe"}"#, #"unknown status "maybe""#, statuses),
        (#"{"op":"set_persistence","status":true}"#, #""status" must be a string"#, statuses),
        (#"{"op":"set_persistence","status":"yes"}"#, #"unknown status "yes""#, statuses),
        (#"{"op":"set_gdpr"}"#, #""fields" must be a non-empty object"#, gdprFields),
        (#"{"op":"set_gdpr","fields":{}}"#, #""fields" must be a non-empty object"#, gdprFields),
        (#"{"op":"set_gdpr","fields":["data_usage"]}"#, #""fields" must be a non-empty object"#, gdprFields),
        (#"{"op":"set_gdpr","fields":{"consent":"granted"}}"#, #"unknown GDPR field "consent""#, gdprFields),
        (#"{"op":"set_gdpr","fields":{"data_usage":"yes"}}"#, "data_usage must be one of unset, granted, denied", ["unset", "granted", "denied"]),
        (#"{"op":"set_gdpr","fields":{"data_usage":true}}"#, "data_usage must be one of unset, granted, denied", ["unset", "granted", "denied"]),
        (#"{"op":"enable_features"}"#, #""features" must be a non-empty array of strings"#, []),
        (#"{"op":"enable_features","features":[]}"#, #""features" must be a non-empty array of strings"#, []),
        (#"{"op":"disable_features","features":["a",1]}"#, #""features" must be a non-empty array of strings"#, []),
        (#"{"op":"disable_features","features":"all"}"#, #""features" must be a non-empty array of strings"#, []),
        (#"{"op":"purge","category":5}"#, #""category" must be a string"#, []),
        (#"{"op":"forget"}"#, #""user_id" must be a non-empty string"#, []),
        (#"{"op":"forget","user_id":""}"#, #""user_id" must be a non-empty string"#, []),
        (#"{"op":"forget","user_id":42}"#, #""user_id" must be a non-empty string"#, []),
        (#"{"op":"deadletter_replay"}"#, #"deadletter_replay needs a string field "id" naming a dead letter"#, []),
        (#"{"op":"deadletter_replay","id":12}"#, #"deadletter_replay needs a string field "id" naming a dead letter"#, []),
    ])
    func refusals(request: String, message: String, valid: [String]) throws {
        let refusal = #expect(throws: ControlRefusal.self) { try ControlRequest.decode(json: Array(request.utf8)) }
        #expect(refusal?.message == message, "\(request)")
        #expect(refusal?.valid == valid, "\(request)")
    }

    // MARK: Replies

    static let head = "9f2c4e6a8b0d1f3e5c7a9b1d3f5e7c9a0b2d4f6e8c0a2b4d6f8e0c2a4b6d8f0e"
    static let snapshot = ConsentSnapshot(
        networkTracking: true, trackingEnabled: true,
        categories: ["advertising", "analytics", "diagnostics", "personalization", "push"], enabledFeatures: ["analytics", "push"],
        consent: ["analytics": .granted, "advertising": .denied, "personalization": .undetermined, "diagnostics": .undetermined, "push": .granted],
        persistence: .undetermined,
        gdpr: GDPRRecord(subjectToGDPR: .granted, dataUsage: .granted, adsPersonalization: .denied, adStorage: .unset),
        deliveryStarted: false, anonymousID: "0190f5c2-7a3b-7c4d-8e5f-0123456789ab", heldEvents: 3, auditEntries: 2, auditHead: head)
    static let consentObject = """
        {"network_tracking":true,"tracking_enabled":true,\
        "categories":["advertising","analytics","diagnostics","personalization","push"],\
        "enabled_features":["analytics","push"],\
        "consent":{"analytics":"granted","advertising":"denied","personalization":"undetermined","diagnostics":"undetermined","push":"granted"},\
        "persistence":"undetermined",\
        "gdpr":{"subject_to_gdpr":"granted","data_usage":"granted","ads_personalization":"denied","ad_storage":"unset"},\
        "delivery_started":false,"anonymous_id":"0190f5c2-7a3b-7c4d-8e5f-0123456789ab",\
        "held_events":3,"audit_entries":2,"audit_head":"\(head)"}
        """
    static let entries = [
        AuditEntry(seq: 1, at: 1_700_000_000_000, uid: 1000, pid: 4242, process: "ferry", actor: "settings-ui",
                   change: "consent.analytics", old: #""undetermined""#, new: #""granted""#, prev: String(repeating: "0", count: 64),
                   hash: "1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90a"),
        AuditEntry(seq: 2, at: 1_700_000_001_500, uid: 1000, pid: 4243, process: "settings",
                   change: "tracking", old: "true", new: "false",
                   prev: "1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90a", hash: head),
    ]
    static let entriesJSON = """
        [{"seq":1,"at":1700000000000,"uid":1000,"pid":4242,"process":"ferry","actor":"settings-ui",\
        "change":"consent.analytics","old":"\\"undetermined\\"","new":"\\"granted\\"",\
        "prev":"0000000000000000000000000000000000000000000000000000000000000000",\
        "hash":"1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90a"},\
        {"seq":2,"at":1700000001500,"uid":1000,"pid":4243,"process":"settings",\
        "change":"tracking","old":"true","new":"false",\
        "prev":"1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90a",\
        "hash":"\(head)"}]
        """

    @Test("consent replies (state, change with purged, start) decode from the agent's JSON and round-trip")
    func consentReplies() throws {
        let state = try Self.decode(ConsentUpdate.self, #"{"ok":true,"consent":"# + Self.consentObject + "}")
        #expect(state == ConsentUpdate(consent: Self.snapshot))
        let denied = try Self.decode(ConsentUpdate.self, #"{"consent":"# + Self.consentObject + #","ok":true,"purged":{"held":2,"queued":7}}"#)
        #expect(denied == ConsentUpdate(consent: Self.snapshot, purged: PurgeReport(queued: 7, held: 2)))
        let started = try Self.decode(ConsentUpdate.self, #"{"consent":"# + Self.consentObject + #","delivery_started":true,"ok":true}"#)
        #expect(started.deliveryStarted == true && started.purged == nil)
        for update in [state, denied, started] {
            #expect(try Self.roundTrip(update) == update)
            let object = try Self.object(JSONEncoder().encode(update))
            #expect(object["ok"] as? Bool == true)
            #expect((object["consent"] as? NSDictionary)?["audit_head"] as? String == Self.head)
        }
        #expect(try Self.object(JSONEncoder().encode(state)).allKeys.count == 2, "no purged or delivery_started when nil")
        #expect(try Self.object(JSONEncoder().encode(denied)) == Self.object(Array(
            (#"{"ok":true,"consent":"# + Self.consentObject + #","purged":{"queued":7,"held":2}}"#).utf8)))
    }

    @Test("purge replies: purged read with or without the consent state, absent means nothing erased")
    func purgeReplies() throws {
        #expect(try Self.decode(PurgeReply.self, #"{"ok":true,"purged":{"queued":12,"held":1}}"#).report == PurgeReport(queued: 12, held: 1))
        #expect(try Self.decode(PurgeReply.self, #"{"consent":"# + Self.consentObject + #","ok":true,"purged":{"held":0,"queued":3}}"#).report.total == 3)
        #expect(try Self.decode(PurgeReply.self, #"{"ok":true}"#).report == PurgeReport(queued: 0, held: 0))
        let reply = PurgeReply(purged: PurgeReport(queued: 4, held: 5))
        #expect(try Self.roundTrip(reply) == reply)
        #expect(try Self.object(JSONEncoder().encode(reply)) == Self.object(Array(#"{"ok":true,"purged":{"queued":4,"held":5}}"#.utf8)))
    }

    @Test("a forget that reached the quarantine counts it: purged.quarantined read, in the total, encoded only when not zero")
    func purgeRepliesQuarantined() throws {
        let report = try Self.decode(PurgeReply.self, #"{"ok":true,"purged":{"queued":2,"held":1,"quarantined":3}}"#).report
        #expect(report == PurgeReport(queued: 2, held: 1, quarantined: 3) && report.total == 6)
        let reply = PurgeReply(purged: report)
        #expect(try Self.roundTrip(reply) == reply)
        #expect(try Self.object(JSONEncoder().encode(reply)) == Self.object(Array(#"{"ok":true,"purged":{"queued":2,"held":1,"quarantined":3}}"#.utf8)))
        #expect(try Self.decode(PurgeReply.self, #"{"ok":true,"purged":{"queued":2,"held":1}}"#).report.quarantined == 0)
    }

    @Test("refusal replies: error and valid, valid left out when empty")
    func refusalReplies() throws {
        let unknown = try Self.decode(ControlRefusal.self, #"""
            {"ok":false,"error":"unknown category \"analytcs\"","valid":["advertising","analytics","diagnostics","personalization","push","all"]}
            """#)
        #expect(unknown == ControlRefusal(#"unknown category "analytcs""#, valid: ["advertising", "analytics", "diagnostics", "personalization", "push", "all"]))
        #expect(try Self.decode(ControlRefusal.self, #"{"ok":false,"error":"unknown op \"x\""}"#) == ControlRefusal(#"unknown op "x""#))
        #expect(try Self.decode(ControlRefusal.self, #"{"ok":false}"#).message == "no reason given")
        for refusal in [unknown, ControlRefusal("agent starting"), ControlRefusal.notARequest] {
            #expect(try Self.roundTrip(refusal) == refusal)
        }
        #expect(try Self.object(JSONEncoder().encode(ControlRefusal("agent starting"))) == Self.object(Array(#"{"error":"agent starting","ok":false}"#.utf8)))
        #expect(try Self.object(JSONEncoder().encode(unknown))["valid"] as? [String] == unknown.valid)
    }

    @Test("consent_log replies: entries with and without actor, verified, problem")
    func auditLogReplies() throws {
        let log = try Self.decode(ConsentAuditLog.self, #"{"ok":true,"entries":"# + Self.entriesJSON + #","verified":true}"#)
        #expect(log == ConsentAuditLog(entries: Self.entries, verified: true))
        #expect(log.entries[1].actor == nil)
        let broken = try Self.decode(ConsentAuditLog.self, #"{"ok":true,"entries":"# + Self.entriesJSON
            + #","verified":false,"problem":"entry 2: prev does not match the hash of entry 1"}"#)
        #expect(!broken.verified && broken.problem == "entry 2: prev does not match the hash of entry 1")
        let empty = try Self.decode(ConsentAuditLog.self, #"{"entries":[],"ok":true,"verified":true}"#)
        #expect(empty.entries.isEmpty)
        for reply in [log, broken, empty] { #expect(try Self.roundTrip(reply) == reply) }
        #expect(try Self.object(JSONEncoder().encode(log)) == Self.object(Array((#"{"ok":true,"entries":"# + Self.entriesJSON + #","verified":true}"#).utf8)))
        #expect(try Self.object(JSONEncoder().encode(log))["problem"] == nil)
    }

    @Test("audit entries: what the chain hashes, optional fields absent when unknown")
    func auditEntries() throws {
        let actor = "settings-ui/ops \u{1}\t\"ß😀\u{2028}"
        // The hashes the agent computes (FerryAgentTests' AuditLogBytesTests; Python's hashlib
        // gives the same) over the fields joined by U+001F.
        let first = AuditEntry(seq: 1, at: 1_700_000_000_000, uid: 1000, pid: 4242, process: "ferry", actor: actor,
                               change: "consent.analytics", old: #""undetermined""#, new: #""granted""#, prev: AuditEntry.genesis,
                               hash: "78f0e5e1b7b6209497f5620f8fe6ffbbebee0d4690c5ea5f66bd2dec78411c6f")
        #expect(first.hashedText == Array("1\u{1F}1700000000000\u{1F}1000\u{1F}4242\u{1F}ferry\u{1F}\(actor)\u{1F}consent.analytics\u{1F}\"undetermined\"\u{1F}\"granted\"\u{1F}\(AuditEntry.genesis)".utf8))
        let second = AuditEntry(seq: 2, at: 1_700_000_001_500, uid: 0, pid: 1, process: "ferryd", actor: nil,
                                change: "purge", old: "null", new: #"{"category":"*"}"#, prev: first.hash,
                                hash: "19fc64b87ddfdbef571ef545c43e503965c489124d08dcde955e8c4c1bc518ff")
        #expect(second.hashedText == Array("2\u{1F}1700000001500\u{1F}0\u{1F}1\u{1F}ferryd\u{1F}\u{1F}purge\u{1F}null\u{1F}{\"category\":\"*\"}\u{1F}\(first.hash)".utf8))
        for entry in [first, second] { #expect(try Self.roundTrip(entry) == entry) }
        let object = try Self.object(JSONEncoder().encode(second))
        #expect(Set(object.allKeys as! [String]) == ["seq", "at", "uid", "pid", "process", "change", "old", "new", "prev", "hash"])
        let anonymous = AuditEntry(seq: 3, at: 5, change: "start", old: "null", new: "true", prev: second.hash, hash: "h")
        #expect(try Self.object(JSONEncoder().encode(anonymous)).allKeys.count == 7)

        // Read as the agent always read its lines: a negative time is 0, ids modulo 2^32, optional
        // fields of the wrong type absent; required fields missing fail.
        let odd = try Self.decode(AuditEntry.self, #"""
            {"seq":4,"at":-3,"uid":4294968296,"pid":-1,"process":7,"actor":null,"change":"c","old":"o","new":"n","prev":"p","hash":"h"}
            """#)
        #expect(odd == AuditEntry(seq: 4, at: 0, uid: 1000, pid: -1, change: "c", old: "o", new: "n", prev: "p", hash: "h"))
        #expect(throws: (any Error).self) { try Self.decode(AuditEntry.self, #"{"seq":1,"at":1,"change":"c","old":"o","new":"n","prev":"p"}"#) }
    }

    @Test("deadletter_replay replies: success and failure shapes")
    func deadLetterReplies() throws {
        let ok = try Self.decode(DeadLetterReplayReply.self, #"{"events":4,"id":"abc","ok":true,"sink":"collector"}"#)
        #expect(ok == DeadLetterReplayReply(ok: true, sink: "collector", id: "abc", events: 4))
        let failed = try Self.decode(DeadLetterReplayReply.self, #"{"error":"upstream unavailable","id":"abc","ok":false,"sink":"collector"}"#)
        #expect(failed == DeadLetterReplayReply(ok: false, sink: "collector", id: "abc", error: "upstream unavailable"))
        let refused = DeadLetterReplayReply.refused("no dead letter abc")
        for reply in [ok, failed, refused] { #expect(try Self.roundTrip(reply) == reply) }
        #expect(try Self.object(JSONEncoder().encode(refused)) == Self.object(Array(#"{"error":"no dead letter abc","ok":false}"#.utf8)))
        #expect(try Self.object(JSONEncoder().encode(ok)) == Self.object(Array(#"{"events":4,"id":"abc","ok":true,"sink":"collector"}"#.utf8)))
    }

    static let statusJSON = """
        {"client_events_lost":{"app":3},"consent":\(consentObject),"counters":{"accepted":5,"blocked_at_send":0,"delivered":4},\
        "data_dir":"/var/lib/ferry","delivery":{"consecutive_failures":2,"last_error":"HTTP 503","retry_at":1700000030123,\
        "sink":"collector","state":"retrying"},"ok":true,"pid":4242,"protocol_version":1,\
        "queue":{"bytes":4096,"cursor":"1:0","events":1,"oldest_undelivered_age_ms":null,"segments":1,"verifying_segments":0},\
        "recovery":{"corrupt_bytes":0,"corrupt_regions":0,"events":5,"truncated_bytes":0},"runtime_dir":"/run/ferry",\
        "sinks":[{"backlog_events":1,"circuit":"open","consecutive_failures":2,"cursor":"1:0","dead_lettered":0,"delivered":4,\
        "last_error":"HTTP 503","last_success_at":null,"name":"collector","retried":3,"retry_at":1700000030123,"state":"retrying","type":"http"},\
        {"backlog_events":0,"circuit":"closed","consecutive_failures":0,"cursor":null,"dead_lettered":0,"delivered":5,\
        "last_error":null,"last_success_at":1700000000000,"name":"archive","retried":0,"retry_at":null,"state":"idle","type":"file"}],\
        "uptime_ms":12345}
        """

    static let status = StatusReply(
        pid: 4242, protocolVersion: 1, uptimeMilliseconds: 12345, runtimeDirectory: "/run/ferry", dataDirectory: "/var/lib/ferry",
        queue: .init(events: 1, bytes: 4096, segments: 1, oldestUndeliveredAgeMilliseconds: nil, cursor: "1:0", verifyingSegments: 0),
        delivery: .init(sink: "collector", state: "retrying", consecutiveFailures: 2, lastError: "HTTP 503", retryAt: 1_700_000_030_123),
        consent: snapshot,
        sinks: [
            .init(name: "collector", type: "http", state: "retrying", circuit: "open", consecutiveFailures: 2, backlogEvents: 1,
                  delivered: 4, retried: 3, deadLettered: 0, cursor: "1:0", lastSuccessAt: nil, lastError: "HTTP 503", retryAt: 1_700_000_030_123),
            .init(name: "archive", type: "file", state: "idle", circuit: "closed", consecutiveFailures: 0, backlogEvents: 0,
                  delivered: 5, retried: 0, deadLettered: 0, cursor: nil, lastSuccessAt: 1_700_000_000_000, lastError: nil, retryAt: nil),
        ],
        counters: ["accepted": 5, "blocked_at_send": 0, "delivered": 4],
        recovery: .init(events: 5, corruptRegions: 0, corruptBytes: 0, truncatedBytes: 0), clientEventsLost: ["app": 3])

    @Test("status: decodes the agent's document; nulls stay explicit in queue and sinks, absent in delivery")
    func statusReply() throws {
        #expect(try Self.decode(StatusReply.self, Self.statusJSON) == Self.status)
        #expect(try Self.roundTrip(Self.status) == Self.status)
        #expect(try Self.object(JSONEncoder().encode(Self.status)) == Self.object(Array(Self.statusJSON.utf8)))
        let encoded = String(decoding: try JSONEncoder().encode(Self.status), as: UTF8.self)
        #expect(encoded.contains(#""oldest_undelivered_age_ms":null"#))
        #expect(encoded.contains(#""last_success_at":null"#) && encoded.contains(#""cursor":null"#))
        #expect(StatusReply.Delivery(Self.status.sinks[0]) == Self.status.delivery)
        let delivery = try Self.object(JSONEncoder().encode(Self.status))["delivery"] as? NSDictionary
        #expect(delivery?["last_success_at"] == nil, "absent, not null, in delivery")

        // No sink: `delivery` is an empty object.
        var bare = Self.status
        bare.delivery = nil
        bare.sinks = []
        #expect(try Self.roundTrip(bare) == bare)
        #expect(try Self.object(JSONEncoder().encode(bare))["delivery"] as? NSDictionary == NSDictionary())
    }
}
