import FerryProtocol
@testable import FerryQuality
import Foundation
import Testing

let testKey = [UInt8](repeating: 0x42, count: 32)

func redactor(_ json: String, key: [UInt8] = testKey) throws -> Redactor {
    try Redactor(configuration: try RedactionConfiguration(json: Array(json.utf8)), key: key)
}

func hmacTag(_ text: String) -> String {
    String(decoding: HMACSHA256(key: testKey).tag(Array(text.utf8)), as: UTF8.self)
}

func redacted(_ configuration: String, _ event: WireEvent) throws -> Judgement {
    QualityGate(plan: nil, allowUnplanned: true, redactor: try redactor(configuration)).judge(event)
}

@Suite struct RedactionTests {
    /// The table indexes the redactor uses for detector kinds and path roots are their
    /// positions in `allCases` (the order its tables were built in).
    @Test func tableIndexesFollowTheCases() {
        #expect(DetectorKind.allCases.map(\.index) == Array(DetectorKind.allCases.indices))
        #expect(RedactionPath.Root.allCases.map(\.index) == Array(RedactionPath.Root.allCases.indices))
    }

    @Test(arguments: [
        ("drop", #"{"plan":"pro"}"#),
        ("mask", #"{"email":"j***@e***.com","plan":"pro"}"#),
        ("hash", #"{"email":"\#(hmacTag("jane@example.com"))","plan":"pro"}"#),
    ])
    func eachActionByPath(action: String, expected: String) throws {
        let judgement = try redacted(#"{"rules": [{"path": "properties.email", "action": "\#(action)"}]}"#,
                                     event(properties: #"{"email": "jane@example.com", "plan": "pro"}"#))
        #expect(judgement.redacted)
        #expect(String(decoding: judgement.event.properties, as: UTF8.self) == expected)
    }

    @Test(arguments: [
        ("properties.*.email", #"{"a": {"email": "x"}, "b": {"email": "y", "k": 1}, "c": 1}"#, #"{"a":{},"b":{"k":1},"c":1}"#),
        ("properties.items.*.sku", #"{"items": [{"sku": "A", "n": 1}, {"sku": "B"}]}"#, #"{"items":[{"n":1},{}]}"#),
        ("properties.items.1", #"{"items": ["a", "b", "c"]}"#, #"{"items":["a","c"]}"#),
        ("properties.*", #"{"a": 1, "b": [2]}"#, #"{}"#),
        ("properties.a.*.c", #"{"a": {"x": {"c": 1, "d": 2}, "y": 3}}"#, #"{"a":{"x":{"d":2},"y":3}}"#),
        ("properties.missing", #"{"a": 1}"#, #"{"a": 1}"#),
    ])
    func wildcardPaths(path: String, properties: String, expected: String) throws {
        let judgement = try redacted(#"{"rules": [{"path": "\#(path)", "action": "drop"}]}"#, event(properties: properties))
        #expect(String(decoding: judgement.event.properties, as: UTF8.self) == expected)
        #expect(judgement.redacted == (properties != expected))
    }

    @Test func traitsPathsApplyToIdentifyAndGroupOnly() throws {
        let configuration = #"{"rules": [{"path": "traits.email", "action": "drop"}]}"#
        let identify = try redacted(configuration, event(.identify, "", properties: #"{"email": "a@example.com"}"#))
        #expect(String(decoding: identify.event.properties, as: UTF8.self) == "{}")
        let track = try redacted(configuration, event(properties: #"{"email": "a@example.com"}"#))
        #expect(!track.redacted)
    }

    @Test func contextPathsAndMaskOfContainers() throws {
        let judgement = try redacted(#"{"rules": [{"path": "context.traits", "action": "mask"}, {"path": "context.ip", "action": "hash"}]}"#,
                                     event(context: #"{"ip": "203.0.113.9", "traits": {"name": "Jane", "age": 40, "tags": ["vip"], "x": null}}"#))
        #expect(String(decoding: judgement.event.context, as: UTF8.self)
            == #"{"ip":"\#(hmacTag("203.0.113.9"))","traits":{"name":"J***","age":"***","tags":["v***"],"x":null}}"#)
    }

    @Test func hashOfANonStringIsItsJSONText() throws {
        let judgement = try redacted(#"{"rules": [{"path": "properties.total", "action": "hash"}]}"#, event(properties: #"{"total": 42.5}"#))
        #expect(String(decoding: judgement.event.properties, as: UTF8.self) == #"{"total":"\#(hmacTag("42.5"))"}"#)
    }

    @Test(arguments: RedactionAction.allCases)
    func identifiersByRule(action: RedactionAction) throws {
        let rules = ["userId", "anonymousId", "previousId", "groupId"].map { #"{"path": "\#($0)", "action": "\#(action.rawValue)"}"# }
        let judgement = try redacted(#"{"rules": [\#(rules.joined(separator: ","))]}"#,
                                     event(.alias, "", userID: "user-1", anonymousID: "anon-1", groupID: "group-1", previousID: "old-1"))
        let expected: (String) -> String = { value in
            switch action {
            case .drop: ""
            case .mask: String(value.prefix(1)) + "***"
            case .hash: hmacTag(value)
            case .keep: value
            }
        }
        #expect(judgement.event.userID == expected("user-1"))
        #expect(judgement.event.anonymousID == expected("anon-1"))
        #expect(judgement.event.groupID == expected("group-1"))
        #expect(judgement.event.previousID == expected("old-1"))
    }

    static let samples: [(DetectorKind, String, String)] = [
        (.email, "jane.doe@example.com", "j***@e***.com"),
        (.phone, "+14155552671", "+*********71"),
        (.ip, "198.51.100.23", "198.51.*.*"),
        (.card, "4111-1111-1111-1111", "****-****-****-1111"),
        (.iban, "GB82WEST12345698765432", "GB****************5432"),
    ]

    @Test(arguments: DetectorKind.allCases, RedactionAction.allCases.filter(\.isDetectorAction))
    func everyDetectorWithEveryAction(kind: DetectorKind, action: RedactionAction) throws {
        let (_, value, masked) = Self.samples.first { $0.0 == kind }!
        let configuration = #"{"detect": [{"kind": "\#(kind.rawValue)", "action": "\#(action.rawValue)"}]}"#
        let judgement = try redacted(configuration, event(properties: #"{"v": "\#(value)", "n": "pro"}"#, context: #"{"deep": [{"v": "\#(value)"}]}"#))
        let properties = String(decoding: judgement.event.properties, as: UTF8.self)
        let context = String(decoding: judgement.event.context, as: UTF8.self)
        switch action {
        case .drop:
            #expect(properties == #"{"n":"pro"}"#)
            #expect(context == #"{"deep":[{}]}"#)
        case .mask:
            #expect(properties == #"{"v":"\#(masked)","n":"pro"}"#)
            #expect(context == #"{"deep":[{"v":"\#(masked)"}]}"#)
        case .hash:
            #expect(properties == #"{"v":"\#(hmacTag(value))","n":"pro"}"#)
        case .keep: Issue.record("a detector that keeps is refused (RedactionConfigurationTests)")
        }
        // Only the configured kind: the other samples pass untouched.
        for (other, otherValue, _) in Self.samples where other != kind {
            let untouched = try redacted(configuration, event(properties: #"{"v": "\#(otherValue)"}"#))
            #expect(!untouched.redacted, "\(kind) fired on \(other) \(otherValue)")
        }
    }

    @Test func detectorsSkipHashesAndFindEscapedValues() throws {
        let configuration = #"{"detect": [{"kind": "email", "action": "hash"}, {"kind": "ip", "action": "mask"}]}"#
        let hashed = hmacTag("jane@example.com")
        let judgement = try redacted(configuration, event(properties: #"{"a": "\#(hashed)", "b": "jane\u0040example.com", "c": {"version": "1.2.3.4"}}"#,
                                                          userID: hashed, anonymousID: "jane@example.com"))
        #expect(judgement.event.userID == hashed)
        #expect(judgement.event.anonymousID == hashed)
        #expect(String(decoding: judgement.event.properties, as: UTF8.self) == #"{"a":"\#(hashed)","b":"\#(hashed)","c":{"version": "1.2.3.4"}}"#)
    }

    @Test func aStrongerRuleWins() throws {
        let judgement = try redacted(#"{"rules": [{"path": "properties.e", "action": "mask"}, {"path": "properties.*", "action": "drop"}]}"#,
                                     event(properties: #"{"e": "x", "f": 1}"#))
        #expect(String(decoding: judgement.event.properties, as: UTF8.self) == "{}")
    }

    // MARK: keep

    static let allDetectorsMask = #"{"kind": "email", "action": "mask"}, {"kind": "phone", "action": "mask"}, {"kind": "ip", "action": "mask"}, {"kind": "card", "action": "mask"}, {"kind": "iban", "action": "mask"}"#

    /// A kept field is delivered byte for byte (its spacing and escapes too), the detectors do not
    /// look inside it, and a sibling holding the same values is still redacted.
    @Test func aKeptFieldIsLeftAsItIsWhileItsSiblingIsRedacted() throws {
        let configuration = #"{"rules": [{"path": "properties.orderNumber", "action": "keep"}, {"path": "properties.memo", "action": "keep"}], "detect": [\#(Self.allDetectorsMask)]}"#
        let judgement = try redacted(configuration, event(properties: #"{"orderNumber": "4111111111111111", "memo": "jane\u0040example.com paid with 4111 1111 1111 1111", "note": "jane@example.com paid with 4111 1111 1111 1111"}"#))
        #expect(judgement.redacted)
        #expect(String(decoding: judgement.event.properties, as: UTF8.self)
            == #"{"orderNumber":"4111111111111111","memo":"jane\u0040example.com paid with 4111 1111 1111 1111","note":"j***@e***.com paid with **** **** **** 1111"}"#)
        // Nothing but kept fields: the event is not changed at all, in place as decoded.
        let kept = event(properties: #"{"orderNumber": "4111111111111111",  "memo": "mail jane@example.com"}"#)
        let gate = QualityGate(plan: nil, allowUnplanned: true, redactor: try redactor(configuration))
        #expect(gate.judge(kept).event == kept)
        #expect(try InPlaceJudgementTests.passes(gate, kept))
    }

    /// A kept object or array: nothing below it is looked at or changed, at any depth.
    @Test func aKeptObjectIsKeptWhole() throws {
        let configuration = #"{"rules": [{"path": "context.order", "action": "keep"}, {"path": "properties.items.*.ref", "action": "keep"}], "detect": [\#(Self.allDetectorsMask)]}"#
        let order = #"{"buyer": {"email": "jane@example.com", "ip": "198.51.100.23"}, "cards": ["4111 1111 1111 1111", {"iban": "GB82WEST12345698765432"}], "n": 1}"#
        let items = #"[{"ref": {"phone": "+14155552671"}, "email": "jane@example.com"}, {"ref": ["jane@example.com"]}]"#
        let judgement = try redacted(configuration, event(properties: #"{"items": \#(items)}"#, context: #"{"order": \#(order), "ip": "198.51.100.23"}"#))
        #expect(String(decoding: judgement.event.context, as: UTF8.self) == #"{"order":\#(order),"ip":"198.51.*.*"}"#)
        #expect(String(decoding: judgement.event.properties, as: UTF8.self)
            == #"{"items":[{"ref":{"phone": "+14155552671"},"email":"j***@e***.com"},{"ref": ["jane@example.com"]}]}"#)
    }

    /// An id a `keep` rule names is not looked at by the detectors; the other ids are.
    @Test func aKeptIdentifier() throws {
        let configuration = #"{"rules": [{"path": "userId", "action": "keep"}], "detect": [{"kind": "email", "action": "hash"}]}"#
        let original = event(userID: "jane@example.com", anonymousID: "jane@example.com")
        let judgement = try redacted(configuration, original)
        #expect(judgement.event.userID == "jane@example.com")
        #expect(judgement.event.anonymousID == hmacTag("jane@example.com"))
        let gate = QualityGate(plan: nil, allowUnplanned: true, redactor: try redactor(configuration))
        #expect(try InPlaceJudgementTests.passes(gate, event(userID: "jane@example.com")))
    }

    /// Precedence as for the other actions: the rule that ends first along a path (the enclosing
    /// one) decides the whole value; rules ending at one value, the strongest (keep is the
    /// weakest: a value one rule keeps and another redacts is redacted).
    @Test(arguments: [
        // An enclosing hash over a kept member: hashed whole.
        (#"[{"path": "properties.order", "action": "hash"}, {"path": "properties.order.number", "action": "keep"}]"#,
         #"{"order":"\#(hmacTag(#"{"number": "4111111111111111"}"#))"}"#),
        // An enclosing mask over a kept member: masked whole.
        (#"[{"path": "properties.order.number", "action": "keep"}, {"path": "properties.*", "action": "mask"}]"#,
         #"{"order":{"number":"************1111"}}"#),
        // An enclosing keep over a member a rule drops: kept whole.
        (#"[{"path": "properties.order", "action": "keep"}, {"path": "properties.order.number", "action": "drop"}]"#,
         #"{"order": {"number": "4111111111111111"}}"#),
        // keep and mask ending at one value (a wildcard): masked.
        (#"[{"path": "properties.order", "action": "keep"}, {"path": "properties.*", "action": "mask"}]"#,
         #"{"order":{"number":"************1111"}}"#),
        // keep and drop of the same path: dropped.
        (#"[{"path": "properties.order", "action": "keep"}, {"path": "properties.order", "action": "drop"}]"#, "{}"),
    ])
    func keepPrecedence(rules: String, expected: String) throws {
        let judgement = try redacted(#"{"rules": \#(rules), "detect": [{"kind": "card", "action": "mask"}]}"#,
                                     event(properties: #"{"order": {"number": "4111111111111111"}}"#))
        #expect(String(decoding: judgement.event.properties, as: UTF8.self) == expected)
    }

    @Test func nothingToRedactLeavesTheEventAsItWas() throws {
        let original = event(properties: #"{"plan": "pro", "pad": "xxxx"}"#, context: #"{"app": {"version": "1.2.3"}}"#, userID: "u1")
        let judgement = try redacted(#"{"detect": [{"kind": "email", "action": "hash"}, {"kind": "phone", "action": "hash"}, {"kind": "ip", "action": "hash"}, {"kind": "card", "action": "hash"}, {"kind": "iban", "action": "hash"}]}"#, original)
        #expect(!judgement.redacted)
        #expect(judgement.event == original)
    }

    /// Raw PII in every field, all five detectors and rules for each id: none of it survives in
    /// any byte of the re-encoded frame.
    @Test(arguments: [RedactionAction.mask, .hash, .drop])
    func rawValuesNeverSurviveInTheFrame(action: RedactionAction) throws {
        let pii = ["jane.doe@example.com", "+14155552671", "198.51.100.23", "4111 1111 1111 1111", "GB82 WEST 1234 5698 7654 32", "Jane Secret"]
        let detect = DetectorKind.allCases.map { #"{"kind": "\#($0.rawValue)", "action": "\#(action.rawValue)"}"# }.joined(separator: ",")
        let configuration = #"{"rules": [{"path": "properties.name", "action": "\#(action.rawValue)"}], "detect": [\#(detect)]}"#
        let original = event(properties: #"{"name": "Jane Secret", "email": "jane.doe@example.com", "list": ["+14155552671", {"card": "4111 1111 1111 1111"}]}"#,
                             context: #"{"ip": "198.51.100.23", "bank": "GB82 WEST 1234 5698 7654 32", "traits": {"email": "jane.doe@example.com"}}"#,
                             userID: "jane.doe@example.com", anonymousID: "+14155552671", groupID: "198.51.100.23", previousID: "4111 1111 1111 1111")
        let judgement = try redacted(configuration, original)
        #expect(judgement.redacted)
        let frame = judgement.event.encoded()
        for value in pii {
            #expect(!Self.contains(frame, Array(value.utf8)), "\(value) survived \(action)")
        }
        // The frame decodes, and its JSON fields are still objects.
        let decoded = try WireEvent(decoding: frame)
        #expect(decoded == judgement.event)
        #expect(ParsedJSON(object: decoded.properties) != nil)
        #expect(ParsedJSON(object: decoded.context) != nil)
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard needle.count <= haystack.count else { return false }
        for start in 0...(haystack.count - needle.count) where haystack[start..<(start + needle.count)].elementsEqual(needle) { return true }
        return false
    }

    @Test func redactionRunsBeforeThePlan() throws {
        let plan = try TrackingPlan(json: Array(#"{"events": [{"type": "identify", "traits": {"properties": {"email": {"type": "string", "pattern": "^hmac:[0-9a-f]{64}$"}}, "required": ["email"]}}]}"#.utf8), source: "p")
        let gate = QualityGate(plan: plan, allowUnplanned: false, redactor: try redactor(#"{"rules": [{"path": "traits.email", "action": "hash"}]}"#))
        #expect(gate.judge(event(.identify, "", properties: #"{"email": "jane@example.com"}"#)).violations == [])
        let unredacted = QualityGate(plan: plan, allowUnplanned: false, redactor: nil)
        #expect(unredacted.judge(event(.identify, "", properties: #"{"email": "jane@example.com"}"#)).violations.map(\.rule) == ["pattern"])
    }

    @Test func hashingNeedsAKey() {
        #expect(throws: QualityError.self) { try redactor(#"{"rules": [{"path": "userId", "action": "hash"}]}"#, key: []) }
        #expect(throws: QualityError.self) { try redactor(#"{"detect": [{"kind": "ip", "action": "hash"}]}"#, key: [1, 2, 3]) }
        #expect(throws: Never.self) { try redactor(#"{"detect": [{"kind": "ip", "action": "mask"}]}"#, key: []) }
    }
}

/// RFC 4231's HMAC-SHA-256 test vectors (test case 5, a truncated output, left out).
@Suite struct HMACTests {
    static func hex(_ text: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = text.startIndex
        while index < text.endIndex {
            let next = text.index(index, offsetBy: 2)
            bytes.append(UInt8(text[index..<next], radix: 16)!)
            index = next
        }
        return bytes
    }

    @Test(arguments: [
        ([UInt8](repeating: 0x0B, count: 20), Array("Hi There".utf8), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
        (Array("Jefe".utf8), Array("what do ya want for nothing?".utf8), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        ([UInt8](repeating: 0xAA, count: 20), [UInt8](repeating: 0xDD, count: 50), "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"),
        (Array(1...25), [UInt8](repeating: 0xCD, count: 50), "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"),
        ([UInt8](repeating: 0xAA, count: 131), Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8),
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
        ([UInt8](repeating: 0xAA, count: 131),
         Array("This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.".utf8),
         "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"),
    ])
    func rfc4231(key: [UInt8], data: [UInt8], expected: String) {
        let hmac = HMACSHA256(key: key)
        #expect(hmac.mac(data) == Self.hex(expected))
        // The precomputed key states are reused, not consumed.
        #expect(hmac.tag(data) == Array("hmac:\(expected)".utf8))
    }
}

/// The key file's checks (Redactor.load).
@Suite struct KeyFileTests {
    static func withDirectory(_ body: (String) throws -> Void) throws {
        let directory = NSTemporaryDirectory() + "ferry-key-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try body(directory)
    }

    static func write(_ path: String, bytes: Int, mode: Int) throws {
        try #require(FileManager.default.createFile(atPath: path, contents: Data(repeating: 7, count: bytes), attributes: [.posixPermissions: mode]),
                     "cannot create \(path)")
    }

    static func load(_ path: String) throws -> Redactor {
        try Redactor.load(configuration: RedactionConfiguration(keyFile: path, rules: [RedactionRule(path: "userId", action: .hash)]))
    }

    @Test func acceptsAPrivateRegularFile() throws {
        try Self.withDirectory { directory in
            try Self.write(directory + "/key", bytes: 32, mode: 0o600)
            let redactor = try Self.load(directory + "/key")
            #expect(redactor.summary == ["userId: hash", "key file \(directory)/key"])
            try Self.write(directory + "/readonly", bytes: 64, mode: 0o400)
            _ = try Self.load(directory + "/readonly")
        }
    }

    @Test(arguments: [
        ("group-readable", "mode 640"), ("world-readable", "mode 604"), ("short", "31 bytes"), ("symlink", "symbolic link"),
        ("directory", "not a regular file"), ("missing", "cannot open"),
    ])
    func refuses(kind: String, message: String) throws {
        try Self.withDirectory { directory in
            let path = directory + "/" + kind
            switch kind {
            case "group-readable": try Self.write(path, bytes: 32, mode: 0o640)
            case "world-readable": try Self.write(path, bytes: 32, mode: 0o604)
            case "short": try Self.write(path, bytes: 31, mode: 0o600)
            case "symlink":
                try Self.write(directory + "/target", bytes: 32, mode: 0o600)
                try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: directory + "/target")
            case "directory": try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            default: break
            }
            #expect {
                _ = try Self.load(path)
            } throws: { error in
                let text = (error as? QualityError)?.description ?? ""
                return text.contains(path) && text.contains(message)
            }
        }
    }

    @Test(.enabled(if: geteuid() == 0, "needs root to give the file to another user"))
    func refusesAnotherUsersFile() throws {
        try Self.withDirectory { directory in
            let path = directory + "/key"
            try Self.write(path, bytes: 32, mode: 0o600)
            #expect(chown(path, 65534, 65534) == 0)
            #expect {
                _ = try Self.load(path)
            } throws: { error in
                (error as? QualityError)?.description.contains("owned by uid 65534") == true
            }
        }
    }
}

/// Properties that are not a JSON object cannot be redacted: removed, and said so.
@Suite struct UnredactableFieldTests {
    @Test(arguments: [#"{"email": "jane@example.com""#, #"["jane@example.com"]"#, #""jane@example.com""#])
    func removedWithAViolation(properties: String) throws {
        let judgement = try redacted(#"{"detect": [{"kind": "email", "action": "mask"}]}"#, event(properties: properties))
        #expect(judgement.redacted)
        #expect(judgement.event.properties.isEmpty)
        #expect(judgement.violations.map(\.json) == [#"{"event":"track:Order Completed","rule":"redact","path":"properties","message":"is not a JSON object, so it cannot be redacted: removed"}"#])
        // With a plan too, the removal is reported once, and the plan judges what is left ({}).
        let plan = try TrackingPlan(json: Array(#"{"events": [{"type": "track", "name": "Order Completed", "properties": {"required": ["a"]}}]}"#.utf8), source: "p")
        let gate = QualityGate(plan: plan, allowUnplanned: true, redactor: try redactor(#"{"detect": [{"kind": "email", "action": "mask"}]}"#))
        #expect(gate.judge(event(properties: properties)).violations.map(\.rule) == ["redact", "required"])
    }
}
