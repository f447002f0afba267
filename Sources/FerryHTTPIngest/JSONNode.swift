/// A JSON value parsed from a request body, with the byte range each value came from: the
/// mapping to Ferry's event copies `properties`, `traits` and `context` as the application sent
/// them (no re-encoding: key order and number spelling are kept), and reads the scalar fields.
///
/// Strict RFC 8259: no comments, no trailing commas, no control characters in strings, escapes
/// checked (a lone surrogate is refused), nesting at most ``JSONParser/maxDepth``. The body's
/// UTF-8 is checked before parsing (``SegmentRequest``).
package indirect enum JSONNode: Sendable {
    /// An object: its members in order (a repeated key keeps its last value, as JavaScript's
    /// `JSON.parse` does, when read through ``subscript(_:)``).
    case object([(key: String, value: JSONNode)], Range<Int>)
    /// An array.
    case array([JSONNode], Range<Int>)
    /// A string, unescaped.
    case string(String, Range<Int>)
    /// A number, as its text spans it.
    case number(Range<Int>)
    /// `true` or `false`.
    case bool(Bool, Range<Int>)
    /// `null`.
    case null(Range<Int>)

    /// The bytes of the body the value was parsed from.
    package var range: Range<Int> {
        switch self {
        case .object(_, let range), .array(_, let range), .string(_, let range), .number(let range), .bool(_, let range),
             .null(let range): range
        }
    }

    /// The value of member `key` of an object (the last one if repeated); nil otherwise.
    package subscript(_ key: String) -> JSONNode? {
        guard case .object(let members, _) = self else { return nil }
        return members.last { $0.key == key }?.value
    }

    /// The string, if the value is one.
    package var string: String? {
        if case .string(let value, _) = self { return value }
        return nil
    }

    /// The kind of the value, for messages (`object`, `array`, `string`, `number`, `boolean`, `null`).
    package var kind: String {
        switch self {
        case .object: "object"
        case .array: "array"
        case .string: "string"
        case .number: "number"
        case .bool: "boolean"
        case .null: "null"
        }
    }
}

/// Why a body is not JSON: what was expected, and at which byte.
package struct JSONParseError: Error, Sendable, CustomStringConvertible {
    /// What is wrong.
    package var message: String
    /// The byte offset where it was found.
    package var offset: Int
    package var description: String { "\(message) at byte \(offset)" }
}

