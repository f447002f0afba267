// Shared by RegexDifferentialTests (in the suite) and the libFuzzer target Fuzz/FuzzRegex (in the
// package in Fuzz/), whose RegexReference.swift links to this file: both compare ``Regex`` with
// Python's `re`.
@testable import FerryQuality
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Patterns of the subset ``Regex`` supports and strings to match them against, generated from a
/// source of choices (a seeded generator in the suite, the fuzzer's bytes in the fuzz target),
/// each pattern written twice: as a tracking plan writes it (ECMA-262, for ``Regex``), and for an
/// independent engine, Python's `re` (with `re.ASCII`), with the same meaning spelled out where
/// `re` defines a construct differently: `.` excludes the four line terminators, `\s` is
/// ECMA-262's white space and line terminators, `$` is the end of the text (`\Z`), `^` its start
/// (`\A`), `\B` holds in an empty text, and every literal is an escape (`\U0001f600`).
enum RegexReference {
    /// One generated pattern, as each engine reads it, and the texts to try it on.
    struct Case: Sendable, CustomStringConvertible {
        /// ECMA-262, as a tracking plan's `pattern` writes it.
        var pattern: String
        /// For Python's `re.compile(…, re.ASCII)`.
        var python: String
        /// Texts to match.
        var texts: [String]

        var description: String { "\(pattern) (python \(python)) on \(texts.map { $0.debugDescription })" }
    }

    /// Where choices come from.
    protocol Choices {
        /// A number in `0..<bound` (`bound` > 0).
        mutating func next(_ bound: Int) -> Int
    }

    /// SplitMix64: deterministic choices from a seed (the suite).
    struct Seeded: Choices {
        var state: UInt64
        init(seed: UInt64) { state = seed }
        mutating func next(_ bound: Int) -> Int {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            z ^= z >> 31
            return Int(z % UInt64(bound))
        }
    }

    /// Choices read from bytes (the fuzzer's input), 0 once they run out.
    struct Bytes: Choices {
        let bytes: [UInt8]
        var index = 0
        init(_ bytes: [UInt8]) { self.bytes = bytes }
        mutating func next(_ bound: Int) -> Int {
            guard index < bytes.count else { return 0 }
            defer { index += 1 }
            return Int(bytes[index]) % bound
        }
    }

    /// The scalars patterns and texts are made of: word and non-word ASCII, the line terminators,
    /// white space outside ASCII, two- three- and four-byte UTF-8.
    static let alphabet: [UInt32] = [
        0x61, 0x62, 0x63, 0x41, 0x5A, 0x30, 0x31, 0x39, 0x5F, 0x20, 0x2D, 0x2E, 0x40, 0x09, 0x0A, 0x0D, 0x0B,
        0xA0, 0xE9, 0x2028, 0x3000, 0xFEFF, 0x1F600, 0x00,
    ]
    /// Syntax characters written escaped (`\.`).
    static let syntax: [UInt32] = Array("^$\\.*+?()[]{}|/".unicodeScalars.map(\.value))

    /// ECMA-262's `\s`: white space and line terminators.
    static let spaceRanges: [ClosedRange<UInt32>] = [
        0x09...0x0D, 0x20...0x20, 0xA0...0xA0, 0x1680...0x1680, 0x2000...0x200A, 0x2028...0x2029, 0x202F...0x202F,
        0x205F...0x205F, 0x3000...0x3000, 0xFEFF...0xFEFF,
    ]

    indirect enum Node {
        case literal(UInt32)
        case any
        /// `\d` `\w` `\s` (`negated`: `\D` `\W` `\S`).
        case predefined(Character, negated: Bool)
        /// `[…]`: single scalars and ranges, and `\d` `\w` `\s` `\D` `\W` inside.
        case set(items: [SetItem], negated: Bool)
        case group(Node, GroupKind)
        case concat([Node])
        case alternation([Node])
        case repeated(Node, min: Int, max: Int?, lazy: Bool)
        case start, end
        case boundary(Bool)
    }

