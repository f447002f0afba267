import FerryProtocol

/// One broken rule of the tracking plan.
public struct Violation: Sendable, Hashable {
    /// The event as the plan names it: `track:Order Completed`, `identify`.
    public var event: String
    /// The schema keyword broken (`required`, `type`, `pattern` …) or `unplanned`.
    public var rule: String
    /// Where in the event: `properties.total`, `context.app.version`.
    public var path: String
    /// What is wrong: `must be a number`.
    public var message: String

    /// Creates a violation.
    public init(event: String, rule: String, path: String, message: String) {
        self.event = event
        self.rule = rule
        self.path = path
        self.message = message
    }

    /// `{"event":…,"rule":…,"path":…,"message":…}`
    public var json: String {
        var out: [UInt8] = []
        appendJSON(to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    func appendJSON(to out: inout [UInt8]) {
        out.append(contentsOf: #"{"event":"#.utf8)
        JSONText.appendString(event, to: &out)
        out.append(contentsOf: #","rule":"#.utf8)
        JSONText.appendString(rule, to: &out)
        out.append(contentsOf: #","path":"#.utf8)
        JSONText.appendString(path, to: &out)
        out.append(contentsOf: #","message":"#.utf8)
        JSONText.appendString(message, to: &out)
        out.append(UInt8(ascii: "}"))
    }
}

/// The edge's judgement of one event: redaction first (so a plan may require a hashed field),
/// then the plan. Compiled once per load; ``judge(_:)`` is a pure function, callable from any
/// thread.
public struct QualityGate: Sendable {
    /// The plan, if any.
    public let plan: TrackingPlan?
    /// Whether an event the plan does not name passes.
    public let allowUnplanned: Bool
    /// The redactor, if any.
    public let redactor: Redactor?

    /// Creates a gate.
    public init(plan: TrackingPlan?, allowUnplanned: Bool, redactor: Redactor?) {
        self.plan = plan
        self.allowUnplanned = allowUnplanned
        self.redactor = redactor
    }

    /// True when there is neither a plan nor a redactor (the ingest stage skips the gate).
    public var isEmpty: Bool { plan == nil && redactor == nil }

    /// Redacts, then checks `event` against the plan.
    public func judge(_ event: consuming WireEvent) -> Judgement {
        var redacted = false
        var parsed = ParsedFields()
        var violations: [Violation] = []
        if let redactor { redacted = redactor.redact(&event, parsed: &parsed, violations: &violations) }
        var rule = -1
        if plan != nil {
            let properties = parsed.properties ?? (event.properties.isEmpty ? .empty : ParsedJSON(object: event.properties))
            // The agent refuses an event whose context is not an object before the gate.
            let context = parsed.context ?? (event.context.isEmpty ? nil : ParsedJSON(object: event.context))
            let type = event.type
            var name = event.name
            rule = name.withUTF8 { name in
                func check(_ properties: JSONView?) -> Int {
                    guard let context else {
                        return checkPlan(type: type, name: UnsafeRawBufferPointer(name), properties: properties, context: nil, into: &violations)
                    }
                    return context.withView {
                        checkPlan(type: type, name: UnsafeRawBufferPointer(name), properties: properties, context: $0, into: &violations)
                    }
                }
                guard let properties else { return check(nil) }
                return properties.withView { check($0) }
            }
        }
        if !violations.isEmpty {
            // Named only now: building the label costs an allocation the passing path never pays.
            let label = rule >= 0 ? plan!.rules[rule].label : TrackingPlan.label(type: event.type, name: event.name)
            for index in violations.indices { violations[index].event = label }
        }
        return Judgement(event: event, redacted: redacted, violations: violations)
    }

    /// The plan's half of the judgement, run by ``judge(_:)`` and ``passesUntouched(frame:header:)``
    /// alike: the rule naming an event of `type` called `name` (-1 for none; a violation when
    /// none does and unplanned events are refused), then, when a rule or a common rule applies,
    /// their schemas over `properties` (nil: present but not a JSON object, itself a violation)
    /// and `context`. Returns the rule. Only with a plan.
    @inline(__always)
    func checkPlan(type: EventType, name: UnsafeRawBufferPointer, properties: JSONView?, context: JSONView?,
                   into violations: inout [Violation]) -> Int {
        // Optional chaining, not a binding: a binding would retain the plan's core per event.
        let rule = plan?.rule(type: type, name: name) ?? -1
        if rule < 0 && !allowUnplanned {
            violations.append(Violation(event: "", rule: "unplanned", path: "", message: "the plan does not name this event"))
        }
        guard rule >= 0 || plan?.common.isEmpty == false else { return rule }
        guard let properties else {
            let isTraits = type == .identify || type == .group
            violations.append(Violation(event: "", rule: "type", path: isTraits ? "traits" : "properties", message: "must be a JSON object"))
            ParsedJSON.empty.withView { plan?.check(type: type, rule: rule, properties: $0, context: context, into: &violations) }
            return rule
        }
        plan?.check(type: type, rule: rule, properties: properties, context: context, into: &violations)
        return rule
    }
}

/// The fields the redactor parsed and left unchanged, so the plan does not parse them again.
struct ParsedFields {
    var properties: ParsedJSON?
    var context: ParsedJSON?
}

/// What ``QualityGate/judge(_:)`` decided about one event.
public struct Judgement: Sendable {
    /// The event to store: redacted when ``redacted``, else the input.
    public var event: WireEvent
    /// Whether redaction changed a field (the frame must be re-encoded).
    public var redacted: Bool
    /// The plan's rules the (redacted) event breaks; empty when it passes.
    public var violations: [Violation]

    /// Creates a judgement.
    public init(event: WireEvent, redacted: Bool, violations: [Violation]) {
        self.event = event
        self.redacted = redacted
        self.violations = violations
    }
}

extension WireEvent {
    /// The event with `context.ferry.violations` set to `violations` (the `tag` action).
    public func tagged(with violations: [Violation]) -> WireEvent {
        var copy = self
        copy.context = ContextTagging.tag(context, with: violations)
        return copy
    }
}