/// Parses one JSON text into a ``JSONNode`` tree.
package struct JSONParser {
    /// The deepest nesting accepted (objects and arrays), so a hostile body cannot exhaust the stack.
    package static let maxDepth = 64

    private let bytes: [UInt8]
    private var at = 0
    private var depth = 0
    /// The values nested deeper than ``maxDepth``: checked without recursion, kept out of the tree.
    private var tooDeep: [Range<Int>] = []

    private init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// The value `bytes` holds (one value, whitespace around it allowed); nesting deeper than
    /// ``maxDepth`` is an error.
    package static func parse(_ bytes: [UInt8]) throws(JSONParseError) -> JSONNode {
        let (value, tooDeep) = try parseKeepingDeep(bytes)
        if let first = tooDeep.first { throw JSONParseError(message: "nesting deeper than \(maxDepth)", offset: first.lowerBound) }
        return value
    }

    /// The value `bytes` holds, and the byte ranges of the values nested deeper than
    /// ``maxDepth``: they are checked to be JSON (without recursion, so the stack stays bounded)
    /// but stand in the tree as `null`; a caller refuses whatever contains one. A body that is
    /// not JSON anywhere is still an error.
    package static func parseKeepingDeep(_ bytes: [UInt8]) throws(JSONParseError) -> (JSONNode, tooDeep: [Range<Int>]) {
        var parser = JSONParser(bytes)
        parser.skipSpace()
        let value = try parser.value()
        parser.skipSpace()
        guard parser.at == bytes.count else { throw parser.fail("unexpected text after the JSON value") }
        return (value, parser.tooDeep)
    }

    /// Skips the object or array at `at`, nested below the depth limit, checking its syntax with
    /// an explicit stack instead of recursion; records its range and stands for it as `null`.
    private mutating func skipTooDeep() throws(JSONParseError) -> JSONNode {
        enum Expect { case value, valueOrClose, member, memberOrClose, commaOrClose }
        let start = at
        var objects: [Bool] = []
        var expect = Expect.value
        while true {
            skipSpace()
            guard at < bytes.count else { throw fail("unexpected end of the body") }
            let byte = bytes[at]
            switch expect {
            case .value, .valueOrClose:
                if expect == .valueOrClose, byte == UInt8(ascii: "]") {
                    at += 1
                    objects.removeLast()
                    expect = .commaOrClose
                } else if byte == UInt8(ascii: "{") {
                    at += 1
                    objects.append(true)
                    expect = .memberOrClose
                    continue
                } else if byte == UInt8(ascii: "[") {
                    at += 1
                    objects.append(false)
                    expect = .valueOrClose
                    continue
                } else {
                    // A scalar: never recursive.
                    _ = try value()
                    expect = .commaOrClose
                }
            case .member, .memberOrClose:
                if expect == .memberOrClose, byte == UInt8(ascii: "}") {
                    at += 1
                    objects.removeLast()
                    expect = .commaOrClose
                } else {
                    guard byte == UInt8(ascii: "\"") else { throw fail("expected a member name") }
                    _ = try string()
                    skipSpace()
                    guard at < bytes.count, bytes[at] == UInt8(ascii: ":") else { throw fail("expected ':'") }
                    at += 1
                    expect = .value
                    continue
                }
            case .commaOrClose:
                guard let inObject = objects.last else { break }
                if byte == UInt8(ascii: ",") {
                    at += 1
                    expect = inObject ? .member : .value
                    continue
                }
                guard byte == UInt8(ascii: inObject ? "}" : "]") else { throw fail(inObject ? "expected ',' or '}'" : "expected ',' or ']'") }
                at += 1
                objects.removeLast()
            }
            if objects.isEmpty {
                tooDeep.append(start..<at)
                return .null(start..<at)
            }
            expect = .commaOrClose
        }
    }

    private func fail(_ message: String) -> JSONParseError { JSONParseError(message: message, offset: at) }

    private mutating func skipSpace() {
        while at < bytes.count, bytes[at] == 0x20 || bytes[at] == 0x0A || bytes[at] == 0x0D || bytes[at] == 0x09 { at += 1 }
    }

    private mutating func value() throws(JSONParseError) -> JSONNode {
        guard at < bytes.count else { throw fail("unexpected end of the body") }
        switch bytes[at] {
        case UInt8(ascii: "{"): return try object()
        case UInt8(ascii: "["): return try array()
        case UInt8(ascii: "\""):
            let start = at
            let text = try string()
            return .string(text, start..<at)
        case UInt8(ascii: "t"): return try literal("true", .bool(true, at..<(at + 4)))
        case UInt8(ascii: "f"): return try literal("false", .bool(false, at..<(at + 5)))
        case UInt8(ascii: "n"): return try literal("null", .null(at..<(at + 4)))
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw fail("unexpected character '\(Self.printable(bytes[at]))'")
        }
    }

    private static func printable(_ byte: UInt8) -> String {
        (0x21...0x7E).contains(byte) ? String(UnicodeScalar(byte)) : "\\x" + String(byte, radix: 16)
    }

    private mutating func literal(_ word: StaticString, _ node: JSONNode) throws(JSONParseError) -> JSONNode {
        let count = word.utf8CodeUnitCount
        guard at + count <= bytes.count,
              word.withUTF8Buffer({ Array($0) }) == Array(bytes[at..<(at + count)]) else { throw fail("invalid literal") }
        at += count
        return node
    }

    private mutating func number() throws(JSONParseError) -> JSONNode {
        let start = at
        if bytes[at] == UInt8(ascii: "-") { at += 1 }
        func digits() -> Int {
            let from = at
            while at < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[at]) { at += 1 }
            return at - from
        }
        guard at < bytes.count else { throw fail("invalid number") }
        if bytes[at] == UInt8(ascii: "0") {
            at += 1
        } else if digits() == 0 {
            throw fail("invalid number")
        }
        if at < bytes.count, bytes[at] == UInt8(ascii: ".") {
            at += 1
            guard digits() > 0 else { throw fail("invalid number") }
        }
        if at < bytes.count, bytes[at] == UInt8(ascii: "e") || bytes[at] == UInt8(ascii: "E") {
            at += 1
            if at < bytes.count, bytes[at] == UInt8(ascii: "+") || bytes[at] == UInt8(ascii: "-") { at += 1 }
            guard digits() > 0 else { throw fail("invalid number") }
        }
        return .number(start..<at)
    }

    private mutating func object() throws(JSONParseError) -> JSONNode {
        guard depth < Self.maxDepth else { return try skipTooDeep() }
        let start = at
        depth += 1
        defer { depth -= 1 }
        at += 1
        var members: [(key: String, value: JSONNode)] = []
        skipSpace()
        if at < bytes.count, bytes[at] == UInt8(ascii: "}") {
            at += 1
            return .object(members, start..<at)
        }
        while true {
            skipSpace()
            guard at < bytes.count, bytes[at] == UInt8(ascii: "\"") else { throw fail("expected a member name") }
            let key = try string()
            skipSpace()
            guard at < bytes.count, bytes[at] == UInt8(ascii: ":") else { throw fail("expected ':'") }
            at += 1
            skipSpace()
            members.append((key, try value()))
            skipSpace()
            guard at < bytes.count else { throw fail("unexpected end of the body") }
            if bytes[at] == UInt8(ascii: ",") {
                at += 1
                continue
            }
            guard bytes[at] == UInt8(ascii: "}") else { throw fail("expected ',' or '}'") }
            at += 1
            return .object(members, start..<at)
        }
    }

    private mutating func array() throws(JSONParseError) -> JSONNode {
        guard depth < Self.maxDepth else { return try skipTooDeep() }
        let start = at
        depth += 1
        defer { depth -= 1 }
        at += 1
        var elements: [JSONNode] = []
        skipSpace()
        if at < bytes.count, bytes[at] == UInt8(ascii: "]") {
            at += 1
            return .array(elements, start..<at)
        }
        while true {
            skipSpace()
            elements.append(try value())
            skipSpace()
            guard at < bytes.count else { throw fail("unexpected end of the body") }
            if bytes[at] == UInt8(ascii: ",") {
                at += 1
                continue
            }
            guard bytes[at] == UInt8(ascii: "]") else { throw fail("expected ',' or ']'") }
            at += 1
            return .array(elements, start..<at)
        }
    }

    /// A string starting at the opening quote; `at` ends after the closing one.
    private mutating func string() throws(JSONParseError) -> String {
        at += 1
        let start = at
        // Fast path: no escapes.
        while at < bytes.count, bytes[at] != UInt8(ascii: "\""), bytes[at] != UInt8(ascii: "\\"), bytes[at] >= 0x20 { at += 1 }
        guard at < bytes.count else { throw fail("unterminated string") }
        if bytes[at] == UInt8(ascii: "\"") {
            defer { at += 1 }
            return String(decoding: bytes[start..<at], as: UTF8.self)
        }
        var out = Array(bytes[start..<at])
        while true {
            guard at < bytes.count else { throw fail("unterminated string") }
            let byte = bytes[at]
            if byte == UInt8(ascii: "\"") {
                at += 1
                return String(decoding: out, as: UTF8.self)
            }
            guard byte >= 0x20 else { throw fail("control character in a string") }
            guard byte == UInt8(ascii: "\\") else {
                out.append(byte)
                at += 1
                continue
            }
            at += 1
            guard at < bytes.count else { throw fail("unterminated string") }
            let escape = bytes[at]
            at += 1
            switch escape {
            case UInt8(ascii: "\""): out.append(0x22)
            case UInt8(ascii: "\\"): out.append(0x5C)
            case UInt8(ascii: "/"): out.append(0x2F)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4()
                if (0xD800...0xDBFF).contains(scalar) {
                    guard at + 1 < bytes.count, bytes[at] == UInt8(ascii: "\\"), bytes[at + 1] == UInt8(ascii: "u") else {
                        throw fail("lone surrogate in a string")
                    }
                    at += 2
                    let low = try hex4()
                    guard (0xDC00...0xDFFF).contains(low) else { throw fail("lone surrogate in a string") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(scalar) {
                    throw fail("lone surrogate in a string")
                }
                guard let unicode = Unicode.Scalar(scalar) else { throw fail("invalid escape") }
                out.append(contentsOf: Array(String(Character(unicode)).utf8))
            default:
                throw fail("invalid escape")
            }
        }
    }

    private mutating func hex4() throws(JSONParseError) -> UInt32 {
        guard at + 4 <= bytes.count else { throw fail("invalid \\u escape") }
        var value: UInt32 = 0
        for byte in bytes[at..<(at + 4)] {
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw fail("invalid \\u escape")
            }
            value = value << 4 | UInt32(digit)
        }
        at += 4
        return value
    }
}
