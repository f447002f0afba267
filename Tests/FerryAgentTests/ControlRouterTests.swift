@testable import FerryAgent
import FerryProtocol
import Testing

/// Which right each control op needs: a pure decision, tested without sockets.
@Suite("ControlRouter: the right each control op needs")
struct ControlRouterTests {
    /// An op, the right it needs from a caller who may send events, and from one who may not.
    struct Case: Sendable {
        var operation: ControlRequest.Operation
        var ingesting: AccessControl.Scope?
        var other: AccessControl.Scope?
        init(_ operation: ControlRequest.Operation, _ ingesting: AccessControl.Scope?, _ other: AccessControl.Scope?) {
            (self.operation, self.ingesting, self.other) = (operation, ingesting, other)
        }
    }

    static let cases: [Case] = [
        Case(.whoami, nil, nil),
        Case(.status, nil, .control),
        Case(.metrics, nil, .control),
        Case(.consentState, nil, .control),
        Case(.consentLog(limit: 3), .control, .control),
        Case(.setTracking(enabled: true), .control, .control),
        Case(.purge(category: nil), .control, .control),
        Case(.forget(userID: "u"), .control, .control),
        Case(.start, .control, .control),
        Case(.deadLetterReplay(id: "x", sink: nil), .control, .control),
    ]

    @Test("reading ops are open to whoever may send events; changes and the audit log need control", arguments: cases)
    func scopes(_ entry: Case) {
        #expect(ControlRouter.requiredScope(for: entry.operation, mayIngest: true) == entry.ingesting)
        #expect(ControlRouter.requiredScope(for: entry.operation, mayIngest: false) == entry.other)
    }
}
