import FerryProtocol

/// A regular expression of the ECMA-262 subset tracking plans use (JSON Schema's `pattern`),
/// compiled once to a Thompson NFA and run as a Pike VM: time linear in the input, whatever the
/// pattern, so no plan can make the agent backtrack for ever.
///
/// Supported: literals, `.`, anchors `^` `$`, `\b` `\B`, classes `[…]` `[^…]` with ranges,
/// escapes `\d \w \s \D \W \S \t \n \r \f \v \0 \xHH \uHHHH` and escaped syntax characters,
/// groups `(…)` `(?:…)` `(?<name>…)`, alternation `|`, quantifiers `* + ? {n} {n,} {n,m}` (and
/// their lazy forms, which match the same strings). Refused with a message: backreferences,
/// lookahead and lookbehind, `\p{…}`, `\c`, `\k`. As JSON Schema says, the pattern is not
/// anchored: it matches when it matches anywhere in the string.
struct Regex: Sendable {
    /// Why a pattern was refused.
    struct SyntaxError: Error {
        var message: String
    }

    fileprivate enum Instruction: Sendable {
        case scalar(UInt32)
        case any
        case set(Int)
        case split(Int, Int)
        case jump(Int)
        case start
        case end
        case boundary(Bool)
        case match
    }

    private let program: [Instruction]
    private let sets: [CharacterSet]
    /// The program starts with `^`: a match can only start at the first position.
    private let anchored: Bool
    /// The most instructions a compiled pattern may have (counted repetition copies its body).
    static let maxProgram = 4096

    init(_ pattern: String) throws(SyntaxError) {
        var parser = RegexParser(scalars: Array(pattern.unicodeScalars.map(\.value)))
        let tree = try parser.parse()
        var compiler = RegexCompiler()
        try compiler.emit(tree)
        compiler.program.append(.match)
        program = compiler.program
        sets = parser.sets
        if case .start = program[0] { anchored = true } else { anchored = false }
    }

    /// Whether the pattern matches anywhere in the valid UTF-8 `text`.
    func matches(_ text: UnsafeRawBufferPointer) -> Bool {
        let count = program.count
        // Everything the run needs in one temporary buffer (on the stack for small patterns): the
        // current and next thread lists, the marks, and the stack of states to visit, which holds
        // at most 2 × count + 1 (each state is visited once per position and pushes at most two).
        return withUnsafeTemporaryAllocation(of: Int32.self, capacity: count * 5 + 2) { scratch in
            let current = scratch.baseAddress!, next = current + count, marks = next + count, stack = marks + count + 1
            marks.initialize(repeating: -1, count: count + 1)
            var currentCount = 0, nextCount = 0
            var generation: Int32 = 0
            var previous: UInt32? = nil
            var index = 0
            // Adds `pc` and what it reaches without consuming input, at this position.
            func add(_ pc: Int, into list: UnsafeMutablePointer<Int32>, _ listCount: inout Int, at position: Int,
                     previous: UInt32?, current scalar: UInt32?) -> Bool {
                var depth = 1
                stack[0] = Int32(truncatingIfNeeded: pc)
                while depth > 0 {
                    depth -= 1
                    let pc = Int(stack[depth])
                    guard marks[pc] != generation else { continue }
                    marks[pc] = generation
                    switch program[pc] {
                    case .jump(let target):
                        stack[depth] = Int32(truncatingIfNeeded: target)
                        depth += 1
                    case .split(let first, let second):
                        stack[depth] = Int32(truncatingIfNeeded: second)
                        stack[depth + 1] = Int32(truncatingIfNeeded: first)
                        depth += 2
                    case .start:
                        if position == 0 { stack[depth] = Int32(truncatingIfNeeded: pc + 1); depth += 1 }
                    case .end:
                        if scalar == nil { stack[depth] = Int32(truncatingIfNeeded: pc + 1); depth += 1 }
                    case .boundary(let wanted):
                        let before = previous.map(Self.isWord) ?? false, after = scalar.map(Self.isWord) ?? false
                        if (before != after) == wanted { stack[depth] = Int32(truncatingIfNeeded: pc + 1); depth += 1 }
                    case .match: return true
                    case .scalar, .any, .set:
                        list[listCount] = Int32(pc)
                        listCount += 1
                    }
                }
                return false
            }
            while true {
                let (scalar, length) = Self.decode(text, at: index)
                // A new thread at every position: the pattern is not anchored. One that starts
                // with `^` can only start at the first: once its threads die, nothing matches.
                if !anchored || index == 0 {
                    if add(0, into: current, &currentCount, at: index, previous: previous, current: scalar) { return true }
                } else if currentCount == 0 {
                    return false
                }
                guard let scalar else { return false }
                generation += 1
                nextCount = 0
                for slot in 0..<currentCount {
                    let pc = Int(current[slot])
                    let advance: Bool
                    switch program[pc] {
                    case .scalar(let wanted): advance = scalar == wanted
                    case .any: advance = scalar != 0x0A && scalar != 0x0D && scalar != 0x2028 && scalar != 0x2029
                    case .set(let set): advance = sets[set].contains(scalar)
                    default: advance = false
                    }
                    if advance {
                        let (after, _) = Self.decode(text, at: index + length)
                        if add(pc + 1, into: next, &nextCount, at: index + length, previous: scalar, current: after) { return true }
                    }
                }
                index += length
                previous = scalar
                // The next position's list becomes the current one (copied: two fixed buffers).
                current.update(from: next, count: nextCount)
                currentCount = nextCount
                // New threads at the next position are added in the same generation, so that
                // states the survivors reached are not added twice.
            }
        }
    }