    enum SetItem {
        case scalar(UInt32)
        case range(UInt32, UInt32)
        case predefined(Character, negated: Bool)
    }

    enum GroupKind { case capturing, nonCapturing, named(Int) }

    /// A generated case: a pattern and `texts` texts (some made to match, some not).
    static func generate(_ choices: inout some Choices, texts: Int = 6) -> Case {
        var names = 0
        let node = generateAlternation(&choices, depth: 0, names: &names)
        var generated: [String] = []
        for index in 0..<texts {
            var scalars: [UInt32] = []
            switch index % 3 {
            case 0:  // a text the pattern should match, as a walk of its tree chooses it
                sample(node, &choices, into: &scalars)
            case 1:  // such a text with one scalar changed, added or removed
                sample(node, &choices, into: &scalars)
                let position = choices.next(scalars.count + 1)
                switch choices.next(3) {
                case 0 where position < scalars.count: scalars[position] = pick(&choices)
                case 1 where position < scalars.count: scalars.remove(at: position)
                default: scalars.insert(pick(&choices), at: position)
                }
            default:  // random scalars
                for _ in 0..<choices.next(8) { scalars.append(pick(&choices)) }
            }
            // Text around it, so unanchored matching and the anchors have something to do.
            if choices.next(3) == 0 { scalars.insert(pick(&choices), at: 0) }
            if choices.next(3) == 0 { scalars.append(pick(&choices)) }
            generated.append(String(String.UnicodeScalarView(scalars.prefix(24).compactMap(Unicode.Scalar.init))))
        }
        return Case(pattern: ecma(node), python: python(node), texts: generated)
    }

    static func pick(_ choices: inout some Choices) -> UInt32 { alphabet[choices.next(alphabet.count)] }

    static func generateAlternation(_ choices: inout some Choices, depth: Int, names: inout Int) -> Node {
        let count = choices.next(5) == 0 ? 2 + choices.next(2) : 1
        var branches: [Node] = []
        for _ in 0..<count { branches.append(generateSequence(&choices, depth: depth, names: &names)) }
        return branches.count == 1 ? branches[0] : .alternation(branches)
    }

    static func generateSequence(_ choices: inout some Choices, depth: Int, names: inout Int) -> Node {
        var items: [Node] = []
        for _ in 0..<(1 + choices.next(depth == 0 ? 5 : 3)) {
            var atom = generateAtom(&choices, depth: depth, names: &names)
            if repeatable(atom), choices.next(3) == 0 {
                let lazy = choices.next(4) == 0
                switch choices.next(6) {
                case 0: atom = .repeated(atom, min: 0, max: nil, lazy: lazy)
                case 1: atom = .repeated(atom, min: 1, max: nil, lazy: lazy)
                case 2: atom = .repeated(atom, min: 0, max: 1, lazy: lazy)
                case 3: atom = .repeated(atom, min: choices.next(4), max: nil, lazy: lazy)
                default:
                    let min = choices.next(3)
                    atom = .repeated(atom, min: min, max: min + choices.next(3), lazy: lazy)
                }
            }
            items.append(atom)
        }
        return items.count == 1 ? items[0] : .concat(items)
    }

    /// Whether a quantifier may follow (ECMA-262 and ``Regex`` refuse one after an assertion, or
    /// after a group holding only one).
    static func repeatable(_ node: Node) -> Bool {
        switch node {
        case .start, .end, .boundary, .repeated: false
        case .group(let inner, _): repeatable(inner)
        default: true
        }
    }

