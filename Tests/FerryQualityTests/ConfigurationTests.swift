import FerryQuality
import Testing

@Suite struct RedactionConfigurationTests {
    @Test func parsesRulesAndDetectors() throws {
        let json = #"{"keyFile": "/etc/ferry/redact.key", "rules": [{"path": "properties.email", "action": "hash"}, {"path": "userId", "action": "mask"}], "detect": [{"kind": "card", "action": "mask"}]}"#
        let configuration = try RedactionConfiguration(json: Array(json.utf8))
        #expect(configuration.keyFile == "/etc/ferry/redact.key")
        #expect(configuration.rules == [RedactionRule(path: "properties.email", action: .hash), RedactionRule(path: "userId", action: .mask)])
        #expect(configuration.detectors == [DetectorRule(kind: .card, action: .mask)])
    }

    @Test func keepIsARuleAction() throws {
        let json = #"{"rules": [{"path": "properties.orderNumber", "action": "keep"}, {"path": "userId", "action": "keep"}]}"#
        let configuration = try RedactionConfiguration(json: Array(json.utf8))
        #expect(configuration.rules == [RedactionRule(path: "properties.orderNumber", action: .keep), RedactionRule(path: "userId", action: .keep)])
        #expect(try Redactor(configuration: configuration, key: []).summary == ["properties.orderNumber: keep", "userId: keep"])
    }

    static let detectorKeeps = #"redact: detect[1].action: keep is for path rules only (a detector finds values to redact: drop, mask or hash); name a field to keep with a rule {"path": …, "action": "keep"}"#

    /// What `body` is refused with; nil when it is not.
    static func refusal(_ body: () throws -> Void) -> String? {
        do { try body(); return nil } catch { return String(describing: error) }
    }

    /// A detector that keeps is refused with its path, from the table and from a configuration
    /// built in code alike; an unknown action names the actions of its place.
    @Test func aDetectorCannotKeep() {
        #expect(Self.refusal {
            _ = try RedactionConfiguration(json: Array(#"{"detect": [{"kind": "ip", "action": "mask"}, {"kind": "email", "action": "keep"}]}"#.utf8))
        } == Self.detectorKeeps)
        #expect(Self.refusal {
            _ = try Redactor(configuration: RedactionConfiguration(detectors: [DetectorRule(kind: .ip, action: .mask), DetectorRule(kind: .email, action: .keep)]), key: [])
        } == Self.detectorKeeps)
        #expect(Self.refusal {
            _ = try RedactionConfiguration(json: Array(#"{"rules": [{"path": "userId", "action": "encrypt"}]}"#.utf8))
        } == "redact: rules[0].action: must be one of drop, mask, hash, keep")
        #expect(Self.refusal {
            _ = try RedactionConfiguration(json: Array(#"{"detect": [{"kind": "ip", "action": "encrypt"}]}"#.utf8))
        } == "redact: detect[0].action: must be one of drop, mask, hash")
    }

    @Test(arguments: [
        (#"{"rules": [{"path": "email", "action": "hash"}]}"#, "rules[0].path"),
        (#"{"rules": [{"path": "properties.email", "action": "encrypt"}]}"#, "rules[0].action"),
        (#"{"rules": [{"path": "userId.x", "action": "drop"}]}"#, "rules[0].path"),
        (#"{"rules": [{"path": "properties", "action": "drop"}]}"#, "rules[0].path"),
        (#"{"rules": [{"path": "properties..a", "action": "drop"}]}"#, "rules[0].path"),
        (#"{"detect": [{"kind": "ssn", "action": "mask"}]}"#, "detect[0].kind"),
        (#"{"detect": [{"kind": "ip", "action": "mask"}, {"kind": "ip", "action": "drop"}]}"#, "detect[1].kind"),
        (#"{"detect": [{"kind": "ip"}]}"#, "detect[0].action"),
        (#"{"rulez": []}"#, "rulez"),
        (#"{"keyFile": 3}"#, "keyFile"),
        (#"["#, "$"),
    ])
    func refusesWithThePath(json: String, path: String) {
        #expect {
            _ = try RedactionConfiguration(json: Array(json.utf8))
        } throws: { error in
            (error as? QualityError)?.description.contains("redact: \(path):") == true
        }
    }
}
