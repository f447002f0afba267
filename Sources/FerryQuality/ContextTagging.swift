import FerryProtocol

/// Sets `ferry.violations` in an event's context (the `tag` action).
enum ContextTagging {
    /// `context` (a JSON object, or empty for none) with `ferry.violations` set to `violations`;
    /// other members, and other members of `ferry`, kept.
    static func tag(_ context: [UInt8], with violations: [Violation]) -> [UInt8] {
        var list: [UInt8] = [UInt8(ascii: "[")]
        for (index, violation) in violations.enumerated() {
            if index > 0 { list.append(UInt8(ascii: ",")) }
            violation.appendJSON(to: &list)
        }
        list.append(UInt8(ascii: "]"))
        let tape: JSONTape? = context.isEmpty ? nil : try? JSONTape.parse(context)
        guard let tape, tape.nodes.first?.kind == .object else {
            return Array(#"{"ferry":{"violations":"#.utf8) + list + Array("}}".utf8)
        }
        return context.withUnsafeBytes { bytes in
            var out: [UInt8] = [UInt8(ascii: "{")]
            out.reserveCapacity(context.count + list.count + 32)
            var index = 1
            var ferryDone = false
            var first = true
            func separator() {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
            }
            for _ in 0..<tape.nodes[0].count {
                let key = tape.nodes[index], value = tape.nodes[index + 1]
                let keyBytes = JSONTape.decodedString(key, in: bytes)
                separator()
                out.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[JSONTape.rawRange(key)]))
                out.append(UInt8(ascii: ":"))
                if keyBytes == Array("ferry".utf8), !ferryDone, value.kind == .object {
                    ferryDone = true
                    out.append(UInt8(ascii: "{"))
                    var inner = index + 2
                    for _ in 0..<value.count {
                        let innerKey = tape.nodes[inner], innerValue = tape.nodes[inner + 1]
                        if JSONTape.decodedString(innerKey, in: bytes) != Array("violations".utf8) {
                            out.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[JSONTape.rawRange(innerKey)]))
                            out.append(UInt8(ascii: ":"))
                            out.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[JSONTape.rawRange(innerValue)]))
                            out.append(UInt8(ascii: ","))
                        }
                        inner = Int(innerValue.next)
                    }
                    out.append(contentsOf: #""violations":"#.utf8)
                    out.append(contentsOf: list)
                    out.append(UInt8(ascii: "}"))
                } else if keyBytes == Array("ferry".utf8) {
                    // A `ferry` member that is not an object (or a second one) is replaced.
                    ferryDone = true
                    out.append(contentsOf: #"{"violations":"#.utf8)
                    out.append(contentsOf: list)
                    out.append(UInt8(ascii: "}"))
                } else {
                    out.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[JSONTape.rawRange(value)]))
                }
                index = Int(value.next)
            }
            if !ferryDone {
                separator()
                out.append(contentsOf: #""ferry":{"violations":"#.utf8)
                out.append(contentsOf: list)
                out.append(UInt8(ascii: "}"))
            }
            out.append(UInt8(ascii: "}"))
            return out
        }
    }
}
