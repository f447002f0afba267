import Foundation
import Testing
@testable import FerryProtocol

/// Ferry's JSON reader (``JSONTape``) against an independent parser: Python's `json`, through
/// `scripts/json-oracle` (which applies Ferry's documented refusals — unpaired surrogates,
/// `NaN`, nesting past 64 — to Python's answer). Thousands of generated documents, valid and
/// mutated, must get the same accept/refuse and the same values (member order, repeated names,
/// decoded strings, numbers to the bit).
@Suite struct JSONDifferentialTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// What the oracle prints for `bytes`, computed from the reader's tape (the same notation).
    static func canonical(_ bytes: [UInt8]) -> String {
        bytes.withUnsafeBytes { raw in
            guard UTF8Validation.isValid(raw), let tape = try? JSONTape.parse(raw) else { return "!" }
            var out = ""
            var index = 0
            func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
            func value() {
                let node = tape.nodes[index]
                index += 1
                switch node.kind {
                case .object:
                    out += "{"
                    for _ in 0..<node.count {
                        out += "\"" + hex(JSONTape.decodedString(tape.nodes[index], in: raw)) + "\":"
                        index += 1
                        value()
                        out += ","
                    }
                    out += "}"
                case .array:
                    out += "["
                    for _ in 0..<node.count {
                        value()
                        out += ","
                    }
                    out += "]"
                case .string: out += "\"" + hex(JSONTape.decodedString(node, in: raw)) + "\""
                case .number: out += "#" + String(format: "%016llx", JSONTape.double(node, in: raw).bitPattern)
                case .true: out += "t"
                case .false: out += "f"
                case .null: out += "n"
                }
            }
            value()
            return out
        }
    }

    /// The oracle's line for each of `inputs`.
    static func oracle(_ inputs: [[UInt8]]) throws -> [String] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", repository.appendingPathComponent("scripts/json-oracle").path]
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        let text = inputs.map { $0.map { String(format: "%02x", $0) }.joined() }.joined(separator: "\n") + "\n"
        // Written from another thread: the oracle answers while it reads, and both pipes are finite.
        let writer = Thread {
            input.fileHandleForWriting.write(Data(text.utf8))
            try? input.fileHandleForWriting.close()
        }
        writer.start()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "scripts/json-oracle failed")
        return String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
    }

    /// Compares the reader with the oracle over `inputs`; returns the mismatches, described.
    static func mismatches(_ inputs: [[UInt8]]) throws -> [String] {
        let expected = try oracle(inputs)
        #expect(expected.count == inputs.count)
        var found: [String] = []
        for (input, answer) in zip(inputs, expected) {
            let mine = canonical(input)
            if mine != answer {
                found.append("\(String(decoding: input, as: UTF8.self).debugDescription) \(input): reader \(mine), python \(answer)")
            }
        }
        return found
    }

    @Test("the cases the readers used to disagree on, and RFC 8259's corners")
    func corners() throws {
        let cases = [
            #"{"locale":"en","x":"\ud800"}"#, #""\ud800""#, #""\udc00""#, #""\ud800\u0041""#, #""\ud83d\ude00""#, #""\uD83D\uDE00""#,
            #""\ud83d\ud83d""#, #""\ude00\ud83d""#, #"{"a":1,}"#, "[1,2", "{} {}", "{\"a\":01}", "-0", "-", "1.", ".5", "1e", "1e+",
            "1E-5", "1e400", "-1e400", "1e-400", "123456789012345678901234567890", "0.1", "2.2250738585072011e-308",
            "9007199254740993", "NaN", "Infinity", "-Infinity", "nul", "tru", " true ", "\u{FEFF}{}", "\"\u{1}\"", "\"\u{7F}\"",
            "\"\\x\"", "\"\\u12\"", "\"\\u12g4\"", "\"é😀中\"", "{\"a\":1,\"a\":2}", "\u{0C}1", "1\u{A0}", "[\n\t\r ]", "",
            String(repeating: "[", count: 64) + String(repeating: "]", count: 64),
            String(repeating: "[", count: 65) + String(repeating: "]", count: 65),
            String(repeating: "{\"a\":", count: 64) + "1" + String(repeating: "}", count: 64),
            String(repeating: "{\"a\":", count: 65) + "1" + String(repeating: "}", count: 65),
        ]
        var inputs = cases.map { Array($0.utf8) }
        // Not UTF-8: a surrogate encoded in UTF-8, an overlong slash, a lone continuation byte.
        inputs += [[0x22, 0xED, 0xA0, 0x80, 0x22], [0x22, 0xC0, 0xAF, 0x22], [0x22, 0x80, 0x22], [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22]]
        let found = try Self.mismatches(inputs)
        #expect(found.isEmpty, "\(found.count) mismatches:\n\(found.prefix(20).joined(separator: "\n"))")
    }

    @Test("generated documents and their mutations: same accept/refuse, same values", arguments: [1, 2, 3])
    func generated(seed: UInt64) throws {
        var generator = JSONGenerator(seed: seed)
        var inputs: [[UInt8]] = []
        for _ in 0..<2000 {
            let document = generator.document()
            inputs.append(document)
            inputs.append(generator.mutated(document))
        }
        let found = try Self.mismatches(inputs)
        #expect(found.isEmpty, "\(found.count) mismatches:\n\(found.prefix(20).joined(separator: "\n"))")
        // The generator makes both kinds in earnest.
        let accepted = inputs.filter { Self.canonical($0) != "!" }.count
        #expect(accepted > inputs.count / 4 && accepted < inputs.count * 3 / 4, "\(accepted) of \(inputs.count) accepted")
    }
}

