import FerryFileSink
@testable import FerryAgent
import FerryProtocol
import Testing

/// The per-sink decision (`requiresConsent` and `route`) as a pure function, and the
/// configuration keys that make it (docs/DELIVERY.md, "Routes and consent per sink").
@Suite("Sink policy: consent per sink and routes")
struct SinkPolicyTests {
    typealias Route = AgentConfiguration.SinkConfiguration.Route
    typealias Match = AgentConfiguration.SinkConfiguration.Match

    static let categories: Set<String> = ["analytics", "advertising", "personalization", "diagnostics", "push"]

    static func event(_ type: EventType = .track, name: String = "Order Completed", category: String? = "analytics",
                      source: String = "shop") -> SinkPolicyEvent {
        SinkPolicyEvent(type: type, name: name, category: category, source: source)
    }

    static func consent(_ advertising: ConsentStatus, policy: ConsentConfiguration.Undetermined.Policy = .hold,
                        enabled: Bool = true) -> SinkPolicyConsent {
        SinkPolicyConsent(consent: ["analytics": .granted, "advertising": advertising], defaultStatus: .granted,
                          enabledFeatures: enabled ? categories : categories.subtracting(["advertising"]), undetermined: policy)
    }

    // MARK: Consent per sink

    /// Every combination of the host's status of the one required category, the undetermined
    /// policy, the feature switch and the event's own preference.
    static let truthTable: [(ConsentStatus, ConsentConfiguration.Undetermined.Policy, Bool, Bool?, SinkAdmission)] = {
        var rows: [(ConsentStatus, ConsentConfiguration.Undetermined.Policy, Bool, Bool?, SinkAdmission)] = []
        for status in ConsentStatus.allCases {
            for policy in ConsentConfiguration.Undetermined.Policy.allCases {
                for enabled in [true, false] {
                    for preference in [nil, true, false] as [Bool?] {
                        let expected: SinkAdmission
                        if !enabled {
                            expected = .skip(.featureDisabled)
                        } else if status == .denied {
                            expected = .skip(.consentDenied)
                        } else if status == .undetermined && policy == .drop {
                            expected = .skip(.consentUndetermined)
                        } else if preference == false {
                            expected = .skip(.categoryPreferences)
                        } else if status == .undetermined {
                            expected = .wait
                        } else {
                            expected = .deliver
                        }
                        rows.append((status, policy, enabled, preference, expected))
                    }
                }
            }
        }
        return rows
    }()

    @Test("requiresConsent: every status, policy, feature switch and per-event preference", arguments: truthTable)
    func requirement(status: ConsentStatus, policy: ConsentConfiguration.Undetermined.Policy, enabled: Bool,
                     preference: Bool?, expected: SinkAdmission) throws {
        let sink = try #require(SinkPolicy(requiresConsent: ["advertising"], route: nil))
        let state = Self.consent(status, policy: policy, enabled: enabled)
        let decision = sink.admit(Self.event(), consent: state) { $0 == "advertising" ? preference : nil }
        #expect(decision == expected)
        // The loop pauses before reading exactly when every event would wait.
        #expect(sink.waits(state) == (enabled && status == .undetermined && policy == .hold))
        // The agent's own consent events go whatever the requirement.
        #expect(sink.admit(Self.event(category: ConsentCategories.consentName), consent: state) { _ in false } == .deliver)
    }

    @Test("several required categories: every one must be granted; a refusal wins over a wait")
    func severalCategories() throws {
        let sink = try #require(SinkPolicy(requiresConsent: ["analytics", "advertising"], route: nil))
        var state = Self.consent(.granted)
        #expect(sink.admit(Self.event(), consent: state) == .deliver)
        state.consent["analytics"] = .undetermined
        #expect(sink.admit(Self.event(), consent: state) == .wait)
        state.consent["advertising"] = .denied
        #expect(sink.admit(Self.event(), consent: state) == .skip(.consentDenied))
        #expect(!sink.waits(state))
        // A category missing from the state takes the default.
        state = SinkPolicyConsent(consent: [:], defaultStatus: .undetermined, enabledFeatures: Self.categories, undetermined: .drop)
        #expect(sink.admit(Self.event(), consent: state) == .skip(.consentUndetermined))
    }