    static func generateAtom(_ choices: inout some Choices, depth: Int, names: inout Int) -> Node {
        switch choices.next(depth < 3 ? 16 : 13) {
        case 0...4: return .literal(pick(&choices))
        case 5: return .literal(syntax[choices.next(syntax.count)])
        case 6: return .any
        case 7: return .predefined(["d", "w", "s"][choices.next(3)], negated: choices.next(2) == 0)
        case 8, 9:
            var items: [SetItem] = []
            for _ in 0..<(1 + choices.next(3)) {
                switch choices.next(4) {
                case 0: items.append(.predefined(["d", "w", "s"][choices.next(3)], negated: false))
                case 1: items.append(.predefined(["d", "w"][choices.next(2)], negated: true))
                case 2:
                    let (a, b) = (pick(&choices), pick(&choices))
                    items.append(.range(min(a, b), max(a, b)))
                default: items.append(.scalar(choices.next(4) == 0 ? syntax[choices.next(syntax.count)] : pick(&choices)))
                }
            }
            return .set(items: items, negated: choices.next(3) == 0)
        case 10: return choices.next(2) == 0 ? .start : .end
        case 11: return .boundary(choices.next(2) == 0)
        case 12: return .literal(pick(&choices))
        default:
            let kind: GroupKind
            switch choices.next(3) {
            case 0: kind = .capturing
            case 1: kind = .nonCapturing
            default: names += 1; kind = .named(names)
            }
            return .group(generateAlternation(&choices, depth: depth + 1, names: &names), kind)
        }
    }

    // MARK: Texts the pattern matches

    /// Appends a text the node matches, choosing branches and counts (anchors and boundaries
    /// are left to chance: the reference decides).
    static func sample(_ node: Node, _ choices: inout some Choices, into out: inout [UInt32]) {
        switch node {
        case .literal(let scalar): out.append(scalar)
        case .any: out.append(pick(&choices))
        case .predefined(let kind, let negated):
            let wanted = alphabet.filter { contains(kind, $0) != negated }
            out.append(wanted.isEmpty ? pick(&choices) : wanted[choices.next(wanted.count)])
        case .set(let items, let negated):
            let wanted = alphabet.filter { setContains(items, $0) != negated }
            out.append(wanted.isEmpty ? pick(&choices) : wanted[choices.next(wanted.count)])
        case .group(let inner, _): sample(inner, &choices, into: &out)
        case .concat(let items): for item in items { sample(item, &choices, into: &out) }
        case .alternation(let branches): sample(branches[choices.next(branches.count)], &choices, into: &out)
        case .repeated(let inner, let min, let max, _):
            let count = min + choices.next((max ?? min + 2) - min + 1)
            for _ in 0..<count { sample(inner, &choices, into: &out) }
        case .start, .end, .boundary: break
        }
    }

    static func contains(_ kind: Character, _ scalar: UInt32) -> Bool {
        switch kind {
        case "d": scalar >= 0x30 && scalar <= 0x39
        case "w": (scalar >= 0x30 && scalar <= 0x39) || (scalar >= 0x41 && scalar <= 0x5A) || (scalar >= 0x61 && scalar <= 0x7A) || scalar == 0x5F
        default: spaceRanges.contains { $0.contains(scalar) }
        }
    }

    static func setContains(_ items: [SetItem], _ scalar: UInt32) -> Bool {
        items.contains { item in
            switch item {
            case .scalar(let single): single == scalar
            case .range(let low, let high): low <= scalar && scalar <= high
            case .predefined(let kind, let negated): contains(kind, scalar) != negated
            }
        }
    }

    // MARK: Writing the pattern

    /// As a tracking plan writes it.
    static func ecma(_ node: Node) -> String {
        func literal(_ scalar: UInt32, inClass: Bool) -> String {
            if syntax.contains(scalar) || (inClass && scalar == 0x2D) { return "\\" + String(Unicode.Scalar(scalar)!) }
            switch scalar {
            case 0x0A: return "\\n"
            case 0x0D: return "\\r"
            case 0x09: return "\\t"
            case 0x0B: return "\\v"
            case 0x00: return "\\x00"  // `\0` before a digit would read as an octal escape
            case 0x2028, 0x2029, 0xFEFF: return "\\u" + hex(scalar, 4)
            case 0x1F600: return "😀"
            default: return String(Unicode.Scalar(scalar)!)
            }
        }
        return write(node, literal: literal, any: ".", predefined: { "\\" + ($1 ? $0.uppercased() : String($0)) },
                     start: "^", end: "$", group: { kind in
                         switch kind {
                         case .capturing: "("
                         case .nonCapturing: "(?:"
                         case .named(let n): "(?<g\(n)>"
                         }
                     })
    }

