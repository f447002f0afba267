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
