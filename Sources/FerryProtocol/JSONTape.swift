/// The kind of one JSON value on a ``JSONTape``.
package enum JSONKind: UInt8, Sendable {
    case object, array, string, number, `true`, `false`, null
}

/// One value on a ``JSONTape``: where its bytes are, and where the next sibling starts.
///
/// An object's children follow it on the tape as key, value, key, value …; an array's as its
/// elements. `next` is the index just past the whole subtree, so siblings are walked by jumping.
package struct JSONNode: Sendable {
    package var kind: JSONKind
    /// A string holds an escape (its bytes must be decoded before comparing).
    package var escaped: Bool
    /// A string holds a digit, `:` or `@` (raw bytes) or a `\u` escape: only such a string can be
    /// a value the quality gate's detectors look for (found while parsing at no extra pass).
    package var candidate: Bool = false
    /// First byte of the value (for a string: just after the opening quote).
    package var start: Int32
    /// One past the last byte (for a string: the closing quote).
    package var end: Int32
    /// The tape index after this value's subtree.
    package var next: Int32
    /// Members (object) or elements (array).
    package var count: Int32

    package init(kind: JSONKind, escaped: Bool, candidate: Bool = false, start: Int32, end: Int32, next: Int32, count: Int32) {
        self.kind = kind
        self.escaped = escaped
        self.candidate = candidate
        self.start = start
        self.end = end
        self.next = next
        self.count = count
    }
}