    /// For Python's `re` with `re.ASCII`.
    static func python(_ node: Node) -> String {
        func literal(_ scalar: UInt32, inClass: Bool) -> String { "\\U" + hex(scalar, 8) }
        let space = spaceRanges.map { "\\U" + hex($0.lowerBound, 8) + "-\\U" + hex($0.upperBound, 8) }.joined()
        return write(node, literal: literal, any: "[^\\n\\r\\u2028\\u2029]", predefined: { kind, negated in
            let body = kind == "d" ? "0-9" : kind == "w" ? "A-Za-z0-9_" : space
            return "[" + (negated ? "^" : "") + body + "]"
        }, classPredefined: { kind, negated in
            negated ? "\\" + kind.uppercased() : (kind == "d" ? "0-9" : kind == "w" ? "A-Za-z0-9_" : space)
        }, start: "\\A", end: "\\Z", group: { kind in
            switch kind {
            case .capturing: "("
            case .nonCapturing: "(?:"
            case .named(let n): "(?P<g\(n)>"
            }
        }, nonBoundary: "(?:(?<=\\w)(?=\\w)|(?<!\\w)(?!\\w))")  // `re`'s \B never matches in an empty text
    }

    static func hex(_ value: UInt32, _ digits: Int) -> String {
        let text = String(value, radix: 16)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }

    private static func write(
        _ node: Node, literal: (UInt32, Bool) -> String, any: String, predefined: (Character, Bool) -> String,
        classPredefined: ((Character, Bool) -> String)? = nil, start: String, end: String, group: (GroupKind) -> String,
        nonBoundary: String = "\\B"
    ) -> String {
        func go(_ node: Node) -> String {
            switch node {
            case .literal(let scalar): return literal(scalar, false)
            case .any: return any
            case .predefined(let kind, let negated): return predefined(kind, negated)
            case .set(let items, let negated):
                var text = negated ? "[^" : "["
                for item in items {
                    switch item {
                    case .scalar(let scalar): text += literal(scalar, true)
                    case .range(let low, let high): text += literal(low, true) + "-" + literal(high, true)
                    case .predefined(let kind, let negated):
                        text += classPredefined?(kind, negated) ?? ("\\" + (negated ? kind.uppercased() : String(kind)))
                    }
                }
                return text + "]"
            case .group(let inner, let kind): return group(kind) + go(inner) + ")"
            case .concat(let items): return items.map(go).joined()
            case .alternation(let branches): return branches.map(go).joined(separator: "|")
            case .repeated(let inner, let min, let max, let lazy):
                let quantifier: String
                switch (min, max) {
                case (0, nil): quantifier = "*"
                case (1, nil): quantifier = "+"
                case (0, 1): quantifier = "?"
                case (let min, nil): quantifier = "{\(min),}"
                case (let min, let max?) where min == max: quantifier = "{\(min)}"
                case (let min, let max?): quantifier = "{\(min),\(max)}"
                }
                return go(inner) + quantifier + (lazy ? "?" : "")
            case .start: return start
            case .end: return end
            case .boundary(let wanted): return wanted ? "\\b" : nonBoundary
            }
        }
        return go(node)
    }
}

