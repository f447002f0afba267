import FerryProtocol

/// Redaction compiled once per load: the rules by path, the detectors and the HMAC key.
public struct Redactor: Sendable {
    /// The configuration it was compiled from.
    public var configuration: RedactionConfiguration { core.configuration }
    /// Everything compiled, behind one reference: copying a redactor (the gate does per event)
    /// retains one object.
    fileprivate let core: Core

    /// The compiled redaction, shared by every copy.
    fileprivate final class Core: Sendable {
        let configuration: RedactionConfiguration
        let rules: [Compiled]
        let hmac: HMACSHA256?
        /// The action of each detector kind (indexed as ``DetectorKind/allCases``), nil when off.
        let detectorActions: [RedactionAction?]
        let detectorKinds: Detectors.KindSet
        /// Bits of the rules that start at each root (indexed as ``RedactionPath/Root/allCases``).
        let rootMasks: [UInt64]

        init(configuration: RedactionConfiguration, rules: [Compiled], hmac: HMACSHA256?, detectorActions: [RedactionAction?],
             detectorKinds: Detectors.KindSet, rootMasks: [UInt64]) {
            self.configuration = configuration
            self.rules = rules
            self.hmac = hmac
            self.detectorActions = detectorActions
            self.detectorKinds = detectorKinds
            self.rootMasks = rootMasks
        }

        func action(for kind: DetectorKind) -> RedactionAction? {
            detectorActions[kind.index]
        }

        /// What the detectors find in `text` (under the member named `key`): the whole value of a
        /// kind, or parts of it (docs/QUALITY.md, "Inside text"), with the configured actions; nil
        /// when they leave it as it is. The one decision the walk and the identifiers make.
        @inline(__always)
        func detection(_ text: UnsafeRawBufferPointer, key: UnsafeRawBufferPointer?, prefiltered: Bool) -> Detection? {
            guard !detectorKinds.isEmpty else { return nil }
            switch Detectors.find(text, kinds: detectorKinds, key: key, prefiltered: prefiltered, inText: true) {
            case .whole(let kind)?: return action(for: kind).map { .whole(kind, $0) }
            case .parts(let parts)?: return .parts(parts)
            case nil: return nil
            }
        }

        /// The text that replaces `text` after `detection` (without quotes), or nil to drop the
        /// value: a whole value hashed or masked by its kind; each part of a text by its kind's
        /// action (one part whose kind drops drops the value).
        func replacement(_ detection: Detection, text: UnsafeRawBufferPointer) -> [UInt8]? {
            switch detection {
            case .whole(let kind, let action):
                switch action {
                case .drop: return nil
                case .hash: return hmac!.tag(text)
                case .mask: return Detectors.mask(text, kind: kind)
                case .keep: return Array(text)  // never: init refuses a detector that keeps
                }
            case .parts(let parts):
                if parts.contains(where: { action(for: $0.kind) == .drop }) { return nil }
                return Detectors.rewrite(text, parts) { part, kind in
                    action(for: kind) == .hash ? hmac!.tag(part) : Detectors.mask(part, kind: kind)
                }
            }
        }

        func rootMask(_ root: RedactionPath.Root) -> UInt64 {
            rootMasks[root.index]
        }
    }

    /// What the detectors found in a string.
    fileprivate enum Detection {
        /// The whole value is of a kind, with that kind's action.
        case whole(DetectorKind, RedactionAction)
        /// Parts of the text are (``Detectors/matches(in:kinds:noIP:)``).
        case parts([Detectors.Match])
    }

    fileprivate struct Compiled: Sendable {
        var path: RedactionPath
        var action: RedactionAction
    }

    /// The most rules a table may have.
    public static let maxRules = 64