/// Ferry's one JSON reader: a document parsed into a flat array of nodes over the original bytes
/// (one allocation, no strings built), each with the byte range it came from. Ingest's check of
/// the `context` field, the quality gate, redaction, the HTTP API's mapping and the delivery
/// encoders all read JSON through it, so a byte sequence is JSON everywhere or nowhere.
///
/// The grammar is RFC 8259's, strictly: one value with optional whitespace (space, tab, line
/// feed, carriage return) around it; no comments, trailing commas, `NaN` or leading zeros; no
/// control character unescaped in a string; a `\u` escape of a surrogate must be a high one
/// followed by a low one (an unpaired surrogate is refused: it stands for no character, so no
/// UTF-8 text holds it); nesting at most ``maxDepth`` deep. The input must be valid UTF-8 (the
/// caller checks it). docs/PROTOCOL.md, "JSON", says the same to clients.
package struct JSONTape: Sendable {
    package var nodes: [JSONNode] = []

    /// Nesting deeper than this is refused (it bounds the recursion of the tape's readers).
    package static let maxDepth = 64

    /// Why parsing stopped.
    package struct Failure: Error, Sendable, CustomStringConvertible {
        /// The byte offset where it was found.
        package var offset: Int
        /// What is wrong.
        package var reason: String
        package var description: String { "\(reason) at byte \(offset)" }
    }

    /// Parses `bytes` as exactly one JSON value with optional whitespace around it.
    package static func parse(_ bytes: UnsafeRawBufferPointer) throws(Failure) -> JSONTape {
        var parser = Parser(bytes: bytes, nodes: .allocate(capacity: 16), capacity: 16, onHeap: true)
        defer { parser.nodes.deallocate() }
        try parser.document()
        return JSONTape(nodes: Array(UnsafeBufferPointer(start: parser.nodes, count: parser.used)))
    }

    /// ``parse(_:)`` over an array.
    package static func parse(_ bytes: [UInt8]) throws(Failure) -> JSONTape {
        let result: Result<JSONTape, Failure> = bytes.withUnsafeBytes { raw in
            do throws(Failure) { return .success(try parse(raw)) } catch { return .failure(error) }
        }
        return try result.get()
    }

    /// Parses `bytes` as ``parse(_:)`` does, except that a value nested deeper than ``maxDepth``
    /// is not an error: its range is returned in `tooDeep` (outermost values only) and its nodes
    /// stay on the tape. The HTTP API refuses only the message that holds one. The parser keeps
    /// no stack of its own, so any depth is read without recursion.
    package static func parse(_ bytes: [UInt8], tooDeep: inout [Range<Int>]) throws(Failure) -> JSONTape {
        let result: Result<(JSONTape, [Range<Int>]), Failure> = bytes.withUnsafeBytes { raw in
            var parser = Parser(bytes: raw, nodes: .allocate(capacity: 16), capacity: 16, onHeap: true)
            parser.keepDeep = true
            defer { parser.nodes.deallocate() }
            do throws(Failure) {
                try parser.document()
            } catch {
                return .failure(error)
            }
            return .success((JSONTape(nodes: Array(UnsafeBufferPointer(start: parser.nodes, count: parser.used))), parser.tooDeep))
        }
        let (tape, deep) = try result.get()
        tooDeep = deep
        return tape
    }

    /// Parses `bytes` as ``parse(_:)`` does and lends the nodes to `body` (nil when the bytes are
    /// not one JSON value). The nodes of a document of up to ``stackNodes`` values live on the
    /// stack: no allocation (the gate's per-event parse).
    @inline(__always)
    package static func withNodes<Result>(_ bytes: UnsafeRawBufferPointer, _ body: (UnsafeBufferPointer<JSONNode>?) -> Result) -> Result {
        onStack(bytes) { nodes, _ in body(nodes) }
    }

    /// ``withNodes(_:_:)`` for a body that answers yes or no: the quality gate's per-event parse.
    /// Not generic, so nothing is looked up at run time: the generic one, called from another
    /// module, is not specialised there and fetches its temporary allocation's generic metadata
    /// on every call (~330 instructions per event, issue 37).
    package static func withNodes(_ bytes: UnsafeRawBufferPointer, _ body: (UnsafeBufferPointer<JSONNode>?) -> Bool) -> Bool {
        onStack(bytes) { nodes, _ in body(nodes) }
    }

    /// Nodes ``withNodes(_:_:)`` keeps on the stack (48 × 20 bytes: within the 1 KiB that
    /// `withUnsafeTemporaryAllocation` always places there); more move to the heap.
    package static let stackNodes = 48

    /// Whether `bytes` (valid UTF-8) are one JSON object and nothing else: ingest's check of the
    /// `context` field and the delivery encoders' test of a stored field.
    package static func isObject(_ bytes: UnsafeRawBufferPointer) -> Bool {
        onStack(bytes) { nodes, _ in nodes?[0].kind == .object }
    }

    /// ``isObject(_:)``, also telling whether the bytes hold a raw line feed or carriage return
    /// (in a valid object only ever whitespace between tokens): the encoders copy an object whole
    /// and compact it only then.
    package static func isObject(_ bytes: UnsafeRawBufferPointer, newlines: inout Bool) -> Bool {
        let (object, found) = onStack(bytes) { nodes, newlines in (nodes?[0].kind == .object, newlines) }
        newlines = found
        return object
    }

    /// The parse of ``withNodes(_:_:)``, also lending whether the whitespace held a raw newline.
    @inline(__always)
    private static func onStack<Result>(_ bytes: UnsafeRawBufferPointer, _ body: (UnsafeBufferPointer<JSONNode>?, Bool) -> Result) -> Result {
        withUnsafeTemporaryAllocation(of: JSONNode.self, capacity: stackNodes) { buffer in
            var parser = Parser(bytes: bytes, nodes: buffer.baseAddress!, capacity: buffer.count, onHeap: false)
            defer { if parser.onHeap { parser.nodes.deallocate() } }
            do throws(Failure) {
                try parser.document()
            } catch {
                return body(nil, false)
            }
            return body(UnsafeBufferPointer(start: parser.nodes, count: parser.used), parser.newlines)
        }
    }

    /// The parser writes nodes into a buffer it grows itself (no array: an append is a store).
    /// It keeps no stack: while a container is open, its node's `next` holds the index of the
    /// container it is in (-1 for none), and becomes the index past its subtree when it closes.
    private struct Parser {
        let bytes: UnsafeRawBufferPointer
        var index = 0
        var nodes: UnsafeMutablePointer<JSONNode>
        var capacity: Int
        /// Nodes written.
        var used = 0
        /// Whether `nodes` was allocated by the parser (freed by its owner).
        var onHeap: Bool
        /// Whether whitespace skipped so far held a raw line feed or carriage return.
        var newlines = false
        /// Read past ``JSONTape/maxDepth``, recording the values too deep in ``tooDeep``.
        var keepDeep = false
        var tooDeep: [Range<Int>] = []

        init(bytes: UnsafeRawBufferPointer, nodes: UnsafeMutablePointer<JSONNode>, capacity: Int, onHeap: Bool) {
            self.bytes = bytes
            self.nodes = nodes
            self.capacity = capacity
            self.onHeap = onHeap
        }

        /// Exactly one value with optional whitespace around it.
        mutating func document() throws(Failure) {
            // Offsets are stored as Int32 (converted unchecked below).
            guard bytes.count < Int(Int32.max) else { throw fail("a document of 2 GiB or more") }
            skipWhitespace()
            // The innermost open container (-1: none) and how many are open.
            var open = -1
            var depth = 0
            // The container just opened is empty: its closing byte is next.
            var empty = false
            while true {
                if !empty {
                    guard index < bytes.count else { throw fail("unexpected end of input") }
                    let byte = bytes[index]
                    switch byte {
                    case UInt8(ascii: "{"), UInt8(ascii: "["):
                        if depth >= JSONTape.maxDepth {
                            guard keepDeep else { throw fail("nesting deeper than \(JSONTape.maxDepth)") }
                            if depth == JSONTape.maxDepth { tooDeep.append(index..<index) }
                        }
                        let isObject = byte == UInt8(ascii: "{")
                        append(JSONNode(kind: isObject ? .object : .array, escaped: false, start: Int32(truncatingIfNeeded: index),
                                        end: 0, next: Int32(truncatingIfNeeded: open), count: 0))
                        open = used &- 1
                        depth &+= 1
                        index &+= 1
                        skipWhitespace()
                        if index < bytes.count && bytes[index] == (isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) {
                            empty = true
                        } else {
                            if isObject { try memberName() }
                            continue
                        }
                    case UInt8(ascii: "\""): try string()
                    case UInt8(ascii: "t"): try literal("true", .true)
                    case UInt8(ascii: "f"): try literal("false", .false)
                    case UInt8(ascii: "n"): try literal("null", .null)
                    default: try number()
                    }
                }
                // After a value (or at an empty container's end): a separator or a closing byte.
                while true {
                    guard open >= 0 else {
                        skipWhitespace()
                        guard index == bytes.count else { throw fail("unexpected data after the value") }
                        return
                    }
                    let isObject = nodes[open].kind == .object
                    if empty {
                        empty = false
                    } else {
                        skipWhitespace()
                        guard index < bytes.count else { throw fail(isObject ? "unexpected end of input in an object" : "unexpected end of input in an array") }
                        nodes[open].count &+= 1
                        let separator = bytes[index]
                        if separator == UInt8(ascii: ",") {
                            index &+= 1
                            skipWhitespace()
                            if isObject { try memberName() }
                            break
                        }
                        guard separator == (isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) else {
                            throw fail(isObject ? "expected ',' or '}'" : "expected ',' or ']'")
                        }
                    }
                    // Close the innermost container.
                    index &+= 1
                    let parent = Int(nodes[open].next)
                    nodes[open].end = Int32(truncatingIfNeeded: index)
                    nodes[open].next = Int32(truncatingIfNeeded: used)
                    depth &-= 1
                    if keepDeep && depth == JSONTape.maxDepth {
                        tooDeep[tooDeep.count - 1] = tooDeep[tooDeep.count - 1].lowerBound..<index
                    }
                    open = parent
                }
            }
        }

        /// A member name and its colon, `index` at the name's opening quote.
        @inline(__always)
        mutating func memberName() throws(Failure) {
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected a member name") }
            try string()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected ':'") }
            index &+= 1
            skipWhitespace()
        }

        @inline(__always)
        mutating func append(_ node: JSONNode) {
            if used == capacity { grow() }
            (nodes + used).initialize(to: node)
            used &+= 1
        }

        mutating func grow() {
            let bigger = UnsafeMutablePointer<JSONNode>.allocate(capacity: capacity * 2)
            bigger.moveInitialize(from: nodes, count: used)
            if onHeap { nodes.deallocate() }
            nodes = bigger
            capacity *= 2
            onHeap = true
        }

        @inline(__always)
        mutating func skipWhitespace() {
            while index < bytes.count {
                let byte = bytes[index]
                if byte == 0x20 || byte == 0x09 {
                    index &+= 1
                } else if byte == 0x0A || byte == 0x0D {
                    newlines = true
                    index &+= 1
                } else {
                    return
                }
            }
        }

        func fail(_ reason: String) -> Failure { Failure(offset: index, reason: reason) }

        mutating func literal(_ text: StaticString, _ kind: JSONKind) throws(Failure) {
            let count = text.utf8CodeUnitCount
            guard bytes.count - index >= count else { throw fail("unexpected end of input") }
            for offset in 0..<count where bytes[index + offset] != text.utf8Start[offset] { throw fail("invalid literal") }
            append(JSONNode(kind: kind, escaped: false, start: Int32(truncatingIfNeeded: index), end: Int32(truncatingIfNeeded: index + count),
                            next: Int32(truncatingIfNeeded: used + 1), count: 0))
            index += count
        }

        /// A string from its opening quote (``JSONScan/string(_:count:from:)``). Inlined into
        /// the parser's loop: no call, and the scan's constants loaded once per document.
        @inline(__always)
        mutating func string() throws(Failure) {
            let start = index + 1
            // Not empty: `index` is at the opening quote.
            let scanned = JSONScan.string(bytes.baseAddress!, count: bytes.count, from: start)
            if let fault = scanned.fault {
                index = scanned.end
                throw fail(fault.reason)
            }
            append(JSONNode(kind: .string, escaped: scanned.escaped, candidate: scanned.candidate,
                            start: Int32(truncatingIfNeeded: start), end: Int32(truncatingIfNeeded: scanned.end),
                            next: Int32(truncatingIfNeeded: used + 1), count: 0))
            index = scanned.end + 1
        }

        mutating func number() throws(Failure) {
            let start = index
            // Not empty: `index` is at the number's first byte.
            let end = JSONScan.number(bytes.baseAddress!, count: bytes.count, from: start)
            if let fault = end.fault {
                index = end.end
                throw fail(fault == .value ? "invalid value" : "invalid number")
            }
            index = end.end
            append(JSONNode(kind: .number, escaped: false, start: Int32(truncatingIfNeeded: start), end: Int32(truncatingIfNeeded: index),
                            next: Int32(truncatingIfNeeded: used + 1), count: 0))
        }
    }

    // MARK: Reading values

    /// The index of the last member of the object at `object` whose name is `name` (decoded), nil
    /// for none or when the node is not an object (JavaScript's `JSON.parse` keeps the last of a
    /// repeated name too).
    package static func member(_ name: String, of object: Int, in nodes: UnsafeBufferPointer<JSONNode>,
                               _ bytes: UnsafeRawBufferPointer) -> Int? {
        guard nodes[object].kind == .object else { return nil }
        var found: Int?
        var child = object + 1
        for _ in 0..<Int(nodes[object].count) {
            if nameEquals(nodes[child], name, in: bytes) { found = child + 1 }
            child = Int(nodes[child + 1].next)
        }
        return found
    }

    /// Whether the string node `key` holds `name`.
    package static func nameEquals(_ key: JSONNode, _ name: String, in bytes: UnsafeRawBufferPointer) -> Bool {
        if key.escaped { return decodedString(key, in: bytes).elementsEqual(name.utf8) }
        let raw = UnsafeRawBufferPointer(rebasing: bytes[Int(key.start)..<Int(key.end)])
        return raw.elementsEqual(name.utf8)
    }

    /// The indices of the elements of the array at `array` (empty for another node).
    package static func elements(of array: Int, in nodes: UnsafeBufferPointer<JSONNode>) -> [Int] {
        guard nodes[array].kind == .array else { return [] }
        var out: [Int] = []
        out.reserveCapacity(Int(nodes[array].count))
        var child = array + 1
        for _ in 0..<Int(nodes[array].count) {
            out.append(child)
            child = Int(nodes[child].next)
        }
        return out
    }

    /// The bytes of a value as written (a string with its quotes).
    package static func rawRange(_ node: JSONNode) -> Range<Int> {
        node.kind == .string ? Int(node.start) - 1..<Int(node.end) + 1 : Int(node.start)..<Int(node.end)
    }

    /// The decoded UTF-8 bytes of a string node (escapes resolved).
    package static func decodedString(_ node: JSONNode, in bytes: UnsafeRawBufferPointer) -> [UInt8] {
        let raw = UnsafeRawBufferPointer(rebasing: bytes[Int(node.start)..<Int(node.end)])
        guard node.escaped else { return Array(raw) }
        var out: [UInt8] = []
        out.reserveCapacity(raw.count)
        var index = 0
        func hex4(_ at: Int) -> UInt32 {
            var value: UInt32 = 0
            for offset in 0..<4 { value = value << 4 | UInt32(JSONScan.hexValue(raw[at + offset]) ?? 0) }
            return value
        }
        while index < raw.count {
            let byte = raw[index]
            index += 1
            guard byte == UInt8(ascii: "\\") else { out.append(byte); continue }
            let escape = raw[index]
            index += 1
            switch escape {
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = hex4(index)
                index += 4
                if scalar >= 0xD800 && scalar < 0xDC00 {
                    let low = hex4(index + 2)
                    index += 6
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                out.append(contentsOf: UTF8.encode(Unicode.Scalar(scalar) ?? "\u{FFFD}")!)
            default: out.append(escape)
            }
        }
        return out
    }

    /// The number a number node holds, as a Double.
    package static func double(_ node: JSONNode, in bytes: UnsafeRawBufferPointer) -> Double {
        // Short plain integers (most numbers in events) without the general parser.
        let count = Int(node.end - node.start)
        var index = Int(node.start)
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        var value: Int64 = 0
        var plain = count <= 16
        while plain, index < Int(node.end) {
            let digit = bytes[index] &- UInt8(ascii: "0")
            guard digit < 10 else { plain = false; break }
            value = value * 10 + Int64(digit)
            index += 1
        }
        if plain { return negative ? -Double(value) : Double(value) }
        if let exact = fastDouble(node, in: bytes) { return exact }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[Int(node.start)..<Int(node.end)]), as: UTF8.self)
        return Double(text) ?? .nan
    }

    /// Clinger's fast path: a number whose digits, read as an integer, are at most 2^53 and whose
    /// power of ten is within ±22 is that integer times or divided by an exact power of ten, one
    /// correctly rounded operation on two exact doubles: the same value `strtod` gives, without
    /// building a string. Nil for any other number.
    private static func fastDouble(_ node: JSONNode, in bytes: UnsafeRawBufferPointer) -> Double? {
        var index = Int(node.start)
        let end = Int(node.end)
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        var mantissa: UInt64 = 0
        var scale = 0, digits = 0
        var fraction = false
        while index < end {
            let byte = bytes[index]
            if byte == UInt8(ascii: ".") {
                fraction = true
            } else if byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") {
                break
            } else {
                // Digits past 19 could overflow the integer; such numbers take the general path.
                guard digits < 19 else { return nil }
                mantissa = mantissa &* 10 &+ UInt64(byte &- UInt8(ascii: "0"))
                if mantissa != 0 { digits += 1 }
                if fraction { scale -= 1 }
            }
            index += 1
        }
        if index < end {
            index += 1  // the `e`
            var exponentNegative = false
            if bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                exponentNegative = bytes[index] == UInt8(ascii: "-")
                index += 1
            }
            var exponent = 0
            while index < end {
                exponent = exponent * 10 + Int(bytes[index] &- UInt8(ascii: "0"))
                guard exponent <= 400 else { return nil }
                index += 1
            }
            scale += exponentNegative ? -exponent : exponent
        }
        guard mantissa <= 1 << 53, scale >= -22, scale <= 22 else { return nil }
        let power = powersOfTen[abs(scale)]
        let value = scale >= 0 ? Double(mantissa) * power : Double(mantissa) / power
        return negative ? -value : value
    }

    /// 10^0 … 10^22, each exact in a Double.
    private static let powersOfTen: [Double] = (0...22).map { exponent in
        var power = 1.0
        for _ in 0..<exponent { power *= 10 }
        return power
    }

    /// Whether a number node is an integer in JSON Schema's sense (`1.0` is one).
    package static func isInteger(_ node: JSONNode, in bytes: UnsafeRawBufferPointer) -> Bool {
        var fraction = false
        for index in Int(node.start)..<Int(node.end) {
            let byte = bytes[index]
            if byte == UInt8(ascii: ".") || byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") { fraction = true; break }
        }
        guard fraction else { return true }
        let value = double(node, in: bytes)
        return value.isFinite && value.rounded(.towardZero) == value
    }
}
