@testable import FerryAgent
import FerryProtocol
import FerryStorage
import Testing

/// The one decision behind `ferry recipients` and `ferry forget`'s choice of sinks
/// (``ErasureTargets``): every verdict, and that `forget` sends exactly to the sinks it says may
/// have received the user's events.
@Suite("Recipients: who received a user's events, the rule forget sends erasures by")
struct RecipientsTests {
    typealias Route = AgentConfiguration.SinkConfiguration.Route
    typealias Match = AgentConfiguration.SinkConfiguration.Match

    static func at(_ offset: Int64, segment: UInt64 = 1) -> LogPosition { LogPosition(segment: segment, offset: offset) }
    static let tracks = Route(include: Match(types: ["track"]))

    static func event(_ offset: Int64, type: EventType = .track, name: String = "Order Completed", category: String = "analytics",
                      acceptedAt: UInt64 = 1000, preferences: [String: Bool] = [:]) -> ErasureTargets.UserEvent {
        ErasureTargets.UserEvent(position: at(offset), acceptedAt: acceptedAt,
                                 facts: SinkPolicyEvent(type: type, name: name, category: category, source: "app"), preferences: preferences)
    }

    static func sink(cursor: Int64, requires: [String] = [], route: Route? = nil, from: Int64? = 16) -> ErasureTargets.Sink {
        ErasureTargets.Sink(name: "s", cursor: at(cursor), batchMaxBytes: 1000,
                            policy: SinkPolicy(requiresConsent: requires, route: route), policyFrom: from.map { at($0) })
    }

    static let known = ErasureTargets.Knowledge(firstSegment: 1)

    @Test("delivered: the user's events before the cursor, with when the first and last were accepted")
    func delivered() {
        let verdict = ErasureTargets.verdict(Self.sink(cursor: 50_000), events: [Self.event(100, acceptedAt: 5), Self.event(200, acceptedAt: 9)],
                                             knowing: Self.known)
        #expect(verdict == .delivered(first: 5, last: 9, events: 2))
        #expect(verdict.receivesErasure)
        #expect(verdict.status(sink: "s") == RecipientStatus(sink: "s", verdict: .delivered, events: 2, firstAt: 5, lastAt: 9))
    }

    @Test("may have delivered: within a batch after the cursor (on the wire), or the log no longer tells")
    func mayHave() {
        let wire = ErasureTargets.verdict(Self.sink(cursor: 100), events: [Self.event(300)], knowing: Self.known)
        #expect(wire == .onTheWire && wire.receivesErasure)
        // Segments gone: a route that excludes every event still on disk proves nothing of the lost ones.
        var sink = Self.sink(cursor: 100, route: Self.tracks)
        sink.cursor = Self.at(100, segment: 3)
        let lost = ErasureTargets.verdict(sink, events: [Self.event(50, type: .identify, name: "")], knowing: ErasureTargets.Knowledge(firstSegment: 2))
        #expect(lost == .historyUnknown && lost.receivesErasure)
        let erased = ErasureTargets.verdict(Self.sink(cursor: 5000, route: Self.tracks), events: [Self.event(300, type: .identify)],
                                            knowing: ErasureTargets.Knowledge(firstSegment: 1, firstErased: Self.at(200)))
        #expect(erased == .historyUnknown && erased.receivesErasure)
        #expect(erased.status(sink: "s").verdict == .mayHaveDelivered && erased.status(sink: "s").reason == "history_unknown")
    }

    @Test("not yet: waiting after the cursor beyond a batch, or before delivery started; forget erases them here")
    func notYet() {
        let far = ErasureTargets.verdict(Self.sink(cursor: 100), events: [Self.event(900_000)], knowing: Self.known)
        #expect(far == .notYet(events: 1) && !far.receivesErasure)
        // Refused by the route so far, but not reached: a reload may change the route before it is.
        let waiting = ErasureTargets.verdict(Self.sink(cursor: 100, route: Self.tracks), events: [Self.event(300, type: .identify, name: "")],
                                             knowing: Self.known)
        #expect(waiting == .notYet(events: 1) && !waiting.receivesErasure)
        let unstarted = ErasureTargets.verdict(Self.sink(cursor: 100), events: [Self.event(300)],
                                               knowing: ErasureTargets.Knowledge(firstSegment: 1, deliveryStarted: false))
        #expect(unstarted == .notYet(events: 1))
    }

    @Test("never: no event of the user stored, and none lost")
    func noEvents() {
        #expect(ErasureTargets.verdict(Self.sink(cursor: 5000), events: [], knowing: Self.known) == .never([.noEvents]))
    }

