@testable import FerryProtocol
import Testing

/// The parser's eight-bytes-at-a-time string scan (``JSONScan``) against a plain byte-by-byte
/// reference: where a string ends, whether it holds an escape, whether it is a detector
/// candidate, and where a bad one fails, for every trigger at every offset of the first two
/// words, strings that end exactly at a word boundary, non-ASCII UTF-8 whose low seven bits look
/// like a trigger, and strings that end the input.
@Suite struct JSONScanTests {
    enum Outcome: Equatable, CustomStringConvertible {
        case string(end: Int, escaped: Bool, candidate: Bool)
        case failure(offset: Int)

        var description: String {
            switch self {
            case .string(let end, let escaped, let candidate): "string(end: \(end), escaped: \(escaped), candidate: \(candidate))"
            case .failure(let offset): "failure(offset: \(offset))"
            }
        }
    }

    /// The string that starts after the quote at `quote`, one byte at a time (valid escapes
    /// only: the table writes no other).
    static func reference(_ document: [UInt8], quote: Int) -> Outcome {
        var index = quote + 1
        var escaped = false, candidate = false
        while index < document.count {
            let byte = document[index]
            if byte == UInt8(ascii: "\"") { return .string(end: index, escaped: escaped, candidate: candidate) }
            if byte < 0x20 { return .failure(offset: index) }
            if (0x30...0x3A).contains(byte) || byte == UInt8(ascii: "@") { candidate = true }
            if byte == UInt8(ascii: "\\") {
                escaped = true
                if document[index + 1] == UInt8(ascii: "u") {
                    candidate = true
                    let unit = Int(String(decoding: document[(index + 2)..<(index + 6)], as: UTF8.self), radix: 16)!
                    index += (0xD800..<0xDC00).contains(unit) ? 12 : 6
                } else {
                    index += 2
                }
                continue
            }
            index += 1
        }
        return .failure(offset: index)
    }

    /// What the parser made of the string at `quote` in `document`.
    static func parsed(_ document: [UInt8], quote: Int, node: Int) -> Outcome {
        do {
            let tape = try JSONTape.parse(document)
            let string = tape.nodes[node]
            guard string.kind == .string, Int(string.start) == quote + 1 else { return .failure(offset: -1) }
            return .string(end: Int(string.end), escaped: string.escaped, candidate: string.candidate)
        } catch {
            return .failure(offset: error.offset)
        }
    }

    /// Bytes that end a plain run or make a string a candidate, and bytes that must not:
    /// escapes, controls, every candidate class, UTF-8 sequences whose bytes have the low seven
    /// bits of a quote (C2 A2), a backslash (C3 9C is 0x1C, a control; C5 9C is 0x5C), a digit
    /// (C2 B0) or '@' (C3 80 and C1-free C4 80), and ordinary punctuation next to the classes.
    static let triggers: [[UInt8]] = [
        "0", "5", "9", ":", "@", #"\""#, #"\\"#, #"\/"#, #"\n"#, #"\u00e9"#, #"\u0041"#, #"\ud83d\ude00"#,
        "/", ";", "?", "A", "`", " ", "\u{7F}", "é", "°", "¢", "Ü", "Ŝ", "À", "Ā", "€", "😀",
    ].map { Array($0.utf8) } + [[0x01], [0x1F], [0x09]]

