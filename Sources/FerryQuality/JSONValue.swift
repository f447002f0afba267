import FerryProtocol

/// A JSON value as a tree: for the plan, the redact table and `enum`/`const` operands, read once
/// per load (events are read as a ``JSONTape`` instead).
indirect enum JSONValue: Hashable, Sendable {
    case object([Member])
    case array([JSONValue])
    case string(String)
    case number(Double)
    case bool(Bool)
    case null

    /// One member of an object, in document order.
    struct Member: Hashable, Sendable {
        var key: String
        var value: JSONValue
    }

    /// Parses a whole document. `file` names it in errors; duplicate member names are refused
    /// (their meaning differs between parsers).
    static func parse(_ bytes: [UInt8], file: String) throws(QualityError) -> JSONValue {
        let result: Result<JSONValue, QualityError> = bytes.withUnsafeBytes { raw in
            guard UTF8Validation.isValid(raw) else {
                return .failure(.invalidJSON(file: file, offset: 0, reason: "not valid UTF-8"))
            }
            let tape: JSONTape
            do throws(JSONTape.Failure) {
                tape = try JSONTape.parse(raw)
            } catch {
                return .failure(.invalidJSON(file: file, offset: error.offset, reason: error.reason))
            }
            var index = 0
            do throws(QualityError) {
                return .success(try build(tape, &index, raw, file: file, path: "$"))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    private static func build(_ tape: JSONTape, _ index: inout Int, _ bytes: UnsafeRawBufferPointer, file: String,
                              path: String) throws(QualityError) -> JSONValue {
        let node = tape.nodes[index]
        index += 1
        switch node.kind {
        case .object:
            var members: [Member] = []
            var seen: Set<String> = []
            for _ in 0..<node.count {
                let key = String(decoding: JSONTape.decodedString(tape.nodes[index], in: bytes), as: UTF8.self)
                index += 1
                guard seen.insert(key).inserted else {
                    throw .invalidPlan(file: file, path: path, message: "member \"\(key)\" appears twice")
                }
                let value = try build(tape, &index, bytes, file: file, path: path + "." + key)
                members.append(Member(key: key, value: value))
            }
            return .object(members)
        case .array:
            var elements: [JSONValue] = []
            for position in 0..<node.count {
                elements.append(try build(tape, &index, bytes, file: file, path: path + "[\(position)]"))
            }
            return .array(elements)
        case .string: return .string(String(decoding: JSONTape.decodedString(node, in: bytes), as: UTF8.self))
        case .number: return .number(JSONTape.double(node, in: bytes))
        case .true: return .bool(true)
        case .false: return .bool(false)
        case .null: return .null
        }
    }

    /// The member named `key` of an object, or nil.
    subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.key == key }?.value
    }

    /// The name of the value's JSON type, for messages.
    var typeName: String {
        switch self {
        case .object: "an object"
        case .array: "an array"
        case .string: "a string"
        case .number: "a number"
        case .bool: "a boolean"
        case .null: "null"
        }
    }

    /// Compact JSON text of the value.
    var text: String {
        var out: [UInt8] = []
        append(to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    func append(to out: inout [UInt8]) {
        switch self {
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (position, member) in members.enumerated() {
                if position > 0 { out.append(UInt8(ascii: ",")) }
                JSONText.appendString(member.key, to: &out)
                out.append(UInt8(ascii: ":"))
                member.value.append(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        case .array(let elements):
            out.append(UInt8(ascii: "["))
            for (position, element) in elements.enumerated() {
                if position > 0 { out.append(UInt8(ascii: ",")) }
                element.append(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .string(let string): JSONText.appendString(string, to: &out)
        case .number(let number):
            if number.isFinite && number.rounded() == number && abs(number) < 1e15 {
                out.append(contentsOf: String(Int64(number)).utf8)
            } else {
                out.append(contentsOf: String(number).utf8)
            }
        case .bool(let value): out.append(contentsOf: (value ? "true" : "false").utf8)
        case .null: out.append(contentsOf: "null".utf8)
        }
    }
}
