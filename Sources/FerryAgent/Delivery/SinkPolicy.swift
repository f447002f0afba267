#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol
import FerryStorage

extension AgentConfiguration.SinkConfiguration {
    /// A sink's `route`: an event goes to the sink when it matches ``include`` (absent: every
    /// event) and not ``exclude`` (docs/DELIVERY.md, "Routes and consent per sink").
    public struct Route: Sendable, Hashable {
        /// What the sink takes; `nil`: everything.
        public var include: Match?
        /// What the sink never takes, of what ``include`` lets in; `nil`: nothing.
        public var exclude: Match?
        /// The route on one line, as `ferryd validate` and `ferry status` print it:
        /// `include types=track names="Order *"; exclude sources=cli`.
        public var summary: String {
            [("include", include), ("exclude", exclude)].compactMap { side, match in
                match.map { side + " " + $0.summary }
            }.joined(separator: "; ")
        }
        /// A route.
        public init(include: Match? = nil, exclude: Match? = nil) {
            self.include = include
            self.exclude = exclude
        }
    }

    /// One side of a ``Route``. An event matches when every list given matches it (a list
    /// matches when one of its entries does); a list left out matches every event.
    public struct Match: Sendable, Hashable {
        /// Event types (`track`, `identify`, …).
        public var types: [String]?
        /// Event names, exact, with `*` standing for any run of characters (`Order *`).
        public var names: [String]?
        /// Consent category names (the event's own, or its type's default).
        public var categories: [String]?
        /// Event sources (the client's `source`), exact.
        public var sources: [String]?
        /// A match.
        public init(types: [String]? = nil, names: [String]? = nil, categories: [String]? = nil, sources: [String]? = nil) {
            self.types = types
            self.names = names
            self.categories = categories
            self.sources = sources
        }

        /// The lists given, `key=a,b` each (an entry with a space or a comma quoted).
        public var summary: String {
            let lists = [("types", types), ("names", names), ("categories", categories), ("sources", sources)]
            return lists.compactMap { key, list in
                list.map { key + "=" + $0.map { $0.contains(" ") || $0.contains(",") ? "\"\($0)\"" : $0 }.joined(separator: ",") }
            }.joined(separator: " ")
        }

        /// Whether nothing is given (`{}`).
        var isEmpty: Bool { types == nil && names == nil && categories == nil && sources == nil }
    }

    /// What the sink receives, for `ferryd validate`: its consent requirement and route, or that
    /// it takes what the host's consent lets out.
    public var routingSummary: String {
        let required = requiresConsent.isEmpty ? "none" : requiresConsent.joined(separator: ", ")
        return "receives: requiresConsent: \(required); route: \(route?.summary ?? "every event")"
    }

    /// What the send-time gate applies for this sink, or `nil` when the sink names neither a
    /// consent requirement nor a route (it takes what the host's consent lets out, as before).
    package var policy: SinkPolicy? { SinkPolicy(requiresConsent: requiresConsent, route: route) }

    /// The problems of `requiresConsent` and `route` against the configured consent
    /// `categories`, each message starting with `label` (`sinks[1]: sink "ads"`).
    func policyProblems(label: String, categories: Set<String>) -> [String] {
        var problems: [String] = []
        let valid = categories.sorted().joined(separator: ", ")
        var required: Set<String> = []
        for name in requiresConsent {
            if !categories.contains(name) {
                problems.append("\(label): requiresConsent: unknown category \"\(name)\"; valid: \(valid)")
            } else if !required.insert(name).inserted {
                problems.append("\(label): requiresConsent: \"\(name)\" is listed twice")
            }
        }
        guard let route else { return problems }
        if route.include == nil && route.exclude == nil {
            problems.append("\(label): route: empty; give \"include\" and/or \"exclude\" (or leave route out to take every event)")
            return problems
        }
        let types = EventType.allCases.map(\.description)
        for (side, match) in [("include", route.include), ("exclude", route.exclude)] {
            guard let match else { continue }
            if match.isEmpty {
                problems.append("\(label): route.\(side): empty; give types, names, categories and/or sources")
            }
            for (key, list, known) in [("types", match.types, types), ("categories", match.categories, categories.sorted()),
                                       ("names", match.names, nil), ("sources", match.sources, nil)] {
                guard let list else { continue }
                if list.isEmpty {
                    problems.append("\(label): route.\(side).\(key): an empty list matches nothing; leave the key out to match every event")
                }
                for entry in list {
                    if entry.isEmpty {
                        problems.append("\(label): route.\(side).\(key): an entry must not be empty")
                    } else if let known, !known.contains(entry) {
                        problems.append("\(label): route.\(side).\(key): unknown \(key == "types" ? "type" : "category") \"\(entry)\"; valid: \(known.joined(separator: ", "))")
                    }
                }
            }
        }
        if problems.isEmpty, SinkPolicy.Compiled(route, categories: categories).matchesNothing {
            problems.append("\(label): route: matches no event (route.exclude takes everything route.include lets in)")
        }
        return problems
    }
}