    /// Compiles `configuration`; `key` is the HMAC key (at least 32 bytes when a rule or detector
    /// hashes).
    public init(configuration: RedactionConfiguration, key: [UInt8]) throws(QualityError) {
        guard configuration.rules.count <= Self.maxRules else {
            throw .invalidRedaction(path: "rules", message: "has \(configuration.rules.count) rules; at most \(Self.maxRules) are supported")
        }
        var rules: [Compiled] = []
        var masks = [UInt64](repeating: 0, count: RedactionPath.Root.allCases.count)
        for (index, rule) in configuration.rules.enumerated() {
            let path = try RedactionPath(parsing: rule.path, at: "rules[\(index)].path")
            masks[path.root.index] |= 1 << UInt64(index)
            rules.append(Compiled(path: path, action: rule.action))
        }
        var actions = [RedactionAction?](repeating: nil, count: DetectorKind.allCases.count)
        var kinds: Detectors.KindSet = []
        for (index, detector) in configuration.detectors.enumerated() {
            guard detector.action.isDetectorAction else { throw RedactionConfigurationParser.detectorKeeps(at: "detect[\(index)].action") }
            actions[detector.kind.index] = detector.action
            kinds.insert(Detectors.KindSet(detector.kind))
        }
        let hashes = configuration.rules.contains { $0.action == .hash } || configuration.detectors.contains { $0.action == .hash }
        if hashes {
            guard key.count >= FileAccess.minimumKeyBytes else {
                let file = configuration.keyFile ?? "(none)"
                throw .keyFile(path: file, message: key.isEmpty
                    ? "a rule hashes, so redact.keyFile must name a key file"
                    : "holds \(key.count) bytes; a key needs at least \(FileAccess.minimumKeyBytes)")
            }
        }
        let hmac = hashes || !key.isEmpty ? HMACSHA256(key: key) : nil
        core = Core(configuration: configuration, rules: rules, hmac: hmac, detectorActions: actions, detectorKinds: kinds, rootMasks: masks)
    }

    /// Reads the key file named by `configuration.keyFile` (a regular file, not a symlink, owned
    /// by root or this process's user, not readable by group or others, at least 32 bytes) and
    /// compiles the configuration.
    public static func load(configuration: RedactionConfiguration) throws(QualityError) -> Redactor {
        var key: [UInt8] = []
        if let path = configuration.keyFile { key = try FileAccess.readKey(path) }
        return try Redactor(configuration: configuration, key: key)
    }

    /// The rules and detectors, one line each, for `ferryd validate`: `properties.email: hash`,
    /// `detect card: mask`.
    public var summary: [String] {
        configuration.rules.map { "\($0.path): \($0.action.rawValue)" }
            + configuration.detectors.map { "detect \($0.kind.rawValue): \($0.action.rawValue)" }
            + (configuration.keyFile.map { ["key file \($0)"] } ?? [])
    }

    // MARK: Redacting

    /// Redacts `event` in place; true when a field changed. Fields parsed and left unchanged are
    /// handed to the plan in `parsed`. A properties or context field that is not a JSON object
    /// cannot be redacted: it is removed (nothing unredacted may be stored) and a violation of rule
    /// `redact` says so (its `event` left empty: the gate names the event).
    func redact(_ event: inout WireEvent, parsed: inout ParsedFields, violations: inout [Violation]) -> Bool {
        var changed = false
        let traits = event.type == .identify || event.type == .group
        if !event.properties.isEmpty {
            switch redactJSON(event.properties, root: traits ? .traits : .properties) {
            case .unchanged(let document): parsed.properties = document
            case .changed(let bytes):
                event.properties = bytes
                changed = true
            case .invalid:
                event.properties = []
                changed = true
                violations.append(Violation(event: "", rule: "redact", path: traits ? "traits" : "properties",
                                            message: "is not a JSON object, so it cannot be redacted: removed"))
            }
        }
        if !event.context.isEmpty {
            switch redactJSON(event.context, root: .context) {
            case .unchanged(let document): parsed.context = document
            case .changed(let bytes):
                event.context = bytes
                changed = true
            case .invalid:
                event.context = []
                changed = true
                violations.append(Violation(event: "", rule: "redact", path: "context",
                                            message: "is not a JSON object, so it cannot be redacted: removed"))
            }
        }
        changed = redactIdentifier(&event.userID, .userId) || changed
        changed = redactIdentifier(&event.anonymousID, .anonymousId) || changed
        changed = redactIdentifier(&event.previousID, .previousId) || changed
        changed = redactIdentifier(&event.groupID, .groupId) || changed
        return changed
    }

    private func redactIdentifier(_ value: inout String, _ root: RedactionPath.Root) -> Bool {
        guard !value.isEmpty else { return false }
        var copy = value
        let replacement: [UInt8]?? = copy.withUTF8 { utf8 in
            let text = UnsafeRawBufferPointer(utf8)
            switch identifierAction(text, root) {
            case nil, .rule(.keep): return .none
            case .rule(.drop): return .some(nil)
            case .rule(.hash): return core.hmac!.tag(text)
            case .rule(.mask): return Detectors.mask(text, kind: Detectors.classify(text, kinds: .all, key: nil))
            case .detected(let detection): return .some(core.replacement(detection, text: text))
            }
        }
        guard let replacement else { return false }
        value = String(decoding: replacement ?? [], as: UTF8.self)
        return true
    }