    @Test("never: the route excludes every event of the user written since the policy took effect")
    func route() {
        let sink = Self.sink(cursor: 50_000, route: Self.tracks)
        let verdict = ErasureTargets.verdict(sink, events: [Self.event(100, type: .identify, name: "")], knowing: Self.known)
        #expect(verdict == .never([.route]) && !verdict.receivesErasure)
        #expect(verdict.status(sink: "s") == RecipientStatus(sink: "s", verdict: .never, reason: "route"))
        // One event on the route is enough to be delivered.
        #expect(ErasureTargets.verdict(sink, events: [Self.event(100, type: .identify, name: ""), Self.event(200, acceptedAt: 7)],
                                       knowing: Self.known) == .delivered(first: 7, last: 7, events: 1))
    }

    @Test("an event written before the policy took effect (earlier run, a reload since) is judged as today: it may have been sent")
    func policyChangedSince() {
        let sink = Self.sink(cursor: 50_000, route: Self.tracks, from: 500)
        #expect(ErasureTargets.verdict(sink, events: [Self.event(100, type: .identify, name: "", acceptedAt: 3)], knowing: Self.known)
            == .delivered(first: 3, last: 3, events: 1))
        // No start known at all: nothing proven.
        #expect(ErasureTargets.verdict(Self.sink(cursor: 50_000, route: Self.tracks, from: nil),
                                       events: [Self.event(100, type: .identify, name: "", acceptedAt: 3)], knowing: Self.known)
            == .delivered(first: 3, last: 3, events: 1))
    }

    @Test("never: a required category not granted since before the user's events were written")
    func consent() {
        let sink = Self.sink(cursor: 50_000, requires: ["advertising"])
        let refused = ErasureTargets.Knowledge(firstSegment: 1, notGranted: ["advertising": .init(position: Self.at(16), at: 77)])
        let verdict = ErasureTargets.verdict(sink, events: [Self.event(100), Self.event(200)], knowing: refused)
        #expect(verdict == .never([.consent("advertising", since: 77)]))
        #expect(verdict.status(sink: "s") == RecipientStatus(sink: "s", verdict: .never, reason: "consent advertising", since: 77))
        // Revoked after the first event was written: that one may have gone.
        let later = ErasureTargets.Knowledge(firstSegment: 1, notGranted: ["advertising": .init(position: Self.at(150), at: 88)])
        #expect(ErasureTargets.verdict(sink, events: [Self.event(100, acceptedAt: 4), Self.event(200)], knowing: later)
            == .delivered(first: 4, last: 4, events: 1))
        // Granted now (no mark): delivered.
        #expect(ErasureTargets.verdict(sink, events: [Self.event(100, acceptedAt: 4)], knowing: Self.known) == .delivered(first: 4, last: 4, events: 1))
    }

    @Test("never: the event's own categoryPreferences refuse a required category; the reasons found are all given")
    func preferences() {
        let sink = Self.sink(cursor: 50_000, requires: ["advertising"], route: Self.tracks)
        let verdict = ErasureTargets.verdict(sink, events: [Self.event(100, preferences: ["advertising": false]),
                                                            Self.event(200, type: .identify, name: "")], knowing: Self.known)
        #expect(verdict == .never([.categoryPreferences("advertising"), .route]))
        #expect(verdict.status(sink: "s").reason == "category_preferences advertising; route")
    }

    @Test("consent_updated goes to every sink: it is never proof of anything")
    func consentUpdated() {
        let sink = Self.sink(cursor: 50_000, requires: ["advertising"], route: Self.tracks)
        let refused = ErasureTargets.Knowledge(firstSegment: 1, notGranted: ["advertising": .init(position: Self.at(16), at: 1)])
        #expect(ErasureTargets.verdict(sink, events: [Self.event(100, name: "consent_updated", category: ConsentCategories.consentName, acceptedAt: 2)],
                                       knowing: refused) == .delivered(first: 2, last: 2, events: 1))
    }

    @Test("forget sends the erasure to exactly the sinks that delivered or may have; a sink without policy as before")
    func forgetTargets() {
        let events = [Self.event(100, type: .identify, name: ""), Self.event(200, preferences: ["advertising": false])]
        let sinks = [
            ErasureTargets.Sink(name: "archive", cursor: Self.at(50_000), batchMaxBytes: 1000),
            ErasureTargets.Sink(name: "analytics", cursor: Self.at(50_000), batchMaxBytes: 1000,
                                policy: SinkPolicy(requiresConsent: ["analytics"], route: nil), policyFrom: Self.at(16)),
            ErasureTargets.Sink(name: "ads", cursor: Self.at(50_000), batchMaxBytes: 1000,
                                policy: SinkPolicy(requiresConsent: ["advertising"], route: Self.tracks), policyFrom: Self.at(16)),
        ]
        #expect(ErasureTargets.sinks(sinks, events: events, knowing: Self.known) == ["archive", "analytics"])
    }

    @Test("RecipientHistory: a category keeps its first not-granted mark until granted; a policy keeps its start while unchanged")
    func history() {
        let history = RecipientHistory()
        func consent(_ status: ConsentStatus, enabled: Bool = true) -> SinkPolicyConsent {
            SinkPolicyConsent(consent: ["advertising": status], enabledFeatures: enabled ? ["advertising"] : [], undetermined: .hold)
        }
        history.noteConsent(consent(.undetermined), categories: ["advertising"], at: Self.at(16), now: 1)
        history.noteConsent(consent(.denied), categories: ["advertising"], at: Self.at(500), now: 2)
        #expect(history.notGranted["advertising"] == .init(position: Self.at(16), at: 1))
        history.noteConsent(consent(.granted), categories: ["advertising"], at: Self.at(600), now: 3)
        #expect(history.notGranted["advertising"] == nil)
        history.noteConsent(consent(.granted, enabled: false), categories: ["advertising"], at: Self.at(700), now: 4)
        #expect(history.notGranted["advertising"] == .init(position: Self.at(700), at: 4))

        let policy = SinkPolicy(requiresConsent: ["advertising"], route: nil)
        history.record(sink: "ads", policy: policy, from: Self.at(16))
        history.record(sink: "ads", policy: policy, from: Self.at(900))
        #expect(history.policy(of: "ads")?.from == Self.at(16))
        history.record(sink: "ads", policy: SinkPolicy(requiresConsent: ["advertising"], route: Self.tracks), from: Self.at(900))
        #expect(history.policy(of: "ads")?.from == Self.at(900))
    }
}
