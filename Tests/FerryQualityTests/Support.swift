import FerryProtocol
@testable import FerryQuality

/// An event for the gate.
func event(_ type: EventType = .track, _ name: String = "Order Completed", properties: String = "", context: String = "",
           userID: String = "", anonymousID: String = "", groupID: String = "", previousID: String = "") -> WireEvent {
    WireEvent(id: EventID.zero, timestamp: 1_700_000_000_000, sequence: 1, pid: 1, type: type, source: "test", name: name,
              userID: userID, properties: Array(properties.utf8), anonymousID: anonymousID, groupID: groupID,
              previousID: previousID, context: Array(context.utf8))
}

/// A plan of one track event `Order Completed` whose properties have `schema`.
func plan(properties schema: String) throws -> TrackingPlan {
    try TrackingPlan(json: Array(#"{"events": [{"type": "track", "name": "Order Completed", "properties": \#(schema)}]}"#.utf8), source: "plan.json")
}

/// The violations of `properties` against a one-event plan with `schema`.
func violations(schema: String, properties: String) throws -> [Violation] {
    QualityGate(plan: try plan(properties: schema), allowUnplanned: true, redactor: nil).judge(event(properties: properties)).violations
}