    /// What redaction does to an identifier: a rule's action, or what the detectors found.
    private enum IdentifierAction {
        case rule(RedactionAction)
        case detected(Detection)
    }

    /// What redaction does to the identifier `text` (UTF-8) under `root`: the strongest action of
    /// the rules that name the root, else what the detectors find in it; nil to leave it as it
    /// is (also when that action is `keep`: the detectors do not look at it). The decision of
    /// ``redact(_:parsed:violations:)`` and ``leavesIdentifierUnchanged(_:_:)``.
    @inline(__always)
    private func identifierAction(_ text: UnsafeRawBufferPointer, _ root: RedactionPath.Root) -> IdentifierAction? {
        var chosen: RedactionAction?
        var mask = core.rootMask(root)
        while mask != 0 {
            let index = mask.trailingZeroBitCount
            mask &= mask - 1
            chosen = Self.stronger(chosen, core.rules[index].action)
        }
        if let chosen { return chosen == .keep ? nil : .rule(chosen) }
        return core.detection(text, key: nil, prefiltered: false).map { .detected($0) }
    }

    /// drop over hash over mask over keep (a value one rule keeps and another redacts is redacted).
    private static func stronger(_ current: RedactionAction?, _ other: RedactionAction) -> RedactionAction {
        guard let current else { return other }
        return rank(other) > rank(current) ? other : current
    }

    /// An action's place in ``stronger(_:_:)``'s order (a switch: no table built per call).
    private static func rank(_ action: RedactionAction) -> Int {
        switch action {
        case .keep: 0
        case .mask: 1
        case .hash: 2
        case .drop: 3
        }
    }

    enum Outcome {
        case unchanged(ParsedJSON)
        case changed([UInt8])
        case invalid
    }

    /// Redacts one JSON field (properties, traits or context).
    private func redactJSON(_ bytes: [UInt8], root: RedactionPath.Root) -> Outcome {
        guard let document = ParsedJSON(object: bytes) else { return .invalid }
        let edited: [UInt8]? = document.withView { view in
            guard let walker = walk(view, root: root), !walker.edits.isEmpty else { return nil }
            var out: [UInt8] = []
            out.reserveCapacity(bytes.count + 64 * walker.edits.count)
            var next = 0
            walker.emit(0, into: &out, nextEdit: &next)
            return out
        }
        return edited.map { .changed($0) } ?? .unchanged(document)
    }

    /// Whether redaction leaves the document `view` (a properties, traits or context field that
    /// parsed as an object) under `root` unchanged: what ``redact(_:parsed:violations:)`` decides,
    /// without building the edited bytes.
    func leavesUnchanged(_ view: JSONView, root: RedactionPath.Root) -> Bool {
        walk(view, root: root)?.edits.isEmpty ?? true
    }

    /// The redaction of `view` under `root`, decided (the walker's edits; none: unchanged), or nil
    /// when nothing in it can change: no rule names the root and no string may be personal (the
    /// parser's candidate flag; a candidate key only sends the walk down).
    @inline(__always)
    private func walk(_ view: JSONView, root: RedactionPath.Root) -> Walker? {
        let mask = core.rootMask(root)
        if mask == 0 {
            if core.detectorKinds.isEmpty { return nil }
            var candidates = false
            for node in view.nodes where node.candidate { candidates = true; break }
            if !candidates { return nil }
        }
        var walker = Walker(core: core, bytes: view.bytes, nodes: view.nodes)
        walker.walk(0, depth: 0, active: mask, key: -1)
        return walker
    }

    /// Whether redaction leaves the identifier `text` (UTF-8, read in place) under `root`
    /// unchanged: no rule names the root and no detector recognises the value.
    func leavesIdentifierUnchanged(_ text: UnsafeRawBufferPointer, _ root: RedactionPath.Root) -> Bool {
        text.isEmpty || identifierAction(text, root) == nil
    }