/// Python's `re` in a child process, asked one case at a time: a JSON line in (`{"p": pattern,
/// "t": [texts]}`), a line out — a `0` or `1` per text (`re.search`), `T` when `re` took longer
/// than 0.2 s on the case (its backtracking can take exponential time; the Pike VM cannot), or
/// `E <message>` when `re` refuses the pattern.
///
/// The process's standard error goes to a file of its own: when the process ends (its output
/// closes before an answer), what it wrote there and how it ended are reported, and it is
/// started again once and asked the same case (``answer(_:)``).
final class PythonReference {
    static let python = "/usr/bin/python3"
    static var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: python) }

    /// Every case in one `try`: the 0.2 s timer can fire as `re` returns, before it is disarmed,
    /// and its exception must not end the process (it did once, silently: FAULTS.md, "regex").
    static let script = #"""
        import json, re, signal, sys
        class Slow(Exception): pass
        def slow(*_): raise Slow()
        signal.signal(signal.SIGALRM, slow)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])  # the parent may block it
        for line in sys.stdin:
            case = json.loads(line)
            try:
                pattern = re.compile(case["p"], re.ASCII)
            except (re.error, OverflowError, RecursionError, ValueError) as error:
                print("E", str(error).replace("\n", " "), flush=True)
                continue
            try:
                signal.setitimer(signal.ITIMER_REAL, 0.2)
                try:
                    answer = "".join("1" if pattern.search(text) else "0" for text in case["t"])
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except Slow:
                answer = "T"
            print(answer, flush=True)
        """#

    /// The running child and its pipes (replaced by a restart).
    private var process = Process()
    /// Signalled when the running child exits (its termination handler).
    private var exited = DispatchSemaphore(value: 0)
    private var input = Pipe(), output = Pipe()
    /// The child's standard error.
    private let errors: URL
    private var pending: [UInt8] = []
    /// Restarts left (``answer(_:)`` restarts an ended process once).
    private var restarts = 1
    /// What each ended process said (its standard error) and how it ended, oldest first.
    private(set) var endings: [String] = []

    /// What the child runs (restarted with the same).
    private let arguments: [String]

    /// Python running `arguments` (the regex reference by default; DetectorDifferentialTests
    /// runs `scripts/detector-oracle` through the same harness).
    init(arguments: [String] = ["-c", script]) throws {
        self.arguments = arguments
        errors = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-regex-reference-\(UUID().uuidString).stderr")
        try start()
    }

    deinit {
        try? FileManager.default.removeItem(at: errors)
    }

    private func start() throws {
        process = Process()
        input = Pipe()
        output = Pipe()
        pending = []
        guard FileManager.default.createFile(atPath: errors.path, contents: nil) else {
            throw PythonReferenceError(message: "cannot create \(errors.path)")
        }
        process.executableURL = URL(fileURLWithPath: Self.python)
        process.arguments = arguments
        process.standardInput = input
        process.standardOutput = output
        process.standardError = try FileHandle(forWritingTo: errors)
        let exited = DispatchSemaphore(value: 0)
        self.exited = exited
        process.terminationHandler = { _ in exited.signal() }
        try process.run()
    }

    /// How the ended child ended and what it wrote to its standard error. Its output closed, so
    /// it is exiting; one still running after 5 s is ended (and said to be).
    private func ending() -> String {
        let hung = exited.wait(timeout: .now() + 5) == .timedOut
        if hung { process.terminate() }
        process.waitUntilExit()
        let how = hung ? "closed its output but kept running (ended)" : process.terminationReason == .uncaughtSignal
            ? "killed by signal \(process.terminationStatus)" : "exited with status \(process.terminationStatus)"
        let said = (try? String(contentsOf: errors, encoding: .utf8)) ?? ""
        return said.isEmpty ? "\(how), nothing on stderr" : "\(how), stderr: \(said)"
    }

    /// Python's answer for `reference` (blocking: call off the cooperative pool). A process that
    /// ends before answering is reported on this process's standard error (``endings``) and
    /// started again once, then asked the same case; a second ending throws.
    func answer(_ reference: RegexReference.Case) throws -> String {
        var line = Array(try JSONSerialization.data(withJSONObject: ["p": reference.python, "t": reference.texts]))
        line.append(0x0A)
        while true {
            if let answer = try ask(line) { return answer }
            let ended = ending()
            endings.append(ended)
            try? input.fileHandleForWriting.close()
            guard restarts > 0 else {
                throw PythonReferenceError(message: "python stopped answering again (\(ended)); before: \(endings.dropLast().joined(separator: "; "))")
            }
            restarts -= 1
            FileHandle.standardError.write(Data("regex reference: python stopped answering (\(ended)); started again\n".utf8))
            try start()
        }
    }

    /// Writes `line` and reads one answer line; nil when the process ended first.
    private func ask(_ line: [UInt8]) throws -> String? {
        let writeEnd = input.fileHandleForWriting.fileDescriptor, readEnd = output.fileHandleForReading.fileDescriptor
        var written = 0
        while written < line.count {
            let count = line[written...].withUnsafeBytes { write(writeEnd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count < 0 && errno == EPIPE { return nil }
            guard count > 0 else { throw PythonReferenceError(message: "cannot write to python (errno \(errno))") }
            written += count
        }
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !pending.contains(0x0A) {
            let count = read(readEnd, &buffer, buffer.count)
            // A signal handler of this process (libFuzzer's SIGALRM timer, every few seconds)
            // interrupts a read that waits: not an answer, and not the end of the process.
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return nil }
            pending += buffer[..<count]
        }
        let end = pending.firstIndex(of: 0x0A)!
        defer { pending.removeFirst(end + 1) }
        return String(decoding: pending[..<end], as: UTF8.self)
    }

    /// Python's answers for every case, in order, from a process of their own: the cases are
    /// written all at once (by a thread of their own, while the answers are read), so no answer
    /// waits for a round trip to be scheduled. Blocking: call off the cooperative pool.
    static func answers(_ cases: [RegexReference.Case]) throws -> [String] {
        try answers(cases.map { try JSONSerialization.data(withJSONObject: ["p": $0.python, "t": $0.texts]) })
    }

    /// Python's answer to each request (a JSON document on one line) from `arguments`, in order,
    /// as ``answers(_:)`` asks them. Blocking: call off the cooperative pool.
    static func answers(_ requests: [Data], arguments: [String] = ["-c", script]) throws -> [String] {
        var lines = Data()
        for request in requests {
            lines += request
            lines.append(0x0A)
        }
        let python = try PythonReference(arguments: arguments)
        let input = python.input.fileHandleForWriting, all = lines
        let writer = Thread {
            input.write(all)
            try? input.close()
        }
        writer.start()
        let output = python.output.fileHandleForReading.readDataToEndOfFile()
        python.process.waitUntilExit()
        guard python.process.terminationReason == .exit && python.process.terminationStatus == 0 else {
            throw PythonReferenceError(message: "python ended early: \(python.ending())")
        }
        return String(decoding: output, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
    }

    /// Ends the running child with `signal` and waits for it (tests of the restart).
    func end(signal: Int32) {
        kill(process.processIdentifier, signal)
        process.waitUntilExit()
    }

    /// Ends the child process.
    func close() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }
}

/// The reference process failed.
struct PythonReferenceError: Error {
    var message: String
}

extension RegexReference {
    /// Compares ``Regex`` with Python's answer on `reference`: nil when they agree (or Python
    /// timed out), else what differs.
    static func disagreement(_ reference: Case, python answer: String) -> String? {
        if answer == "T" { return nil }
        if answer.hasPrefix("E") { return "python refused \(reference): \(answer)" }
        let regex: FerryQuality.Regex
        do {
            regex = try FerryQuality.Regex(reference.pattern)
        } catch {
            return "refused \(reference): \(error.message)"
        }
        let ours = reference.texts.map { regex.matches($0) ? "1" : "0" }.joined()
        return ours == answer ? nil : "\(reference): Regex says \(ours), re says \(answer)"
    }
}
