import FerryProtocol

/// A request body read by Ferry's JSON reader (``JSONTape``: the same grammar as every other
/// JSON the agent reads), and one value in it with the byte range it came from: the mapping to
/// Ferry's event copies `properties`, `traits` and `context` as the application sent them (no
/// re-encoding: key order and number spelling are kept), and reads the scalar fields.
package struct BodyValue: Sendable {
    /// The body's bytes, shared by every value read from it.
    package let body: [UInt8]
    /// The body's tape.
    private let nodes: [JSONNode]
    /// This value's node.
    private let index: Int

    private init(bytes: [UInt8], nodes: [JSONNode], index: Int) {
        self.body = bytes
        self.nodes = nodes
        self.index = index
    }

    /// The value `body` holds (one value, whitespace around it allowed), and the byte ranges of
    /// the values nested deeper than ``JSONTape/maxDepth``: they are read (they must be JSON)
    /// and a caller refuses whatever contains one.
    package static func parse(_ body: [UInt8]) throws(JSONTape.Failure) -> (BodyValue, tooDeep: [Range<Int>]) {
        var tooDeep: [Range<Int>] = []
        let tape = try JSONTape.parse(body, tooDeep: &tooDeep)
        return (BodyValue(bytes: body, nodes: tape.nodes, index: 0), tooDeep)
    }

    private func node(_ index: Int) -> BodyValue { BodyValue(bytes: body, nodes: nodes, index: index) }

    /// The kind of the value.
    package var kind: JSONKind { nodes[index].kind }

    /// The bytes of the body the value was written as (a string with its quotes).
    package var range: Range<Int> { JSONTape.rawRange(nodes[index]) }

    /// The value of member `key` of an object (the last one if repeated, as JavaScript's
    /// `JSON.parse` reads it); nil otherwise.
    package subscript(_ key: String) -> BodyValue? {
        let found = body.withUnsafeBytes { raw in
            nodes.withUnsafeBufferPointer { JSONTape.member(key, of: index, in: $0, raw) }
        }
        return found.map(node)
    }

    /// The elements of an array (empty for another value).
    package var elements: [BodyValue] {
        nodes.withUnsafeBufferPointer { JSONTape.elements(of: index, in: $0) }.map(node)
    }

    /// The string, unescaped, if the value is one.
    package var string: String? {
        guard kind == .string else { return nil }
        return String(decoding: body.withUnsafeBytes { JSONTape.decodedString(nodes[index], in: $0) }, as: UTF8.self)
    }

    /// The text of the value as written (a number's spelling).
    package var text: String { String(decoding: body[range], as: UTF8.self) }

    /// The kind of the value, for messages (`object`, `array`, `string`, `number`, `boolean`, `null`).
    package var kindName: String {
        switch kind {
        case .object: "object"
        case .array: "array"
        case .string: "string"
        case .number: "number"
        case .true, .false: "boolean"
        case .null: "null"
        }
    }
}