    /// Walks a document's tape, deciding each value's fate, then writes the result.
    private struct Walker {
        /// Unretained: a walker lives within a call on the redactor that holds the core.
        unowned(unsafe) let core: Core
        let bytes: UnsafeRawBufferPointer
        let nodes: UnsafeBufferPointer<JSONNode>
        /// Replacements by tape index, in tape order; nil drops the value.
        var edits: [(node: Int, replacement: [UInt8]?)] = []

        init(core: Core, bytes: UnsafeRawBufferPointer, nodes: UnsafeBufferPointer<JSONNode>) {
            self.core = core
            self.bytes = bytes
            self.nodes = nodes
        }

        /// `active`: the rules whose first `depth` steps led here; `key`: the tape index of the
        /// member name the value is under, -1 for none.
        mutating func walk(_ node: Int, depth: Int, active: UInt64, key: Int) {
            let value = nodes[node]
            switch value.kind {
            case .object:
                var child = node + 1
                for _ in 0..<Int(value.count) {
                    let next = active == 0 ? (nil, 0) : follow(active, depth: depth, key: child, position: -1)
                    visit(child + 1, depth: depth + 1, matched: next, key: child)
                    child = Int(nodes[child + 1].next)
                }
            case .array:
                var child = node + 1
                for position in 0..<Int(value.count) {
                    let next = active == 0 ? (nil, 0) : follow(active, depth: depth, key: -1, position: position)
                    visit(child, depth: depth + 1, matched: next, key: key)
                    child = Int(nodes[child].next)
                }
            case .string:
                guard value.candidate, !core.detectorKinds.isEmpty else { return }
                if value.escaped {
                    let decoded = JSONTape.decodedString(value, in: bytes)
                    decoded.withUnsafeBytes { detect(node, $0, key: key) }
                } else {
                    detect(node, UnsafeRawBufferPointer(rebasing: bytes[Int(value.start)..<Int(value.end)]), key: key)
                }
            default: return
            }
        }

        private mutating func detect(_ node: Int, _ text: UnsafeRawBufferPointer, key: Int) {
            let keyText = key < 0 ? nil : UnsafeRawBufferPointer(rebasing: bytes[Int(nodes[key].start)..<Int(nodes[key].end)])
            guard let detection = core.detection(text, key: keyText, prefiltered: true) else { return }
            edits.append((node, core.replacement(detection, text: text).map(quoted)))
        }

        /// A member or element: a rule ends here (its action), or the walk goes on below.
        private mutating func visit(_ node: Int, depth: Int, matched: (ended: RedactionAction?, goingOn: UInt64), key: Int) {
            if let action = matched.ended {
                end(action, at: node)
                return
            }
            walk(node, depth: depth, active: matched.goingOn, key: key)
        }

        /// A rule's action on the value at `node`, as an edit (`keep`: none, and nothing below it
        /// is looked at). Out of line: the walk of a document no rule reaches stays as small.
        @inline(never)
        private mutating func end(_ action: RedactionAction, at node: Int) {
            if action != .keep { edits.append((node, apply(action, to: node))) }
        }

        /// The rules of `active` whose step at `depth` matches: the strongest action of those that
        /// end there, and the bits of those that go on.
        private func follow(_ active: UInt64, depth: Int, key: Int, position: Int) -> (ended: RedactionAction?, goingOn: UInt64) {
            var ended: RedactionAction?
            var goingOn: UInt64 = 0
            var mask = active
            while mask != 0 {
                let index = mask.trailingZeroBitCount
                mask &= mask - 1
                let rule = core.rules[index]
                guard depth < rule.path.steps.count else { continue }
                if case .key(let name) = rule.path.steps[depth] {
                    let matches = key >= 0 ? keyEquals(nodes[key], name) : name.elementsEqual(String(position).utf8)
                    guard matches else { continue }
                }
                if depth + 1 == rule.path.steps.count {
                    ended = Redactor.stronger(ended, rule.action)
                } else {
                    goingOn |= 1 << UInt64(index)
                }
            }
            return (ended, goingOn)
        }

        private func keyEquals(_ key: JSONNode, _ name: [UInt8]) -> Bool {
            if key.escaped { return JSONTape.decodedString(key, in: bytes) == name }
            let raw = UnsafeRawBufferPointer(rebasing: bytes[Int(key.start)..<Int(key.end)])
            return raw.count == name.count && raw.elementsEqual(name)
        }

        private func withText<Result>(_ value: JSONNode, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
            if value.escaped { return JSONTape.decodedString(value, in: bytes).withUnsafeBytes(body) }
            return body(UnsafeRawBufferPointer(rebasing: bytes[Int(value.start)..<Int(value.end)]))
        }

