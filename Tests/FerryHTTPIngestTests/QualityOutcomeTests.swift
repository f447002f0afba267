import FerryProtocol
import Testing

@testable import FerryHTTPIngest

/// What the HTTP API answers for the tracking plan's actions (issue 31).
@Suite struct QualityOutcomeTests {
    @Test("a quarantined event's result is quarantined; a blocked one is refused with code plan_violation")
    func outcomes() throws {
        let id = EventID(high: 1, low: 2)
        #expect(EventOutcome(AckEntry(id: id, status: .accepted, reason: .quarantined)) == .quarantined)
        #expect(EventOutcome(AckEntry(id: id, status: .accepted, reason: .quarantined)).label == "quarantined")
        guard case .refused(let code, _) = EventOutcome(AckEntry(id: id, status: .rejected, reason: .planViolation)) else {
            Issue.record("a plan violation is not refused")
            return
        }
        #expect(code == "plan_violation")
        let response = IngestVerdict.response([("a", .accepted(held: false)), ("b", .quarantined),
                                               ("c", EventOutcome(AckEntry(id: id, status: .rejected, reason: .planViolation)))])
        #expect(response.status == 200)
        let body = String(decoding: response.body, as: UTF8.self)
        #expect(body.contains(#""quarantined":1"#), "\(body)")
        #expect(body.contains(#"{"messageId":"b","status":"quarantined"}"#), "\(body)")
        #expect(body.contains(#""messageId":"c","status":"refused","code":"plan_violation""#), "\(body)")
        // Every message blocked by the plan: nothing storable, a 400 naming the code.
        let all = IngestVerdict.response([("a", EventOutcome(AckEntry(id: id, status: .rejected, reason: .planViolation)))])
        #expect(all.status == 400 && all.code == "plan_violation")
    }
}
