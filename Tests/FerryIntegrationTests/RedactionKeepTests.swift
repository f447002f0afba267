import FerryIntegrationKit
import FerryProtocol
import FerryTestKit
import Foundation
import Testing

/// A `keep` rule through the real `ferryd` (docs/QUALITY.md, "Actions"): an event sent over
/// ZeroMQ with the e-mail and card detectors on reaches the file sink with its kept fields byte
/// for byte, while a sibling holding the same address is masked; `ferryd validate` lists the rule.
@Suite("Redaction: keep through ferryd")
struct RedactionKeepTests {
    static let configuration = #"""
        {"redact": {"rules": [{"path": "properties.orderNumber", "action": "keep"}, {"path": "properties.shipping", "action": "keep"}],
                    "detect": [{"kind": "email", "action": "mask"}, {"kind": "card", "action": "mask"}]}}
        """#

    @Test("a kept field and a kept object reach the file sink untouched; a sibling is still masked")
    func keptFieldsDelivered() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let arguments = try AgentProcess.configurationArguments(Self.configuration, in: dir)
        let validated = try await runProcess(try FerryBinaries.ferryd(), ["validate"] + arguments)
        #expect(validated.status == .exited(0), "\(validated)")
        for line in ["redact:   properties.orderNumber: keep", "redact:   properties.shipping: keep", "redact:   detect card: mask"] {
            #expect(validated.stdout.contains(line), "missing \(line): \(validated.stdout)")
        }

        let agent = try AgentProcess(in: dir, extraArguments: arguments)
        defer { agent.cleanup() }
        _ = try await agent.waitUntilReady()
        // The order number passes Luhn and starts with 4 (a card to the detector); the kept object
        // holds an address and a card inside text, with the spacing it was sent with.
        let kept = #""orderNumber":"4111111111111111","shipping":{"email": "jane@example.com", "note": "paid with 5555 5555 5555 4444"}"#
        let properties = "{" + kept + #","contact":"jane@example.com"}"#
        let frame = WireEvent(id: EventIDGenerator().next(), timestamp: WallClock.unixMilliseconds(), sequence: 1, pid: 1, type: .track,
                              source: "keep-test", name: "Order Completed", properties: Array(properties.utf8)).encoded()
        let replies = try await RawIngestClient.exchange(runtimeDirectory: agent.runtimeDirectory,
                                                         messages: [[MessageHeader(kind: .events, requestID: 1).encoded(), frame]],
                                                         timeout: .seconds(15))
        guard case .ack(_, let entries)? = replies.first else { throw FerryTestKitError("no ack: \(replies)") }
        #expect(entries.map(\.status) == [.accepted])
        try await eventually("the event delivered", timeout: .seconds(20)) { try agent.deliveredEvents().count == 1 }
        let line = try #require(try agent.deliveredEvents().first).line
        #expect(line.contains(#""properties":{"# + kept + #","contact":"j***@e***.com"}"#), "\(line)")
    }
}