    /// What may follow the trigger later in the string: nothing, a second candidate byte, or a
    /// byte that must still be seen once the string is known to be a candidate.
    static let followers: [[UInt8]] = ["", "@", "7", #"\""#, #"\\"#, #"\t"#].map { Array($0.utf8) } + [[0x02]]

    @Test(arguments: triggers, followers)
    func scanMatchesTheByteByByteReference(trigger: [UInt8], follower: [UInt8]) {
        let x = UInt8(ascii: "x"), y = UInt8(ascii: "y")
        var mismatches: [String] = []
        for offset in 0..<16 {
            for after in [0, 1, 7, 8, 16] {
                for gap in follower.isEmpty ? [0] : [0, 9] {
                    var text = [UInt8](repeating: x, count: offset) + trigger + [UInt8](repeating: y, count: after)
                    if !follower.isEmpty { text += [UInt8](repeating: y, count: gap) + follower }
                    // In an object with more after it, alone at the end of the input (the last
                    // bytes read one at a time), and in an array after a number.
                    let shapes: [(prefix: String, suffix: String, node: Int)] = [
                        (#"{"k":""#, #"","n":1}"#, 2), (#"""#, #"""#, 0), (#"[12,""#, #""]"#, 2),
                    ]
                    for shape in shapes {
                        let document = Array(shape.prefix.utf8) + text + Array(shape.suffix.utf8)
                        let quote = shape.prefix.utf8.count - 1
                        let expected = Self.reference(document, quote: quote)
                        let found = Self.parsed(document, quote: quote, node: shape.node)
                        if found != expected {
                            mismatches.append("\(String(decoding: document, as: UTF8.self).debugDescription): \(found), expected \(expected)")
                        }
                    }
                }
            }
        }
        #expect(mismatches.isEmpty, "\(mismatches.prefix(5))")
    }

    /// Strings of plain bytes only, of every length up to three words, end where the reference
    /// says, and are candidates exactly when they hold a digit, ':' or '@'.
    @Test(arguments: ["x", "7", "x y", "€uro"])
    func plainStringsOfEveryLength(unit: String) {
        for length in 0..<25 {
            let text = Array(String(repeating: unit, count: length).utf8)
            let document = Array(#"{"k":""#.utf8) + text + Array(#""}"#.utf8)
            #expect(Self.parsed(document, quote: 5, node: 2) == Self.reference(document, quote: 5))
        }
    }

    /// The word tests on their own: each byte value at each position of a word is flagged
    /// exactly when its class says so (a stop; for `attention` also 0x30…0x40, the candidate
    /// bytes and the rare `;<=>?` between them), whatever the other bytes are.
    @Test func wordTestsAreExactPerByte() {
        var mismatches: [String] = []
        for fill in [UInt8(ascii: "x"), 0x80, 0xFF, 0x22, 0x35] {
            for value in UInt8.min...UInt8.max {
                for position in 0..<8 {
                    var bytes = [UInt8](repeating: fill, count: 8)
                    bytes[position] = value
                    let word = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
                    let stops = JSONScan.stops(word), attention = JSONScan.attention(word)
                    for index in 0..<8 {
                        let byte = bytes[index]
                        let stop = byte < 0x20 || byte == 0x22 || byte == 0x5C
                        let bit: UInt64 = 0x80 << UInt64(index * 8)
                        if (stops & bit != 0) != stop || (attention & bit != 0) != (stop || (0x30...0x40).contains(byte)) {
                            mismatches.append("byte \(byte) at \(index) of \(bytes)")
                        }
                    }
                }
            }
        }
        #expect(mismatches.isEmpty, "\(mismatches.prefix(5))")
    }

    /// A number's value (``JSONTape/double(_:in:)``: plain integers, Clinger's fast path, else
    /// the standard library's parse) is bit for bit what `Double(String)` reads, over numbers of
    /// every shape: signs, leading zeros in fractions, 1 to 20 digits, exponents to ±30.
    @Test func numbersAreReadAsTheStandardLibraryReadsThem() throws {
        var state: UInt64 = 0x00C0_FFEE
        func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        func digits(_ count: Int, leading: Bool) -> String {
            (0..<count).map { position in String(position == 0 && !leading ? 1 + next() % 9 : next() % 10) }.joined()
        }
        var mismatches: [String] = []
        for _ in 0..<20_000 {
            var text = next() % 3 == 0 ? "-" : ""
            text += next() % 4 == 0 ? "0" : digits(1 + Int(next() % 17), leading: false)
            if next() % 2 == 0 { text += "." + digits(1 + Int(next() % 20), leading: true) }
            if next() % 3 == 0 { text += ["e", "E", "e+", "e-", "E-"][Int(next() % 5)] + String(next() % 31) }
            let bytes = Array(text.utf8)
            let tape = try JSONTape.parse(bytes)
            let value = bytes.withUnsafeBytes { JSONTape.double(tape.nodes[0], in: $0) }
            let expected = try #require(Double(text), "\(text)")
            if value.bitPattern != expected.bitPattern { mismatches.append("\(text): \(value) ≠ \(expected)") }
        }
        #expect(mismatches.isEmpty, "\(mismatches.prefix(5))")
    }
}