    @Test("a sink that names nothing has no policy: today's behaviour, no per-sink work")
    func namesNothing() {
        #expect(SinkPolicy(requiresConsent: [], route: nil) == nil)
        #expect(AgentConfiguration.SinkConfiguration(name: "a", settings: .file(directory: nil, maxFileBytes: 1)).policy == nil)
    }

    // MARK: Routes

    static let routeCases: [(Route, SinkPolicyEvent, Bool)] = [
        (Route(include: Match(types: ["track"])), event(), true),
        (Route(include: Match(types: ["track"])), event(.identify, name: ""), false),
        (Route(include: Match(names: ["Order *"])), event(), true),
        (Route(include: Match(names: ["Order *"])), event(name: "Cart Viewed"), false),
        (Route(include: Match(names: ["Order Completed"])), event(), true),
        (Route(include: Match(names: ["Order"])), event(), false),
        (Route(include: Match(names: ["*Completed", "Cart*"])), event(name: "Cart Viewed"), true),
        (Route(include: Match(categories: ["advertising"])), event(), false),
        (Route(include: Match(categories: ["advertising"])), event(category: "advertising"), true),
        (Route(include: Match(sources: ["shop"])), event(), true),
        (Route(include: Match(sources: ["shop"])), event(source: "cli"), false),
        // Every list given must match.
        (Route(include: Match(types: ["track"], sources: ["cli"])), event(), false),
        (Route(include: Match(types: ["track", "page"], names: ["Order*"], categories: ["analytics"], sources: ["shop"])), event(), true),
        // Exclude alone: everything but.
        (Route(exclude: Match(names: ["Order *"])), event(), false),
        (Route(exclude: Match(names: ["Order *"])), event(name: "Cart Viewed"), true),
        (Route(include: Match(types: ["track"]), exclude: Match(sources: ["cli"])), event(source: "cli"), false),
        (Route(include: Match(types: ["track"]), exclude: Match(sources: ["cli"])), event(), true),
    ]

    @Test("route: include (absent: everything) and not exclude; every list given must match", arguments: routeCases)
    func route(route: Route, event: SinkPolicyEvent, taken: Bool) throws {
        let sink = try #require(SinkPolicy(requiresConsent: [], route: route))
        #expect(sink.admit(event, consent: Self.consent(.denied)) == (taken ? .deliver : .skip(.route)))
        #expect(sink.routes(event) == taken)
        // Consent events go whatever the route.
        #expect(sink.routes(Self.event(.track, name: "consent_updated", category: ConsentCategories.consentName, source: "ferryd")))
    }

    @Test("a route's skip comes before the requirement: an event off the route never waits")
    func routeBeforeRequirement() throws {
        let sink = try #require(SinkPolicy(requiresConsent: ["advertising"], route: Route(include: Match(types: ["track"]))))
        #expect(sink.admit(Self.event(.identify, name: ""), consent: Self.consent(.undetermined)) == .skip(.route))
        #expect(sink.admit(Self.event(), consent: Self.consent(.undetermined)) == .wait)
        #expect(sink.admit(Self.event(), consent: Self.consent(.granted)) == .deliver)
    }

    @Test("glob: * is any run of characters, everything else exact", arguments: [
        ("*", "", true), ("*", "abc", true), ("a*", "abc", true), ("*c", "abc", true), ("a*c", "abc", true),
        ("a*c", "ac", true), ("a*b*c", "aXbYc", true), ("a*b*c", "aXcYb", false), ("abc", "abc", true), ("abc", "abcd", false),
        ("ab", "abc", false), ("*bc*", "xbcx", true), ("a**", "a", true), ("**a", "ba", true), ("a*a", "a", false),
        ("Order *", "Order ", true), ("Order *", "Order", false), ("é*", "été", true),
    ])
    func glob(pattern: String, name: String, matches: Bool) {
        #expect(SinkPolicy.glob(pattern, matches: name) == matches)
    }