    /// ``matches(_:)`` over a string.
    func matches(_ text: String) -> Bool {
        var copy = text
        return copy.withUTF8 { matches(UnsafeRawBufferPointer($0)) }
    }

    static func isWord(_ scalar: UInt32) -> Bool {
        (scalar >= 0x30 && scalar <= 0x39) || (scalar >= 0x41 && scalar <= 0x5A) || (scalar >= 0x61 && scalar <= 0x7A) || scalar == 0x5F
    }

    /// The scalar at `index` of valid UTF-8 and its length in bytes; nil at the end.
    static func decode(_ text: UnsafeRawBufferPointer, at index: Int) -> (UInt32?, Int) {
        guard index < text.count else { return (nil, 0) }
        let lead = UInt32(text[index])
        if lead < 0x80 { return (lead, 1) }
        if lead < 0xE0, index + 1 < text.count { return ((lead & 0x1F) << 6 | UInt32(text[index + 1] & 0x3F), 2) }
        if lead < 0xF0, index + 2 < text.count {
            return ((lead & 0x0F) << 12 | UInt32(text[index + 1] & 0x3F) << 6 | UInt32(text[index + 2] & 0x3F), 3)
        }
        if index + 3 < text.count {
            return ((lead & 0x07) << 18 | UInt32(text[index + 1] & 0x3F) << 12 | UInt32(text[index + 2] & 0x3F) << 6
                | UInt32(text[index + 3] & 0x3F), 4)
        }
        return (0xFFFD, text.count - index)
    }
}

/// A character class: ranges, and the predefined classes it includes (possibly negated).
struct CharacterSet: Sendable {
    enum Predefined: Sendable { case digit, word, space }
    var ranges: [ClosedRange<UInt32>] = []
    var predefined: [(Predefined, negated: Bool)] = []
    var negated = false

    func contains(_ scalar: UInt32) -> Bool {
        var found = false
        for range in ranges where range.contains(scalar) { found = true; break }
        if !found {
            for (kind, negated) in predefined where Self.matches(kind, scalar) != negated { found = true; break }
        }
        return found != negated
    }

    static func matches(_ kind: Predefined, _ scalar: UInt32) -> Bool {
        switch kind {
        case .digit: return scalar >= 0x30 && scalar <= 0x39
        case .word: return Regex.isWord(scalar)
        case .space:
            switch scalar {
            case 0x09...0x0D, 0x20, 0xA0, 0x1680, 0x2000...0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF: return true
            default: return false
            }
        }
    }
}

/// The parsed pattern.
private indirect enum RegexNode {
    case empty
    case scalar(UInt32)
    case any
    case set(Int)
    case concat([RegexNode])
    case alternation([RegexNode])
    case repetition(RegexNode, min: Int, max: Int?)
    case start
    case end
    case boundary(Bool)
}

private struct RegexParser {
    let scalars: [UInt32]
    var index = 0
    var sets: [CharacterSet] = []
    var depth = 0

    init(scalars: [UInt32]) { self.scalars = scalars }

    var peek: UInt32? { index < scalars.count ? scalars[index] : nil }

    func fail(_ message: String) -> Regex.SyntaxError { Regex.SyntaxError(message: message) }

    mutating func parse() throws(Regex.SyntaxError) -> RegexNode {
        let node = try alternation()
        if index < scalars.count { throw fail("unbalanced ')' at character \(index + 1)") }
        return node
    }

    mutating func alternation() throws(Regex.SyntaxError) -> RegexNode {
        var branches = [try sequence()]
        while peek == ascii("|") {
            index += 1
            branches.append(try sequence())
        }
        return branches.count == 1 ? branches[0] : .alternation(branches)
    }

