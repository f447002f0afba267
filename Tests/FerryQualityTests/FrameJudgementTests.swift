import FerryProtocol
import Testing
@testable import FerryQuality

/// The ingest stage's shortcut (``QualityGate/passesUntouched(frame:header:)``, judged from the
/// frame's bytes in place) says "passes" exactly when ``QualityGate/judge(_:)`` passes the event
/// untouched, for a plan with all five detectors on.
@Suite struct FrameJudgementTests {
    static let gate: QualityGate = {
        let plan = try! TrackingPlan(json: Array(#"""
            {"events": [{"type": "track", "name": "Order Completed", "properties": {"required": ["total"], "properties": {"total": {"type": "number"}}},
                         "context": {"properties": {"app": {"type": "object"}}}},
                        {"type": "identify", "traits": {"properties": {"plan": {"enum": ["free", "pro"]}}}}]}
            """#.utf8), source: "plan.json")
        let redactor = try! Redactor(configuration: try! RedactionConfiguration(json: Array(#"""
            {"rules": [{"path": "properties.secret", "action": "drop"}],
             "detect": [{"kind": "email", "action": "hash"}, {"kind": "phone", "action": "mask"}, {"kind": "ip", "action": "mask"},
                        {"kind": "card", "action": "mask"}, {"kind": "iban", "action": "hash"}]}
            """#.utf8)), key: [UInt8](repeating: 7, count: 32))
        return QualityGate(plan: plan, allowUnplanned: false, redactor: redactor)
    }()

    @Test(arguments: [
        (event(properties: #"{"total": 5, "note": "fine"}"#), true),
        (event(properties: #"{"total": 5}"#, context: #"{"app": {"v": "1.2.3"}, "os": "linux"}"#, userID: "u-42", anonymousID: "a-1"), true),
        (event(.identify, "", properties: #"{"plan": "pro"}"#), true),
        (event(properties: #"{"total": "5"}"#), false),                                   // type
        (event(properties: #"{"note": "x"}"#), false),                                    // required
        (event(properties: #"{"total": 5}"#, context: #"{"app": 1}"#), false),            // context schema
        (event(.track, "Unplanned", properties: #"{"total": 5}"#), false),                // unplanned
        (event(properties: #"{"total": 5, "secret": "s"}"#), false),                      // a path rule
        (event(properties: #"{"total": 5, "to": "jane@example.com"}"#), false),           // email
        (event(properties: #"{"total": 5, "card": "4111 1111 1111 1111"}"#), false),      // card
        (event(properties: #"{"total": 5}"#, context: #"{"ip": "198.51.100.7"}"#), false), // ip in the context
        (event(properties: #"{"total": 5}"#, userID: "+14155552671"), false),            // phone as the user id
        (event(properties: #"{"total": 5}"#, groupID: "DE89370400440532013000"), false),  // iban as the group id
        (event(properties: #"{"total": 5}"#, previousID: "jane@example.com"), false),
        (event(properties: #"[1]"#), false),                                              // not an object
    ])
    func shortcutAgreesWithTheGate(event: WireEvent, passes: Bool) throws {
        let judgement = Self.gate.judge(event)
        #expect((!judgement.redacted && judgement.violations.isEmpty) == passes)
        let frame = event.encoded()
        #expect(Self.gate.passesUntouched(frame: frame, header: try EventHeader(frame)) == passes)
    }
}