    @Test("categoryPreferences: the booleans of context.consent.categoryPreferences, nothing else")
    func preferences() {
        func read(_ json: String) -> [String: Bool] { SinkPolicy.categoryPreferences(context: Array(json.utf8)) }
        #expect(read(#"{"consent":{"categoryPreferences":{"advertising":false,"analytics":true,"x":"no"}}}"#)
            == ["advertising": false, "analytics": true])
        #expect(read(#"{"consent":{"categoryPreferences":{"adv\u0065rtising":false}}}"#) == ["advertising": false])
        #expect(read(#"{"consent":{}}"#) == [:])
        #expect(read(#"{"consent":{"categoryPreferences":[false]}}"#) == [:])
        #expect(read("") == [:])
        #expect(read("not json") == [:])
    }

    @Test("an event's facts as read from its frame: type, name, source, context")
    func eventFacts() throws {
        let frame = WireEvent(id: EventIDGenerator().next(), timestamp: 1, sequence: 0, pid: 1, type: .track,
                              source: "shop", name: "Order Completed", userID: "u-1",
                              context: Array(#"{"consent":{"categoryPreferences":{"advertising":false}}}"#.utf8)).encoded()
        let header = try EventHeader(frame)
        let facts = SinkPolicyEvent(header, frame: frame, category: "analytics")
        #expect(Array(facts.name) == Array("Order Completed".utf8) && Array(facts.source) == Array("shop".utf8) && facts.type == .track)
        #expect(SinkPolicyEvent.mayHavePreferences(header, frame: frame))
        let plain = WireEvent(id: EventIDGenerator().next(), timestamp: 1, sequence: 0, pid: 1, type: .track, source: "shop",
                              name: "categoryPreference", context: Array(#"{"consent":{}}"#.utf8)).encoded()
        #expect(!SinkPolicyEvent.mayHavePreferences(try EventHeader(plain), frame: plain), "no categoryPreferences member: no parse")
        #expect(SinkPolicy.categoryPreferences(context: SinkPolicyEvent.context(header, frame: frame)) == ["advertising": false])
    }

    // MARK: Configuration

    @Test("requiresConsent and route are read from each sink's object")
    func configurationKeys() throws {
        let config = try ConfigurationTests.load("""
        {"sinks": [
          {"name": "archive", "type": "file", "directory": "/tmp/fa-archive"},
          {"name": "ads", "type": "file", "directory": "/tmp/fa-ads", "requiresConsent": ["advertising"],
           "route": {"include": {"types": ["track"], "names": ["Order *"]}, "exclude": {"sources": ["cli"]}}}
        ]}
        """)
        #expect(config.sinks[0].requiresConsent.isEmpty && config.sinks[0].route == nil && config.sinks[0].policy == nil)
        #expect(config.sinks[1].requiresConsent == ["advertising"])
        #expect(config.sinks[1].route == Route(include: Match(types: ["track"], names: ["Order *"]), exclude: Match(sources: ["cli"])))
        #expect(config.sinks[1].policy != nil)
    }

    @Test("bad requirements and routes are refused, naming the sink and the key", arguments: [
        (#""requiresConsent": ["adverts"]"#, #"requiresConsent: unknown category "adverts"; valid: advertising, analytics"#),
        (#""requiresConsent": ["consent"]"#, #"requiresConsent: unknown category "consent""#),
        (#""requiresConsent": ["advertising", "advertising"]"#, #"requiresConsent: "advertising" is listed twice"#),
        (#""route": {}"#, "route: empty"),
        (#""route": {"include": {}}"#, "route.include: empty"),
        (#""route": {"include": {"types": []}}"#, "route.include.types: an empty list matches nothing"),
        (#""route": {"include": {"types": ["trak"]}}"#, #"route.include.types: unknown type "trak""#),
        (#""route": {"exclude": {"categories": ["adverts"]}}"#, #"route.exclude.categories: unknown category "adverts""#),
        (#""route": {"include": {"names": [""]}}"#, "route.include.names: an entry must not be empty"),
        (#""route": {"include": {"types": ["track"]}, "exclude": {"types": ["track", "page"]}}"#, "route: matches no event"),
        (#""route": {"exclude": {"names": ["*"]}}"#, "route: matches no event"),
        (#""route": {"include": {"names": ["Order *"]}, "exclude": {"names": ["Order *"]}}"#, "route: matches no event"),
        (#""route": {"include": {"names": ["Order Completed"]}, "exclude": {"names": ["Order*"]}}"#, "route: matches no event"),
        (#""route": {"include": {"sources": ["shop"]}, "exclude": {"sources": ["shop"], "types": ["track", "identify", "screen", "page", "group", "alias"]}}"#,
         "route: matches no event"),
        (#""route": {"exclude": {"categories": ["advertising", "analytics", "diagnostics", "personalization", "push"]}}"#, "route: matches no event"),
    ])
    func refused(fields: String, problem: String) throws {
        let error = try ConfigurationTests.error(#"{"sinks": [{"name": "ads", "type": "file", "directory": "/tmp/fa-ads", \#(fields)}]}"#)
        #expect(error.code == .configuration)
        #expect(error.message.contains(#"sinks[0]: sink "ads": "# + problem), "message: \(error.message)")
    }

    @Test("routes that leave something in are accepted", arguments: [
        #"{"include": {"types": ["track"]}, "exclude": {"types": ["page"]}}"#,
        #"{"include": {"names": ["Order*"]}, "exclude": {"names": ["Order Completed"]}}"#,
        #"{"exclude": {"names": ["Order*"]}}"#,
        #"{"exclude": {"categories": ["advertising"]}}"#,
        #"{"include": {"sources": ["shop"]}, "exclude": {"sources": ["shop"], "types": ["track"]}}"#,
    ])
    func accepted(route: String) throws {
        let config = try ConfigurationTests.load(#"{"sinks": [{"name": "ads", "type": "file", "directory": "/tmp/fa-ads", "route": \#(route)}]}"#)
        #expect(config.sinks[0].route != nil)
    }

    @Test("wrong shapes are refused by the reader, naming the key path", arguments: [
        (#""requiresConsent": "advertising""#, "sinks[0].requiresConsent", "expected an array of strings"),
        (#""route": {"include": {"type": ["track"]}}"#, "sinks[0].route.include.type", "unknown key; valid keys here: categories, names, sources, types"),
        (#""route": {"only": {}}"#, "sinks[0].route.only", "unknown key"),
        (#""route": []"#, "sinks[0].route", "expected an object"),
    ])
    func badShapes(fields: String, place: String, problem: String) throws {
        let error = try ConfigurationTests.error(#"{"sinks": [{"name": "ads", "type": "file", "directory": "/tmp/fa-ads", \#(fields)}]}"#)
        #expect(error.message.contains(place + ": " + problem), "message: \(error.message)")
    }

    @Test("requiresConsent and route reload without a restart")
    func reload() {
        let old = ReloadPlanTests.base()
        var new = old
        new.sinks[1].requiresConsent = ["advertising"]
        new.sinks[1].route = Route(include: Match(types: ["track"]))
        let plan = ReloadPlan(from: old, to: new)
        #expect(plan.restartOnly.isEmpty)
        #expect(plan.changed == ["sinks[1].requiresConsent", "sinks[1].route"])
        #expect(plan.sinks[1].requiresConsent == ["advertising"] && plan.sinks[1].route == new.sinks[1].route)
        #expect(ReloadPlan.reloadableKeys.contains("sinks[].requiresConsent") && ReloadPlan.reloadableKeys.contains("sinks[].route"))
    }
}