    mutating func sequence() throws(Regex.SyntaxError) -> RegexNode {
        var items: [RegexNode] = []
        while let scalar = peek, scalar != ascii("|"), scalar != ascii(")") {
            var atom = try self.atom()
            if let (min, max) = try quantifier() {
                switch atom {
                case .start, .end, .boundary, .empty: throw fail("nothing to repeat at character \(index)")
                default: break
                }
                atom = .repetition(atom, min: min, max: max)
            }
            items.append(atom)
        }
        return items.count == 1 ? items[0] : (items.isEmpty ? .empty : .concat(items))
    }

    mutating func quantifier() throws(Regex.SyntaxError) -> (Int, Int?)? {
        guard let scalar = peek else { return nil }
        var result: (Int, Int?)
        switch scalar {
        case ascii("*"): result = (0, nil); index += 1
        case ascii("+"): result = (1, nil); index += 1
        case ascii("?"): result = (0, 1); index += 1
        case ascii("{"):
            // `{` that does not form {n}, {n,} or {n,m} is a literal (ECMA-262 Annex B).
            let save = index
            index += 1
            guard let min = number() else { index = save; return nil }
            var max: Int? = min
            if peek == ascii(",") {
                index += 1
                max = number()
            }
            guard peek == ascii("}") else { index = save; return nil }
            index += 1
            if let max, max < min { throw fail("quantifier {\(min),\(max)} has its numbers out of order") }
            if min > 1000 || (max ?? 0) > 1000 { throw fail("quantifier bounds over 1000 are not supported") }
            result = (min, max)
        default: return nil
        }
        if peek == ascii("?") { index += 1 }  // lazy: the same strings match
        if let next = peek, next == ascii("*") || next == ascii("+") || next == ascii("?") {
            throw fail("nothing to repeat at character \(index + 1)")
        }
        return result
    }

    mutating func number() -> Int? {
        var value: Int?
        while let scalar = peek, scalar >= 0x30 && scalar <= 0x39 {
            value = min((value ?? 0) * 10 + Int(scalar - 0x30), 100_000)
            index += 1
        }
        return value
    }

    mutating func atom() throws(Regex.SyntaxError) -> RegexNode {
        let scalar = scalars[index]
        index += 1
        switch scalar {
        case ascii("^"): return .start
        case ascii("$"): return .end
        case ascii("."): return .any
        case ascii("*"), ascii("+"), ascii("?"): throw fail("nothing to repeat at character \(index)")
        case ascii("("):
            if peek == ascii("?") {
                index += 1
                switch peek {
                case ascii(":"): index += 1
                case ascii("<"):
                    index += 1
                    if peek == ascii("=") || peek == ascii("!") { throw fail("lookbehind (?<= (?<! is not supported") }
                    // A named group: skip the name.
                    while let name = peek, name != ascii(">") { index += 1 }
                    guard peek == ascii(">") else { throw fail("unterminated group name") }
                    index += 1
                case ascii("="), ascii("!"): throw fail("lookahead (?= (?! is not supported")
                default: throw fail("unknown group syntax (? at character \(index)")
                }
            }
            depth += 1
            guard depth <= 100 else { throw fail("groups nested deeper than 100") }
            let inner = try alternation()
            depth -= 1
            guard peek == ascii(")") else { throw fail("missing ')'") }
            index += 1
            return inner
        case ascii("["): return try characterClass()
        case ascii("\\"): return try escape(inClass: false)
        default: return .scalar(scalar)
        }
    }

    mutating func escape(inClass: Bool) throws(Regex.SyntaxError) -> RegexNode {
        guard let scalar = peek else { throw fail("'\\' at the end of the pattern") }
        index += 1
        func predefined(_ kind: CharacterSet.Predefined, _ negated: Bool) -> RegexNode {
            sets.append(CharacterSet(predefined: [(kind, negated)]))
            return .set(sets.count - 1)
        }
        switch scalar {
        case ascii("d"): return predefined(.digit, false)
        case ascii("D"): return predefined(.digit, true)
        case ascii("w"): return predefined(.word, false)
        case ascii("W"): return predefined(.word, true)
        case ascii("s"): return predefined(.space, false)
        case ascii("S"): return predefined(.space, true)
        case ascii("b"): return inClass ? .scalar(0x08) : .boundary(true)
        case ascii("B"):
            if inClass { throw fail("\\B in a class") }
            return .boundary(false)
        case ascii("t"): return .scalar(0x09)
        case ascii("n"): return .scalar(0x0A)
        case ascii("v"): return .scalar(0x0B)
        case ascii("f"): return .scalar(0x0C)
        case ascii("r"): return .scalar(0x0D)
        case ascii("0"):
            if let next = peek, next >= 0x30 && next <= 0x39 { throw fail("octal escapes are not supported") }
            return .scalar(0)
        case ascii("1")...ascii("9"): throw fail("backreferences (\\\(Character(Unicode.Scalar(scalar)!))) are not supported")
        case ascii("x"): return .scalar(try hex(2))
        case ascii("u"):
            if peek == ascii("{") { throw fail("\\u{…} needs the u flag, which JSON Schema patterns do not have; use \\uHHHH") }
            return .scalar(try hex(4))
        case ascii("p"), ascii("P"): throw fail("Unicode property escapes \\p{…} are not supported")
        case ascii("c"): throw fail("control escapes \\c are not supported")
        case ascii("k"): throw fail("named backreferences \\k are not supported")
        default:
            // An escaped syntax character (or any other non-letter) stands for itself.
            let isLetter = (scalar >= 0x41 && scalar <= 0x5A) || (scalar >= 0x61 && scalar <= 0x7A)
            if isLetter { throw fail("unknown escape \\\(Character(Unicode.Scalar(scalar)!))") }
            return .scalar(scalar)
        }
    }