/// Why a sink passed an event by (the `reason` label of `ferry_sink_skipped_total`).
package enum SinkSkipReason: String, Sendable, CaseIterable, Hashable {
    /// The sink's `route` does not take the event.
    case route
    /// A category the sink requires is denied in the host's state.
    case consentDenied = "consent_denied"
    /// A category the sink requires is undetermined and `undetermined.policy` is `drop`.
    case consentUndetermined = "consent_undetermined"
    /// A category the sink requires is disabled as a feature.
    case featureDisabled = "feature_disabled"
    /// The event's own `context.consent.categoryPreferences` maps a required category to `false`.
    case categoryPreferences = "category_preferences"

    /// Whether the skip is a consent decision (published on the `blocked` topic), not a route's.
    package var isConsent: Bool { self != .route }
}

/// What a sink's policy decided for one event.
package enum SinkAdmission: Sendable, Hashable {
    /// Send it.
    case deliver
    /// Pass it by for good (the cursor moves over it; not a dead letter, not retried).
    case skip(SinkSkipReason)
    /// Not yet: a required category is undetermined under the `hold` policy. The sink pauses.
    case wait
}

/// The facts of an event a sink's policy reads. The name and source are the frame's own bytes
/// (no copy, no string made per event).
package struct SinkPolicyEvent: Sendable {
    /// The event's type.
    package var type: EventType
    /// The event's name, UTF-8 (empty for a type without one).
    package var name: ArraySlice<UInt8>
    /// The event's consent category name, `nil` when unknown.
    package var category: String?
    /// The event's source, UTF-8.
    package var source: ArraySlice<UInt8>
    /// A policy event.
    package init(type: EventType, name: String, category: String?, source: String) {
        self.type = type
        self.name = ArraySlice(name.utf8)
        self.category = category
        self.source = ArraySlice(source.utf8)
    }
}

extension SinkPolicyEvent {
    /// The facts of the event `header` was read from (`frame`), of consent category `category`.
    package init(_ header: EventHeader, frame: [UInt8], category: String?) {
        let sourceStart = WireEvent.fixedHeaderSize, nameStart = sourceStart + header.sourceLength
        let nameEnd = min(nameStart + header.nameLength, frame.count)
        type = header.type
        self.category = category
        source = frame[min(sourceStart, frame.count)..<min(nameStart, frame.count)]
        name = frame[min(nameStart, nameEnd)..<nameEnd]
    }

    /// Whether the event's extensions (its context) may hold a `categoryPreferences` member:
    /// the bytes are searched (`memmem`) before the context is parsed, so an event without one
    /// costs a scan, not a parse.
    package static func mayHavePreferences(_ header: EventHeader, frame: [UInt8]) -> Bool {
        guard header.flags.contains(.extended), header.extensionsOffset < frame.count else { return false }
        // `memchr` for its one capital (`P`, 8 bytes in), then `memcmp` of the whole word there.
        let needle: StaticString = "categoryPreferences", capital = 8
        return frame.withUnsafeBytes { bytes in
            let base = bytes.baseAddress!, end = bytes.count
            var from = header.extensionsOffset + capital
            while from < end, let found = memchr(base + from, Int32(UInt8(ascii: "P")), end - from) {
                let at = base.distance(to: UnsafeRawPointer(found))
                if at + needle.utf8CodeUnitCount - capital <= end,
                   memcmp(base + at - capital, needle.utf8Start, needle.utf8CodeUnitCount) == 0 { return true }
                from = at + 1
            }
            return false
        }
    }

    /// The context JSON of the event `header` was read from (empty when it has none).
    package static func context(_ header: EventHeader, frame: [UInt8]) -> [UInt8] {
        guard header.flags.contains(.extended) else { return [] }
        return header.extensions(in: frame).first { $0.tag == .context }?.value ?? []
    }
}

/// The host's consent state as a sink's policy reads it.
package struct SinkPolicyConsent: Sendable {
    /// Each category's status; a category missing takes ``defaultStatus``.
    package var consent: [String: ConsentStatus]
    /// The status of a category not in ``consent``.
    package var defaultStatus: ConsentStatus
    /// The enabled features.
    package var enabledFeatures: Set<String>
    /// What an undetermined category does (`hold`: the sink waits; `drop`: the event is skipped).
    package var undetermined: ConsentConfiguration.Undetermined.Policy
    /// A state.
    package init(consent: [String: ConsentStatus], defaultStatus: ConsentStatus = .granted, enabledFeatures: Set<String>,
                 undetermined: ConsentConfiguration.Undetermined.Policy) {
        self.consent = consent
        self.defaultStatus = defaultStatus
        self.enabledFeatures = enabledFeatures
        self.undetermined = undetermined
    }
}