/// Random JSON-ish documents (seeded, so a failure repeats): mostly valid, with every kind of
/// value, escape, number form and whitespace, some near the depth limit, and now and then an
/// invalid token; ``mutated(_:)`` breaks one with a few byte edits.
struct JSONGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed &* 0x9E37_79B9_7F4A_7C15 }

    /// SplitMix64.
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
    mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
    mutating func pick<T>(_ items: [T]) -> T { items[below(items.count)] }

    mutating func document() -> [UInt8] {
        var out: [UInt8] = []
        space(&out)
        if chance(3) {
            // Around the depth limit.
            let depth = 62 + below(5)
            for _ in 0..<depth { out += Array((chance(50) ? "[" : "{\"k\":").utf8) }
            value(&out, depth: 99)
            // Close in reverse: find what was opened.
            var closers: [UInt8] = []
            var index = 0
            while index < out.count {
                if out[index] == UInt8(ascii: "[") { closers.append(UInt8(ascii: "]")) }
                if out[index] == UInt8(ascii: "{") { closers.append(UInt8(ascii: "}")) }
                index += 1
            }
            out += closers.reversed()
        } else {
            value(&out, depth: 0)
        }
        space(&out)
        return out
    }

    mutating func space(_ out: inout [UInt8]) {
        if chance(60) { return }
        out += Array(pick(["", " ", "\n", "\t", "\r\n", "  ", " \n  "]).utf8)
        if chance(1) { out += Array(pick(["\u{0C}", "\u{A0}", "\u{0B}"]).utf8) }
    }

    mutating func value(_ out: inout [UInt8], depth: Int) {
        let container = depth < 6 && chance(depth == 0 ? 80 : 35)
        if container {
            let object = chance(55)
            out.append(UInt8(ascii: object ? "{" : "["))
            let count = below(5)
            for position in 0..<count {
                if position > 0 { out.append(UInt8(ascii: ",")) }
                space(&out)
                if object {
                    string(&out)
                    space(&out)
                    out.append(UInt8(ascii: ":"))
                    space(&out)
                }
                value(&out, depth: depth + 1)
                space(&out)
            }
            if chance(1) { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: object ? "}" : "]"))
            return
        }
        switch below(10) {
        case 0...3: string(&out)
        case 4...7: number(&out)
        default:
            out += Array((chance(2) ? pick(["tru", "nul", "NaN", "Infinity", "True", "falsey"]) : pick(["true", "false", "null"])).utf8)
        }
    }

    mutating func string(_ out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for _ in 0..<below(12) {
            switch below(20) {
            case 0...7: out.append(pick(Array("abcXYZ _-.,;".utf8)))
            case 8...9: out.append(pick(Array("0123456789:@".utf8)))
            case 10: out += Array(pick(["\\n", "\\t", "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\r"]).utf8)
            case 11: out += Array(String(format: "\\u%04x", pick([0x41, 0xE9, 0x4E2D, 0x1F, 0x0, 0xFFFF, 0x7F, 0x2028])).utf8)
            case 12: out += Array(String(format: "\\u%04X\\u%04x", 0xD800 + below(0x400), 0xDC00 + below(0x400)).utf8)
            case 13: out += Array(pick(["é", "😀", "中", "\u{7F}", "\u{2028}"]).utf8)
            case 14 where chance(15): out += Array(String(format: "\\u%04x", 0xD800 + below(0x800)).utf8)  // unpaired
            case 15 where chance(10): out.append(UInt8(below(0x20)))  // a raw control byte
            case 16 where chance(10): out += Array(pick(["\\x", "\\u12", "\\U0041", "\\'"]).utf8)
            default: out.append(UInt8(ascii: "k"))
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    mutating func number(_ out: inout [UInt8]) {
        var text = chance(30) ? "-" : ""
        switch below(6) {
        case 0: text += "0"
        case 1: text += String(below(10))
        case 2: text += String(1 + below(9)) + String((0..<below(25)).map { _ in Character(String(below(10))) })
        case 3: text += String(next() % 10_000_000_000_000_000)
        case 4: text += chance(20) ? pick(["01", "00", ".5", "", "+1", "0x1"]) : "1"
        default: text += String(1 + below(9))
        }
        if chance(30) { text += "." + (chance(3) ? "" : String((0..<(1 + below(20))).map { _ in Character(String(below(10))) })) }
        if chance(25) {
            text += pick(["e", "E"]) + pick(["", "+", "-"])
            text += chance(3) ? "" : String(pick([below(10), below(400), 300 + below(30), 1000]))
        }
        out += Array(text.utf8)
    }

    /// `document` with one to three byte edits: a byte deleted, inserted, replaced, or the end cut.
    mutating func mutated(_ document: [UInt8]) -> [UInt8] {
        var out = document
        let alphabet = Array("{}[],:\"\\0123456789-+.eEtfnu \n".utf8) + [0x00, 0x1F, 0x7F, 0xC3, 0xA9, 0xFF]
        for _ in 0..<(1 + below(3)) {
            let at = out.isEmpty ? 0 : below(out.count)
            switch below(4) {
            case 0 where !out.isEmpty: out.remove(at: at)
            case 1: out.insert(pick(alphabet), at: at)
            case 2 where !out.isEmpty: out[at] = pick(alphabet)
            default: out.removeLast(out.isEmpty ? 0 : below(min(out.count, 4)) + 1)
            }
        }
        return out
    }
}
