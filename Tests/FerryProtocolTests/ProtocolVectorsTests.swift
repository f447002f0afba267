import FerryProtocol
import Foundation
import Testing

/// The shared protocol test vectors, `Tests/Vectors/protocol-vectors.json`: generated here from the
/// Swift codecs, read by the Python client's tests (docs/PROTOCOL.md, "Test vectors"). The test
/// regenerates the file in memory and fails when the committed one differs.
@Suite("Protocol vectors")
struct ProtocolVectorsTests {
    static let vectorsPath = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Vectors/protocol-vectors.json").path
    static let regenerate = "FERRY_REGENERATE_VECTORS=1 swift test --filter ProtocolVectors"

    @Test("Tests/Vectors/protocol-vectors.json is what the Swift codecs produce")
    func vectorsAreCurrent() throws {
        let generated = try ProtocolVectors.file()
        if ProcessInfo.processInfo.environment["FERRY_REGENERATE_VECTORS"] == "1" {
            try FileManager.default.createDirectory(
                atPath: (Self.vectorsPath as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data(generated).write(to: URL(fileURLWithPath: Self.vectorsPath))
            return
        }
        guard let committed = FileManager.default.contents(atPath: Self.vectorsPath) else {
            Issue.record("\(Self.vectorsPath) is missing; write it with `\(Self.regenerate)`")
            return
        }
        if Array(committed) != generated {
            let old = String(decoding: committed, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
            let new = String(decoding: generated, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
            let line = (0..<min(old.count, new.count)).first { old[$0] != new[$0] } ?? min(old.count, new.count)
            Issue.record("""
                Tests/Vectors/protocol-vectors.json is out of date with the Swift codecs (first difference at line \
                \(line + 1): committed \(line < old.count ? String(old[line]) : "<end>"), generated \
                \(line < new.count ? String(new[line]) : "<end>")). If the change is intended, regenerate it with \
                `\(Self.regenerate)`, check the diff, update docs/PROTOCOL.md and commit both.
                """)
        }
    }

    @Test("the vectors cover every status, reason, error code and control op, and the five kinds")
    func coverage() throws {
        let vectors = try ProtocolVectors.vectors()
        let kinds = Set(vectors.compactMap { $0["kind"] as? String })
        #expect(kinds == ["event_message", "ack", "error_reply", "control_request", "control_reply"])
        let entries = vectors.filter { $0["kind"] as? String == "ack" }.flatMap { $0["entries"] as? [[String: Any]] ?? [] }
        #expect(Set(entries.compactMap { $0["status"] as? String }) == Set(EventStatus.allCases.map(\.description)))
        #expect(Set(entries.compactMap { $0["reason"] as? String }) == Set(RejectReason.allCases.map(\.description)))
        let codes = Set(vectors.filter { $0["kind"] as? String == "error_reply" }.compactMap { $0["code_name"] as? String })
        #expect(codes == Set(ErrorCode.allCases.map(\.description)))
        for kind in ["control_request", "control_reply"] {
            let ops = Set(vectors.filter { $0["kind"] as? String == kind }.compactMap { $0["op"] as? String })
            #expect(ops == Set(ControlRequest.ops), "\(kind)")
        }
        let fields = vectors.filter { $0["kind"] as? String == "event_message" }
            .flatMap { $0["events"] as? [[String: Any]] ?? [] }
        for key in ["anonymous_id", "group_id", "previous_id", "context", "session", "once_key", "user_id"] {
            #expect(fields.contains { ($0[key] as? String).map { !$0.isEmpty } ?? false }, "no event vector sets \(key)")
        }
        #expect(Set(fields.compactMap { $0["type"] as? String }) == Set(EventType.allCases.map(\.description)))
        #expect(Set(vectors.compactMap { $0["name"] as? String }).count == vectors.count, "vector names are unique")
    }

    @Test("every vector decodes back to what it states with the Swift codecs")
    func vectorsDecode() throws {
        for vector in try ProtocolVectors.vectors() {
            let frames = (vector["frames_hex"] as? [String] ?? []).map { bytes(hex: $0) }
            switch vector["kind"] as? String {
            case "event_message":
                let header = try MessageHeader(decoding: frames[0])
                #expect(header.kind == .events && Int(header.version) == vector["version"] as? Int)
                for frame in frames.dropFirst() { _ = try WireEvent(decoding: frame) }
            case "ack":
                #expect(try AckCodec.decode(frames[1]).count == (vector["entries"] as? [Any])?.count)
            case "error_reply":
                #expect(try ErrorReply(decoding: frames[1]).code.description == vector["code_name"] as? String)
            case "control_request":
                let json = try #require(vector["json"] as? String)
                #expect(try ControlRequest.decode(json: Array(json.utf8)).op == vector["op"] as? String)
            case "control_reply":
                let json = try #require(vector["json"] as? String)
                let object = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any]
                #expect(object?["ok"] as? Bool == vector["ok"] as? Bool)
            default:
                Issue.record("unknown kind \(vector["kind"] ?? "nil")")
            }
        }
    }
}

/// Builds the vectors. Everything is fixed (no clock, no randomness), so the file is stable.
enum ProtocolVectors {
    static let id = EventID("0190f5c2-7a3b-7c4d-8e5f-0123456789ab")!
    static let session = EventID("7f3c2a1e-9b8d-4c6f-a5e4-d3c2b1a09f8e")!

    static func file() throws -> [UInt8] {
        let object: [String: Any] = [
            "format": 1,
            "about": "Ferry protocol test vectors, generated from the Swift codecs by Tests/FerryProtocolTests/ProtocolVectorsTests.swift; "
                + "regenerate with `FERRY_REGENERATE_VECTORS=1 swift test --filter ProtocolVectors`. Schema: docs/PROTOCOL.md, \"Test vectors\".",
            "vectors": try vectors(),
        ]
        let data = try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        return Array(data) + [UInt8(ascii: "\n")]
    }

    static func vectors() throws -> [[String: Any]] {
        eventMessages() + acks() + errorReplies() + controlRequests() + (try controlReplies())
    }

    // MARK: Events

    static func event(_ event: WireEvent) -> [String: Any] {
        [
            "id": event.id.description, "timestamp": event.timestamp, "sequence": event.sequence, "pid": event.pid,
            "type": event.type.description, "type_code": event.type.rawValue, "category": event.category,
            "local_only": event.flags.contains(.localOnly), "flags": event.flags.subtracting(.extended).rawValue,
            "source": event.source, "name": event.name, "user_id": event.userID, "once_key": event.onceKey,
            "properties": String(decoding: event.properties, as: UTF8.self),
            "session": event.session?.description ?? "",
            "anonymous_id": event.anonymousID, "group_id": event.groupID, "previous_id": event.previousID,
            "context": String(decoding: event.context, as: UTF8.self),
            "extensions": event.extensions.map { ["tag": $0.tag.rawValue, "value_hex": hex($0.value)] as [String: Any] },
            "frame_hex": hex(event.encoded()),
        ]
    }

    static func message(_ name: String, version: UInt8, requestID: UInt32, _ events: [WireEvent], about: String) -> [String: Any] {
        let header = MessageHeader(version: version, kind: .events, requestID: requestID)
        return [
            "kind": "event_message", "name": name, "about": about, "version": Int(version), "request_id": requestID,
            "events": events.map(event),
            "frames_hex": [hex(header.encoded())] + events.map { hex($0.encoded()) },
        ]
    }

    static func eventMessages() -> [[String: Any]] {
        let signedUp = WireEvent(id: id, timestamp: 1_700_000_000_000, sequence: 1, pid: 4242, type: .track,
                                 source: "app", name: "Signed Up", properties: Array(#"{"plan":"pro"}"#.utf8))
        var withSession = signedUp
        withSession.session = session
        let group = WireEvent(id: id, timestamp: 1_700_000_000_000, sequence: 2, pid: 4242, type: .group, source: "app",
                              name: "", session: session, anonymousID: "anon-7", groupID: "acme",
                              context: Array(#"{"locale":"fr-FR"}"#.utf8))
        let base = EventID("0190f5c2-7a3b-7c4d-8e5f-0123456789b0")!
        func next(_ k: UInt64) -> EventID { EventID(high: base.high, low: base.low + k) }
        let everyType: [WireEvent] = [
            WireEvent(id: next(1), timestamp: 1_700_000_000_001, sequence: 3, pid: 4242, type: .track, category: 2,
                      source: "app", name: "Order Completed", userID: "u-1", onceKey: "order-9",
                      properties: Array(#"{"total":42.5,"items":["a","b"]}"#.utf8), session: session,
                      context: Array(#"{"app":{"name":"shop","version":"1.2"}}"#.utf8)),
            WireEvent(id: next(2), timestamp: 1_700_000_000_002, sequence: 4, pid: 4242, type: .screen, flags: .localOnly,
                      source: "app", name: "Écran d’accueil 🇫🇷", session: session, anonymousID: "anon-7"),
            WireEvent(id: next(3), timestamp: 1_700_000_000_003, sequence: 5, pid: 4242, type: .identify, source: "app",
                      name: "", userID: "u-1", properties: Array(#"{"email":"a@example.com"}"#.utf8), session: session,
                      anonymousID: "anon-7"),
            WireEvent(id: next(4), timestamp: 1_700_000_000_004, sequence: 6, pid: 4242, type: .group, source: "app",
                      name: "", userID: "u-1", properties: Array(#"{"plan":"enterprise"}"#.utf8), session: session,
                      groupID: "acme"),
            WireEvent(id: next(5), timestamp: 1_700_000_000_005, sequence: 7, pid: 4242, type: .alias, source: "app",
                      name: "", userID: "u-1", session: session, previousID: "anon-7"),
            WireEvent(id: next(6), timestamp: 1_700_000_000_006, sequence: 8, pid: 4242, type: .page, source: "app",
                      name: "Pricing", properties: Array(#"{"path":"/pricing"}"#.utf8), session: session,
                      anonymousID: "anon-7", context: Array(#"{"page":{"url":"https://example.com/pricing"},"locale":"en"}"#.utf8)),
            WireEvent(id: next(7), timestamp: 1_700_000_000_007, sequence: 9, pid: 4242, type: .track, source: "app",
                      name: "Future", session: session,
                      extensions: [EventExtension(tag: .init(rawValue: 0x0042), value: Array("kept, ignored".utf8))]),
        ]
        let bare = WireEvent(id: .zero, timestamp: 0, sequence: 0, pid: 0, type: .identify, source: "", name: "")
        return [
            message("worked-example-v1", version: 1, requestID: 7, [signedUp],
                    about: "docs/PROTOCOL.md worked example: a version 1 message, no extension block"),
            message("worked-example-v2-session", version: 2, requestID: 7, [withSession],
                    about: "the same event from a version 2 client with a session (flag bit 15, tag 1)"),
            message("event-model-fields", version: 2, requestID: 8, [group],
                    about: "docs/PROTOCOL.md event-model example: tags 2 anonymousId, 3 groupId, 5 context"),
            message("every-type-and-field", version: 2, requestID: 9, everyType,
                    about: "one event of each type; category, once-key, localOnly, Unicode, previousId (tag 4), an unknown ordinary tag 0x42"),
            message("bare-header", version: 1, requestID: 10, [bare],
                    about: "every text field empty, no properties: the frame is the 52-byte fixed header"),
        ]
    }

    // MARK: Acks and errors

    static func ack(_ name: String, version: UInt8 = 2, requestID: UInt32, _ entries: [AckEntry], about: String) -> [String: Any] {
        let header = MessageHeader(version: version, kind: .ack, requestID: requestID)
        return [
            "kind": "ack", "name": name, "about": about, "version": version, "request_id": requestID,
            "entries": entries.map {
                ["id": $0.id.description, "status": $0.status.description, "status_code": $0.status.rawValue,
                 "reason": $0.reason.description, "reason_code": $0.reason.rawValue] as [String: Any]
            },
            "frames_hex": [hex(header.encoded()), hex(AckCodec.encode(entries))],
        ]
    }

    static func acks() -> [[String: Any]] {
        var every: [AckEntry] = [
            AckEntry(id: id, status: .accepted), AckEntry(id: id, status: .accepted, reason: .held),
            AckEntry(id: id, status: .accepted, reason: .quarantined),
            AckEntry(id: id, status: .duplicate), AckEntry(id: id, status: .duplicate, reason: .onceKey),
        ]
        every += RejectReason.rejections.map { AckEntry(id: id, status: .rejected, reason: $0) }
        every += RejectReason.consentBlocks.map { AckEntry(id: id, status: .blocked, reason: $0) }
        every += [AckEntry(id: id, status: .suppressed, reason: .localOnly)]
        return [
            ack("worked-example-ack", version: 1, requestID: 7, [
                AckEntry(id: id, status: .accepted), AckEntry(id: .zero, status: .rejected, reason: .malformed),
                AckEntry(id: id, status: .duplicate),
            ], about: "docs/PROTOCOL.md ack example: accepted, rejected malformed (all-zero id), duplicate"),
            ack("every-status-and-reason", requestID: 11, every,
                about: "each status with each reason it can carry (rejected 1-8 and 20, blocked 10-17, suppressed 9, duplicate 18, accepted 19 and 21)"),
            ack("older-agent-consent", requestID: 12, [
                AckEntry(id: id, status: .blocked), AckEntry(id: id, status: .suppressed),
            ], about: "blocked and suppressed with reason 0, as agents before the consent reasons send them"),
            ack("empty", requestID: 13, [], about: "an ack with no entries (count 0)"),
        ]
    }

    static func errorReplies() -> [[String: Any]] {
        let messages: [(ErrorCode, UInt8, UInt32, String)] = [
            (.malformedMessage, 1, 0, "header frame is 5 bytes, expected 8"),
            (.unsupportedVersion, 2, 7, "v2"),
            (.unknownKind, 2, 3, "unknown message kind 9"),
            (.messageTooLarge, 2, 4, "4097 event frames in one message; the limit is 4096"),
            (.shuttingDown, 2, 5, "the agent is shutting down"),
            (.accessDenied, 2, 6, "access denied: uid 1001 may not send events (access.ingest allows: root, ferry-admin)"),
        ]
        return messages.map { code, version, requestID, text in
            let header = MessageHeader(version: version, kind: .error, requestID: requestID)
            return [
                "kind": "error_reply", "name": "error-\(code)", "version": version, "request_id": requestID,
                "code": code.rawValue, "code_name": code.description, "message": text,
                "frames_hex": [hex(header.encoded()), hex(ErrorReply(code: code, message: text).encoded())],
            ]
        }
    }

    // MARK: Control

    static func controlRequests() -> [[String: Any]] {
        let requests: [(String, ControlRequest)] = [
            ("status", .status()), ("metrics", .metrics()), ("whoami", .whoami()), ("consent_state", .consentState()),
            ("consent_log", .consentLog(limit: nil)), ("consent_log-limit", .consentLog(limit: 20)),
            ("set_tracking", .setTracking(false)),
            ("set_consent", .setConsent(.denied, for: "analytics")),
            ("set_consent-all-with-actor", ControlRequest(.setConsent(category: "all", status: .granted), actor: "settings-ui")),
            ("set_persistence", .setPersistence(.granted)),
            ("set_gdpr", .setGDPR(["subject_to_gdpr": .granted, "data_usage": .denied])),
            ("enable_features", .enableFeatures(["analytics", "push"])),
            ("disable_features", .disableFeatures(["all"])),
            ("purge", .purge(category: nil)), ("purge-category", .purge(category: "advertising")),
            ("forget", .forget(userID: "u-1")),
            ("forget_status", .forgetStatus()),
            ("start", .start()),
            ("deadletter_replay", .deadLetterReplay(id: "0190f5c2-7a3b-7c4d-8e5f-0123456789ab-3")),
            ("deadletter_replay-sink", .deadLetterReplay(id: "0190f5c2-7a3b-7c4d-8e5f-0123456789ab-3", sink: "collector")),
            ("quarantine_replay", .quarantineReplay(id: "0190f5c2-7a3b-7c4d-8e5f-0123456789ab")),
            ("quarantine_replay-all", .quarantineReplay(id: nil)),
            ("quarantine_drop", .quarantineDrop(id: "0190f5c2-7a3b-7c4d-8e5f-0123456789ab")),
            ("quarantine_drop-all", .quarantineDrop(id: nil)),
            ("reload", .reload()),
            ("recipients", .recipients(userID: "u-42")),
        ]
        return requests.map { name, request in
            ["kind": "control_request", "name": "request-\(name)", "op": request.op,
             "json": String(decoding: request.encoded(), as: UTF8.self)]
        }
    }

    static func controlReplies() throws -> [[String: Any]] {
        let head = String(repeating: "9f2c4e6a", count: 8)
        let consent = ConsentSnapshot(
            networkTracking: true, trackingEnabled: true,
            categories: ["advertising", "analytics", "diagnostics", "personalization", "push"],
            enabledFeatures: ["analytics", "push"],
            consent: ["analytics": .granted, "advertising": .denied, "personalization": .undetermined,
                      "diagnostics": .undetermined, "push": .granted],
            persistence: .undetermined,
            gdpr: GDPRRecord(subjectToGDPR: .granted, dataUsage: .granted, adsPersonalization: .denied, adStorage: .unset),
            deliveryStarted: true, anonymousID: "0190f5c2-7a3b-7c4d-8e5f-0123456789ab", heldEvents: 3, auditEntries: 2,
            auditHead: head)
        let sink = StatusReply.Sink(
            name: "file", type: "file", state: "idle", circuit: "closed", consecutiveFailures: 0, backlogEvents: 0,
            delivered: 5, retried: 0, deadLettered: 0, cursor: "1:4096", lastSuccessAt: 1_700_000_000_500, lastError: nil,
            retryAt: nil, deadLetters: 0)
        let status = StatusReply(
            pid: 4242, protocolVersion: Int(ferryProtocolVersion), uptimeMilliseconds: 60_000, runtimeDirectory: "/run/user/1000/ferry",
            dataDirectory: "/home/u/.local/state/ferry",
            queue: .init(events: 0, bytes: 0, segments: 1, oldestUndeliveredAgeMilliseconds: nil, cursor: "1:4096",
                         verifyingSegments: 0, retentionMaxBytes: 1_073_741_824),
            delivery: .init(sink), consent: consent, sinks: [sink],
            counters: ["accepted": 5, "duplicate": 1, "rejected": 0, "blocked": 2, "suppressed": 1],
            recovery: .init(events: 0, corruptRegions: 0, corruptBytes: 0, truncatedBytes: 0),
            clientEventsLost: [:])
        let entries = [
            AuditEntry(seq: 1, at: 1_700_000_000_000, uid: 1000, pid: 4242, process: "ferry", actor: "settings-ui",
                       change: "consent.analytics", old: "\"undetermined\"", new: "\"granted\"", prev: AuditEntry.genesis,
                       hash: "351c2efbe897a27fdd6dbe7392e081b4065bb0a2931b3cef36147e96eea5c6ec"),
        ]
        let purged = ConsentUpdate(consent: consent, purged: PurgeReport(queued: 7, held: 2))
        let replies: [(String, String, any Encodable)] = [
            ("status", "status", status),
            ("metrics", "metrics", MetricsReply(text: "# TYPE ferry_events_accepted_total counter\nferry_events_accepted_total 5\n")),
            ("whoami", "whoami", WhoAmIReply(uid: 1000, gid: 1000, pid: 4243, mode: "user", ingest: true, control: true, events: true)),
            ("consent_state", "consent_state", ConsentUpdate(consent: consent)),
            ("consent_log", "consent_log", ConsentAuditLog(entries: [entries[0]], verified: true)),
            ("consent_log-broken", "consent_log", ConsentAuditLog(entries: entries, verified: false,
                                                                  problem: "entry 1: hash does not match its fields")),
            ("set_tracking", "set_tracking", ConsentUpdate(consent: consent)),
            ("set_consent-deny", "set_consent", purged),
            ("set_persistence", "set_persistence", ConsentUpdate(consent: consent)),
            ("set_gdpr", "set_gdpr", purged),
            ("enable_features", "enable_features", ConsentUpdate(consent: consent)),
            ("disable_features", "disable_features", purged),
            ("purge", "purge", purged),
            ("forget", "forget", purged),
            ("forget_status", "forget_status", ErasureStatusReply(erasures: [
                ErasureRequestStatus(id: "0190f5c2-7a3b-7c4d-8e5f-0123456789ab", requestedAt: 1_700_000_000_000, sinks: [
                    ErasureSinkStatus(sink: "collector", state: .pending, attempts: 3, lastError: "http sink: erasure: HTTP 503",
                                      updatedAt: 1_700_000_004_000),
                    ErasureSinkStatus(sink: "segment", state: .sent, attempts: 1, updatedAt: 1_700_000_000_200, reference: "2rA9nNpYHb3z"),
                ]),
            ])),
            ("start", "start", ConsentUpdate(consent: consent, deliveryStarted: true)),
            ("reload", "reload", ReloadReply.applied(changed: ["logLevel", "sinks[0].retry"])),
            ("recipients", "recipients", RecipientsReply(sinks: [
                RecipientStatus(sink: "archive", verdict: .delivered, events: 5, firstAt: 1_700_000_000_000, lastAt: 1_700_000_060_000),
                RecipientStatus(sink: "analytics", verdict: .mayHaveDelivered, reason: "on_the_wire"),
                RecipientStatus(sink: "ads", verdict: .never, reason: "consent advertising", since: 1_700_000_030_000),
                RecipientStatus(sink: "crm", verdict: .notYet, events: 2),
            ])),
            ("reload-refused", "reload", ReloadReply.refused([
                "/etc/ferry/ferryd.json: quality.plan: cannot read /etc/ferry/plan.json; the running configuration and quality gate are kept",
            ])),
            ("deadletter_replay", "deadletter_replay", DeadLetterReplayReply(
                ok: true, sink: "collector", id: "0190f5c2-7a3b-7c4d-8e5f-0123456789ab-3", events: 12)),
            ("deadletter_replay-failed", "deadletter_replay", DeadLetterReplayReply(
                ok: false, sink: "collector", id: "0190f5c2-7a3b-7c4d-8e5f-0123456789ab-3", error: "HTTP 503")),
            ("quarantine_replay", "quarantine_replay", QuarantineReply(ok: true, results: [
                .init(id: "0190f5c2-7a3b-7c4d-8e5f-0123456789ab", outcome: "stored"),
                .init(id: "0190f5c2-7a3b-7c4d-8e5f-0123456789ac", outcome: "violating", violations: [
                    #"{"event":"track:Order Completed","rule":"required","path":"properties.total","message":"is required"}"#,
                ]),
            ])),
            ("quarantine_replay-refused", "quarantine_replay", QuarantineReply.refused("no quarantined event 0190f5c2-7a3b-7c4d-8e5f-0123456789ad")),
            ("quarantine_drop", "quarantine_drop", QuarantineReply(ok: true, results: [
                .init(id: "0190f5c2-7a3b-7c4d-8e5f-0123456789ab", outcome: "dropped"),
            ])),
            ("refused-unknown-category", "set_consent", ControlRefusal(
                "unknown category \"analytcs\"", valid: ["advertising", "analytics", "diagnostics", "personalization", "push", "all"])),
            ("refused-access-denied", "purge", ControlRefusal(
                "access denied: uid 1001 may not change the consent state (access.control allows: root, ferry-admin)",
                code: ControlRefusal.accessDenied)),
            ("refused-not-a-request", "status", ControlRefusal.notARequest),
        ]
        return try replies.map { name, op, reply in
            let json = controlReplyJSON(reply)
            let object = try JSONSerialization.jsonObject(with: Data(json)) as? [String: Any] ?? [:]
            return ["kind": "control_reply", "name": "reply-\(name)", "op": op, "ok": object["ok"] as? Bool ?? false,
                    "json": String(decoding: json, as: UTF8.self)]
        }
    }
}