    mutating func hex(_ count: Int) throws(Regex.SyntaxError) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<count {
            guard let scalar = peek, scalar < 0x80, let digit = JSONScan.hexValue(UInt8(scalar)) else {
                throw fail("expected \(count) hex digits at character \(index + 1)")
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    mutating func characterClass() throws(Regex.SyntaxError) -> RegexNode {
        var set = CharacterSet()
        if peek == ascii("^") {
            set.negated = true
            index += 1
        }
        while true {
            guard let scalar = peek else { throw fail("missing ']'") }
            if scalar == ascii("]") {
                index += 1
                break
            }
            let low = try classAtom()
            // A range `a-z` (a `-` first, last or next to a class escape is a literal).
            if peek == ascii("-"), index + 1 < scalars.count, scalars[index + 1] != ascii("]") {
                index += 1
                let high = try classAtom()
                guard case .scalar(let from) = low, case .scalar(let to) = high else {
                    throw fail("a range in a class cannot use \\d, \\w or \\s")
                }
                guard from <= to else { throw fail("range out of order in a character class") }
                set.ranges.append(from...to)
                continue
            }
            switch low {
            case .scalar(let single): set.ranges.append(single...single)
            case .set(let inner):
                set.predefined += sets[inner].predefined
            default: break
            }
        }
        sets.append(set)
        return .set(sets.count - 1)
    }

    mutating func classAtom() throws(Regex.SyntaxError) -> RegexNode {
        let scalar = scalars[index]
        index += 1
        if scalar == ascii("\\") {
            if peek == ascii("-") { index += 1; return .scalar(ascii("-")) }
            return try escape(inClass: true)
        }
        return .scalar(scalar)
    }

    func ascii(_ character: Unicode.Scalar) -> UInt32 { character.value }
}

private struct RegexCompiler {
    var program: [Regex.Instruction] = []

    mutating func emit(_ node: RegexNode) throws(Regex.SyntaxError) {
        guard program.count < Regex.maxProgram else {
            throw Regex.SyntaxError(message: "the pattern compiles to more than \(Regex.maxProgram) steps (large counted repetition)")
        }
        switch node {
        case .empty: break
        case .scalar(let scalar): program.append(.scalar(scalar))
        case .any: program.append(.any)
        case .set(let set): program.append(.set(set))
        case .start: program.append(.start)
        case .end: program.append(.end)
        case .boundary(let wanted): program.append(.boundary(wanted))
        case .concat(let items): for item in items { try emit(item) }
        case .alternation(let branches):
            var jumps: [Int] = []
            for (position, branch) in branches.enumerated() {
                if position < branches.count - 1 {
                    let split = program.count
                    program.append(.split(split + 1, 0))
                    try emit(branch)
                    jumps.append(program.count)
                    program.append(.jump(0))
                    program[split] = .split(split + 1, program.count)
                } else {
                    try emit(branch)
                }
            }
            for jump in jumps { program[jump] = .jump(program.count) }
        case .repetition(let body, let min, let max):
            for _ in 0..<min { try emit(body) }
            if let max {
                // Optional copies: each may be skipped to the end.
                var splits: [Int] = []
                for _ in min..<max {
                    splits.append(program.count)
                    program.append(.split(program.count + 1, 0))
                    try emit(body)
                }
                for split in splits { program[split] = .split(split + 1, program.count) }
            } else {
                let split = program.count
                program.append(.split(split + 1, 0))
                try emit(body)
                program.append(.jump(split))
                program[split] = .split(split + 1, program.count)
            }
        }
    }
}