/// One sink's consent requirement and route, decided as a pure function of the event, the host's
/// consent state and the event's own `context.consent.categoryPreferences`
/// (docs/DELIVERY.md, "Routes and consent per sink").
///
/// The agent's own `consent_updated` events (category `consent`) go to every sink whatever its
/// route and requirement: an upstream must learn of a revocation.
package struct SinkPolicy: Sendable, Hashable {
    /// The categories the sink's purpose needs, each granted for an event to go.
    package let requiresConsent: [String]
    /// The route, `nil`: every event.
    package let route: AgentConfiguration.SinkConfiguration.Route?
    private let compiled: Compiled?

    /// The policy of `requiresConsent` and `route`; `nil` when they name nothing (the sink
    /// takes what the host's consent lets out, and the gate does no per-sink work).
    package init?(requiresConsent: [String], route: AgentConfiguration.SinkConfiguration.Route?) {
        guard !requiresConsent.isEmpty || route != nil else { return nil }
        self.requiresConsent = requiresConsent
        self.route = route
        compiled = route.map { Compiled($0, categories: nil) }
    }

    /// The decision for `event` under `consent`; `preferences` reads the event's
    /// `context.consent.categoryPreferences` entry of a category (`nil`: absent), asked only when
    /// the sink requires consent and the route takes the event.
    package func admit(_ event: SinkPolicyEvent, consent: SinkPolicyConsent,
                       preferences: (String) -> Bool? = { _ in nil }) -> SinkAdmission {
        admit(event, host: requirement(consent), preferences: preferences)
    }

    /// The decision for `event` when the host's state alone gives `host` (``requirement(_:preferences:)``
    /// without preferences, worked out once per batch): the route, then the host's answer, then
    /// the event's own preferences.
    package func admit(_ event: SinkPolicyEvent, host: SinkAdmission, preferences: (String) -> Bool? = { _ in nil }) -> SinkAdmission {
        if event.category == ConsentCategories.consentName { return .deliver }
        if let compiled, !compiled.takes(event) { return .skip(.route) }
        switch host {
        case .skip: return host
        case .deliver, .wait:
            for category in requiresConsent where preferences(category) == false { return .skip(.categoryPreferences) }
            return host
        }
    }

    /// The requirement alone: a skip when a required category is disabled, denied, undetermined
    /// under `drop` or refused by the event's preferences; `wait` when none is and one is
    /// undetermined under `hold`.
    package func requirement(_ consent: SinkPolicyConsent, preferences: (String) -> Bool? = { _ in nil }) -> SinkAdmission {
        var waits = false
        for category in requiresConsent {
            if !consent.enabledFeatures.contains(category) { return .skip(.featureDisabled) }
            switch consent.consent[category] ?? consent.defaultStatus {
            case .granted: break
            case .denied: return .skip(.consentDenied)
            case .undetermined:
                if consent.undetermined == .drop { return .skip(.consentUndetermined) }
                waits = true
            }
        }
        for category in requiresConsent where preferences(category) == false { return .skip(.categoryPreferences) }
        return waits ? .wait : .deliver
    }

    /// Whether the sink waits whatever the event (the loop then pauses before reading): a
    /// required category is undetermined under `hold` and none forbids outright.
    package func waits(_ consent: SinkPolicyConsent) -> Bool {
        !requiresConsent.isEmpty && requirement(consent) == .wait
    }

    /// Whether `event` is on the route (the agent's own consent events always are).
    package func routes(_ event: SinkPolicyEvent) -> Bool {
        event.category == ConsentCategories.consentName || compiled?.takes(event) ?? true
    }

    /// `context.consent.categoryPreferences` of an event's context JSON (Segment's consent
    /// object): the boolean entries, by category. Empty when absent or not JSON.
    package static func categoryPreferences(context: [UInt8]) -> [String: Bool] {
        guard !context.isEmpty, let tape = try? JSONTape.parse(context) else { return [:] }
        return context.withUnsafeBytes { bytes in
            tape.nodes.withUnsafeBufferPointer { nodes -> [String: Bool] in
                guard let consent = JSONTape.member("consent", of: 0, in: nodes, bytes),
                      let preferences = JSONTape.member("categoryPreferences", of: consent, in: nodes, bytes),
                      nodes[preferences].kind == .object else { return [:] }
                var out: [String: Bool] = [:]
                var child = preferences + 1
                for _ in 0..<Int(nodes[preferences].count) {
                    let value = nodes[child + 1]
                    if value.kind == .true || value.kind == .false {
                        out[String(decoding: JSONTape.decodedString(nodes[child], in: bytes), as: UTF8.self)] = value.kind == .true
                    }
                    child = Int(nodes[child + 1].next)
                }
                return out
            }
        }
    }

    /// Whether `name` matches `pattern`, where `*` stands for any run of characters.
    package static func glob(_ pattern: String, matches name: String) -> Bool {
        glob(Array(pattern.utf8), matches: ArraySlice(name.utf8))
    }

    /// ``glob(_:matches:)`` on UTF-8 bytes (`*` is one byte, never part of another character).
    static func glob(_ pattern: [UInt8], matches name: ArraySlice<UInt8>) -> Bool {
        let star = UInt8(ascii: "*")
        // Greedy with one backtrack point (the last `*`): linear for the patterns routes use.
        var p = 0, n = name.startIndex
        var lastStar: Int?, resume = n
        while n < name.endIndex {
            if p < pattern.count, pattern[p] == star {
                lastStar = p
                resume = n
                p += 1
            } else if p < pattern.count, pattern[p] == name[n] {
                p += 1
                n += 1
            } else if let star = lastStar {
                p = star + 1
                resume += 1
                n = resume
            } else {
                return false
            }
        }
        while p < pattern.count, pattern[p] == star { p += 1 }
        return p == pattern.count
    }

    /// A route as sets, for matching an event and for proving a route can match nothing.
    struct Compiled: Sendable, Hashable {
        struct Side: Sendable, Hashable {
            var types: Set<EventType>?
            var names: [String]?
            var categories: Set<String>?
            var sources: Set<String>?
            /// The names and sources as UTF-8, matched against the frame's bytes.
            var nameBytes: [[UInt8]]?
            var sourceBytes: [[UInt8]]?

            init(_ match: AgentConfiguration.SinkConfiguration.Match) {
                types = match.types.map { Set($0.compactMap(EventType.init(name:))) }
                names = match.names
                categories = match.categories.map(Set.init)
                sources = match.sources.map(Set.init)
                nameBytes = match.names?.map { Array($0.utf8) }
                sourceBytes = match.sources?.map { Array($0.utf8) }
            }

            func takes(_ event: SinkPolicyEvent) -> Bool {
                if let types, !types.contains(event.type) { return false }
                if let categories, !(event.category.map(categories.contains) ?? false) { return false }
                if let sourceBytes, !sourceBytes.contains(where: { $0.elementsEqual(event.source) }) { return false }
                if let nameBytes, !nameBytes.contains(where: { pattern in
                    pattern.contains(UInt8(ascii: "*")) ? SinkPolicy.glob(pattern, matches: event.name) : pattern.elementsEqual(event.name)
                }) { return false }
                return true
            }
        }
        var include: Side?
        var exclude: Side?
        /// Every category configured (for ``matchesNothing``); `nil` when not needed.
        var categories: Set<String>?

        init(_ route: AgentConfiguration.SinkConfiguration.Route, categories: Set<String>?) {
            include = route.include.map(Side.init)
            exclude = route.exclude.map(Side.init)
            self.categories = categories
        }

        func takes(_ event: SinkPolicyEvent) -> Bool {
            if let include, !include.takes(event) { return false }
            if let exclude, exclude.takes(event) { return false }
            return true
        }

        /// True when no event can pass: `exclude` covers, list by list, everything `include`
        /// takes (each side is a product of its lists, so that is exact for types and
        /// categories; for names and sources only a sure cover counts: an equal entry, or an
        /// exclude pattern matching an include name without `*`, or a pattern of `*` alone).
        var matchesNothing: Bool {
            guard let exclude else { return false }
            let include = self.include
            let allTypes = Set(EventType.allCases)
            if let excluded = exclude.types, !(include?.types ?? allTypes).isSubset(of: excluded) { return false }
            if let excluded = exclude.categories {
                guard let taken = include?.categories ?? categories, taken.isSubset(of: excluded) else { return false }
            }
            if let excluded = exclude.sources {
                guard let taken = include?.sources, taken.isSubset(of: excluded) else { return false }
            }
            if let excluded = exclude.names {
                let everything = excluded.contains { !$0.isEmpty && $0.allSatisfy { $0 == "*" } }
                if !everything {
                    guard let taken = include?.names else { return false }
                    for name in taken where !excluded.contains(name) {
                        guard !name.contains("*"), excluded.contains(where: { SinkPolicy.glob($0, matches: name) }) else { return false }
                    }
                }
            }
            return true
        }
    }
}
