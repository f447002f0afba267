import FerryIntegrationKit
import FerryTestKit
import Foundation
import Testing

/// `ferry recipients --user` and `ferry forget --user` on the worked example's three upstreams
/// (``ThreeUpstreams``), with the real `ferryd`: before and after the user's events, the verdicts
/// per sink; then a forget sends its erasure to the sinks that may have received the data only,
/// each upstream checked for what it was asked.
@Suite("Recipients: who received a user's events, and forget asks only them, end to end")
struct RecipientsIntegrationTests {
    @Test("recipients before and after events (delivered; never: route, consent denied; then granted, delivered); forget skips the sink that never took the user's events")
    func recipientsAndForget() async throws {
        try await ThreeUpstreams.with(run)
    }

    @Test("a reload that changes the partner's route since the user's events were written: nothing is proven, forget asks every sink")
    func reloadedPolicyProvesNothing() async throws {
        try await ThreeUpstreams.with(runReload)
    }

    func runReload(_ upstreams: ThreeUpstreams) async throws {
        let environment = upstreams.agent.environment
        try await upstreams.setConsent("analytics", "granted")
        try await upstreams.setConsent("advertising", "granted")
        try await upstreams.emit(#"{"type":"identify","userId":"u-9","properties":{"plan":"pro"}}"#)
        try await eventually("the partner passed the identify by (route)") {
            let ads = try await upstreams.status("ads")
            return (ads["skipped"] as? [String: Any])?["route"] as? Int == 1 && ads["backlog_events"] as? Int == 0
        }
        #expect(try await Self.verdicts(upstreams, "u-9") == ["archive": "delivered", "analytics": "delivered", "ads": "never route"])

        // The partner's route now takes pages too: the identify met another policy than today's.
        let path = upstreams.dir.appending("ferryd.json")
        let old = try String(contentsOfFile: path, encoding: .utf8)
        let new = old.replacingOccurrences(of: #""types": ["track"]"#, with: #""types": ["track", "page"]"#)
        #expect(new != old)
        try writeText(new, to: path)
        let reload = try await runCLI(["reload"], environment: environment)
        #expect(reload.status == .exited(0), "\(reload)")
        #expect(try await Self.verdicts(upstreams, "u-9") == ["archive": "delivered", "analytics": "delivered", "ads": "delivered"])

        let forgot = try await runCLI(["forget", "--user", "u-9"], environment: environment)
        #expect(forgot.status == .exited(0), "\(forgot)")
        try await eventually("u-9's erasures sent", timeout: .seconds(30)) {
            try await upstreams.erasureStates() == ["archive": "sent", "analytics": "sent", "ads": "sent"]
        }
    }

    /// The `recipients` reply's verdicts, by sink: `verdict` or `verdict reason`.
    static func verdicts(_ upstreams: ThreeUpstreams, _ user: String) async throws -> [String: String] {
        let result = try await runCLI(["recipients", "--user", user, "--json"], environment: upstreams.agent.environment)
        #expect(result.status == .exited(0), "\(result)")
        let reply = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any] ?? [:]
        return Dictionary(uniqueKeysWithValues: (reply["sinks"] as? [[String: Any]] ?? []).map { sink in
            (sink["sink"] as? String ?? "?", [sink["verdict"] as? String, sink["reason"] as? String].compactMap { $0 }.joined(separator: " "))
        })
    }

    func run(_ upstreams: ThreeUpstreams) async throws {
        let environment = upstreams.agent.environment
        // Before any event: nobody received anything of u-7.
        #expect(try await Self.verdicts(upstreams, "u-7") == ["archive": "never no_events", "analytics": "never no_events", "ads": "never no_events"])

        // Analytics granted, advertising denied (the partner passes the user's events by). u-7 is
        // only identified (off the partner's route), u-8 views a product (a track the partner
        // would take, but its purpose is refused).
        try await upstreams.setConsent("analytics", "granted")
        try await upstreams.setConsent("advertising", "denied")
        try await upstreams.emit(#"{"type":"identify","userId":"u-7","properties":{"plan":"pro"}}"#)
        try await upstreams.emit(#"{"name":"Product Viewed","userId":"u-8"}"#)
        try await eventually("the archive and the collector have both events") {
            try upstreams.archive().contains("Product Viewed") && upstreams.archive().contains("")
                && upstreams.segment().contains("Product Viewed") && upstreams.segment().contains("(identify)")
        }
        try await eventually("the partner passed both by") {
            let ads = try await upstreams.status("ads")
            return ads["skipped"] as? [String: Int] == ["route": 1, "consent_denied": 1] && ads["backlog_events"] as? Int == 0
        }
        #expect(try await Self.verdicts(upstreams, "u-7") == ["archive": "delivered", "analytics": "delivered", "ads": "never route"])
        #expect(try await Self.verdicts(upstreams, "u-8")
            == ["archive": "delivered", "analytics": "delivered", "ads": "never consent advertising"])
        let text = try await runCLI(["recipients", "--user", "u-7"], environment: environment)
        #expect(text.status == .exited(0), "\(text)")
        let lines = text.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 3, "\(text)")
        #expect(lines.first { $0.hasPrefix("archive ") }?.contains("delivered: 1 event, accepted ") == true, "\(text)")
        #expect(lines.first { $0.hasPrefix("archive ") }?.hasSuffix("(forget sends an erasure)") == true, "\(text)")
        #expect(lines.first { $0.hasPrefix("ads ") }?.hasSuffix("never: route excludes") == true, "\(text)")
        let u8 = try await runCLI(["recipients", "--user", "u-8"], environment: environment)
        #expect(u8.stdout.split(separator: "\n").first { $0.hasPrefix("ads ") }?.contains("never: requires consent advertising not granted since ") == true,
                "\(u8)")

        // Advertising granted: the partner takes u-8's next purchase, and says so.
        try await upstreams.setConsent("advertising", "granted")
        try await upstreams.emit(#"{"name":"Order Completed","userId":"u-8"}"#)
        try await eventually("the partner has the purchase") { upstreams.ads().contains("Order Completed") }
        try await eventually("the partner's cursor is past it") {
            try await Self.verdicts(upstreams, "u-8") == ["archive": "delivered", "analytics": "delivered", "ads": "delivered"]
        }
        #expect(!upstreams.ads().contains("Product Viewed"), "the view passed by while refused stays unsent")
        #expect(try await Self.verdicts(upstreams, "u-7")["ads"] == "never route", "the identify stays off the partner's route")

        // Forget u-7: the archive and the collector are asked, the partner (never had u-7) is not.
        let forgot = try await runCLI(["forget", "--user", "u-7"], environment: environment)
        #expect(forgot.status == .exited(0), "\(forgot)")
        try await eventually("u-7's erasures sent", timeout: .seconds(30)) {
            try await upstreams.erasureStates() == ["archive": "sent", "analytics": "sent"]
        }
        #expect(upstreams.api.requests().contains { ($0["body"] as? [String: Any])?["subjectIds"] as? [String] == ["u-7"] })
        #expect(!upstreams.partner.requests.contains { $0.json?["type"] as? String == "erasure" }, "no erasure reached the partner")
        // Its records are erased now (an erased record keeps its id, not its user): the log no
        // longer tells whose they were, so every sink that delivered anything may have had anyone's.
        let history = "may_have_delivered history_unknown"
        #expect(try await Self.verdicts(upstreams, "u-7") == ["archive": history, "analytics": history, "ads": history])

        // Forget u-8: every upstream received some of u-8's events, every one is asked.
        let forgot8 = try await runCLI(["forget", "--user", "u-8"], environment: environment)
        #expect(forgot8.status == .exited(0), "\(forgot8)")
        try await eventually("u-8's erasures sent", timeout: .seconds(30)) {
            try await upstreams.erasureStates() == ["archive": "sent", "analytics": "sent", "ads": "sent"]
        }
        #expect(upstreams.partner.requests.contains { $0.json?["type"] as? String == "erasure" && $0.json?["userId"] as? String == "u-8" })
    }
}