        private func quoted(_ text: [UInt8]) -> [UInt8] {
            var out: [UInt8] = []
            text.withUnsafeBytes { JSONText.appendString(utf8: $0, to: &out) }
            return out
        }

        /// A rule's action on any value: nil drops it.
        private func apply(_ action: RedactionAction, to node: Int) -> [UInt8]? {
            let value = nodes[node]
            switch action {
            case .drop: return nil
            case .hash:
                // A string's text; any other value's JSON as written.
                if value.kind == .string { return withText(value) { quoted(core.hmac!.tag($0)) } }
                return quoted(core.hmac!.tag(UnsafeRawBufferPointer(rebasing: bytes[JSONTape.rawRange(value)])))
            case .mask:
                var out: [UInt8] = []
                masked(node, into: &out)
                return out
            case .keep: return Array(bytes[JSONTape.rawRange(value)])  // never: visit makes no edit
            }
        }

        /// The value with every string masked (by its detected kind) and every number and
        /// boolean replaced by `"***"`; keys and null kept.
        private func masked(_ node: Int, into out: inout [UInt8]) {
            let value = nodes[node]
            switch value.kind {
            case .object:
                out.append(UInt8(ascii: "{"))
                var child = node + 1
                for position in 0..<Int(value.count) {
                    if position > 0 { out.append(UInt8(ascii: ",")) }
                    out.append(contentsOf: bytes[JSONTape.rawRange(nodes[child])])
                    out.append(UInt8(ascii: ":"))
                    masked(child + 1, into: &out)
                    child = Int(nodes[child + 1].next)
                }
                out.append(UInt8(ascii: "}"))
            case .array:
                out.append(UInt8(ascii: "["))
                var child = node + 1
                for position in 0..<Int(value.count) {
                    if position > 0 { out.append(UInt8(ascii: ",")) }
                    masked(child, into: &out)
                    child = Int(nodes[child].next)
                }
                out.append(UInt8(ascii: "]"))
            case .string:
                out += withText(value) { quoted(Detectors.mask($0, kind: Detectors.classify($0, kinds: .all, key: nil))) }
            case .number, .true, .false: out.append(contentsOf: #""***""#.utf8)
            case .null: out.append(contentsOf: "null".utf8)
            }
        }

        /// Writes the document with the edits applied; `nextEdit` is the first edit not written.
        func emit(_ node: Int, into out: inout [UInt8], nextEdit: inout Int) {
            let value = nodes[node]
            // Nothing to change in this subtree: its bytes as they are.
            if nextEdit == edits.count || edits[nextEdit].node >= Int(value.next) {
                out.append(contentsOf: bytes[JSONTape.rawRange(value)])
                return
            }
            if edits[nextEdit].node == node {
                if let replacement = edits[nextEdit].replacement { out.append(contentsOf: replacement) }
                nextEdit += 1
                return
            }
            switch value.kind {
            case .object:
                out.append(UInt8(ascii: "{"))
                var child = node + 1
                var first = true
                for _ in 0..<Int(value.count) {
                    let valueNode = child + 1
                    if nextEdit < edits.count, edits[nextEdit].node == valueNode, edits[nextEdit].replacement == nil {
                        nextEdit += 1  // dropped with its key
                    } else {
                        if !first { out.append(UInt8(ascii: ",")) }
                        first = false
                        out.append(contentsOf: bytes[JSONTape.rawRange(nodes[child])])
                        out.append(UInt8(ascii: ":"))
                        emit(valueNode, into: &out, nextEdit: &nextEdit)
                    }
                    child = Int(nodes[valueNode].next)
                }
                out.append(UInt8(ascii: "}"))
            case .array:
                out.append(UInt8(ascii: "["))
                var child = node + 1
                var first = true
                for _ in 0..<Int(value.count) {
                    if nextEdit < edits.count, edits[nextEdit].node == child, edits[nextEdit].replacement == nil {
                        nextEdit += 1
                    } else {
                        if !first { out.append(UInt8(ascii: ",")) }
                        first = false
                        emit(child, into: &out, nextEdit: &nextEdit)
                    }
                    child = Int(nodes[child].next)
                }
                out.append(UInt8(ascii: "]"))
            default:
                out.append(contentsOf: bytes[JSONTape.rawRange(value)])
            }
        }
    }
}
