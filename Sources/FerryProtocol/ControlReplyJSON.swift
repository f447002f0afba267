import Foundation

/// A control reply as the agent writes it: encoded from its FerryProtocol type, then written with
/// its keys sorted as `JSONSerialization` sorts them (numerically and ignoring case, unlike
/// `JSONEncoder`'s `.sortedKeys`), so the bytes are those of every earlier version. Shared with
/// the protocol test vectors.
///
/// `JSONSerialization` compares keys with `NSString.compare` and the system locale: one `status`
/// round trip took 8.5 ms, most of it this sort (perf). ``SortedJSON`` writes the same bytes by
/// reordering `JSONEncoder`'s output directly, and the slow path stays for what it cannot vouch for
/// (keys outside `[a-z0-9_.-]`, fractional numbers, `\u` escapes, bytes outside ASCII in strings).
package func controlReplyJSON(_ value: some Encodable) -> [UInt8] {
    guard let encoded = try? JSONEncoder().encode(value) else { return Array(#"{"ok":false}"#.utf8) }
    let bytes = Array(encoded)
    if let sorted = SortedJSON.reordered(bytes) { return sorted }
    return SortedJSON.foundationSorted(bytes) ?? Array(#"{"ok":false}"#.utf8)
}

/// Rewrites compact JSON with every object's keys in `JSONSerialization`'s `.sortedKeys` order,
/// copying keys and scalar values byte for byte.
package enum SortedJSON {
    /// The document through `JSONSerialization` (parse, then write with sorted keys): the
    /// reference ``reordered(_:)`` is tested against.
    package static func foundationSorted(_ bytes: [UInt8]) -> [UInt8]? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed]),
              let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .fragmentsAllowed])
        else { return nil }
        return Array(data)
    }

    /// `bytes` (compact JSON as `JSONEncoder` writes it) with each object's members sorted, or nil
    /// where the result could differ from ``foundationSorted(_:)``: a key with a character
    /// outside `[a-z0-9_.-]` or a digit run with a leading zero, a number with a fraction or an
    /// exponent, a `\u` escape or a byte outside ASCII in a string, whitespace, or invalid JSON.
    package static func reordered(_ bytes: [UInt8]) -> [UInt8]? {
        var reader = Reader(bytes: bytes)
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        guard reader.value(into: &output), reader.index == bytes.count else { return nil }
        return output
    }

    /// The order `JSONSerialization` gives two keys made of `[a-z0-9_.-]` (digit runs without a
    /// leading zero): element by element, where a digit run is one element compared as a number;
    /// `_` < `-` < `.` < digits < letters; a key that is a prefix of the other comes first.
    package static func keyPrecedes(_ a: ArraySlice<UInt8>, _ b: ArraySlice<UInt8>) -> Bool {
        var i = a.startIndex, j = b.startIndex
        while i < a.endIndex, j < b.endIndex {
            let x = a[i], y = b[j]
            if isDigit(x), isDigit(y) {
                var iEnd = i, jEnd = j
                while iEnd < a.endIndex, isDigit(a[iEnd]) { iEnd += 1 }
                while jEnd < b.endIndex, isDigit(b[jEnd]) { jEnd += 1 }
                let runA = a[i..<iEnd], runB = b[j..<jEnd]
                if runA.count != runB.count { return runA.count < runB.count }
                if runA != runB { return runA.lexicographicallyPrecedes(runB) }
                i = iEnd
                j = jEnd
                continue
            }
            if x != y { return rank(x) < rank(y) }
            i += 1
            j += 1
        }
        return i == a.endIndex && j < b.endIndex
    }

    private static func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    private static func rank(_ byte: UInt8) -> Int {
        switch byte {
        case UInt8(ascii: "_"): 0
        case UInt8(ascii: "-"): 1
        case UInt8(ascii: "."): 2
        default: Int(byte) + 3 // digits (0x30…) before letters (0x61…)
        }
    }

    /// A key `keyPrecedes` can order: non-empty, `[a-z0-9_.-]` only, no digit run starting with 0.
    private static func isSimpleKey(_ key: ArraySlice<UInt8>) -> Bool {
        guard !key.isEmpty else { return false }
        var previousIsDigit = false
        for index in key.indices {
            let byte = key[index]
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "."):
                previousIsDigit = false
            case UInt8(ascii: "0")...UInt8(ascii: "9"):
                if byte == UInt8(ascii: "0"), !previousIsDigit,
                   index + 1 < key.endIndex, isDigit(key[index + 1]) { return false }
                previousIsDigit = true
            default:
                return false
            }
        }
        return true
    }

    private struct Reader {
        let bytes: [UInt8]
        var index = 0
        var depth = 0

        mutating func value(into output: inout [UInt8]) -> Bool {
            guard index < bytes.count else { return false }
            switch bytes[index] {
            case UInt8(ascii: "{"): return object(into: &output)
            case UInt8(ascii: "["): return array(into: &output)
            case UInt8(ascii: "\""):
                guard let range = string() else { return false }
                output.append(contentsOf: bytes[range])
                return true
            default:
                let start = index
                while index < bytes.count {
                    switch bytes[index] {
                    case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"),
                         UInt8(ascii: "a")...UInt8(ascii: "z"):
                        index += 1
                        continue
                    default: break
                    }
                    break
                }
                let token = bytes[start..<index]
                guard !token.isEmpty else { return false }
                if token.elementsEqual("true".utf8) || token.elementsEqual("false".utf8) || token.elementsEqual("null".utf8) {
                    output.append(contentsOf: token)
                    return true
                }
                // An integer only: fractions and exponents may be written differently.
                guard token.allSatisfy({ isDigit($0) || $0 == UInt8(ascii: "-") }) else { return false }
                output.append(contentsOf: token)
                return true
            }
        }

        /// The range of a string token (quotes included); nil for escapes the writers may differ on.
        mutating func string() -> Range<Int>? {
            let start = index
            index += 1
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: "\""):
                    index += 1
                    return start..<index
                case UInt8(ascii: "\\"):
                    guard index + 1 < bytes.count else { return nil }
                    switch bytes[index + 1] {
                    case UInt8(ascii: "/"), UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "n"), UInt8(ascii: "r"),
                         UInt8(ascii: "t"), UInt8(ascii: "b"), UInt8(ascii: "f"): index += 2
                    default: return nil
                    }
                case 0..<0x20, 0x80...:
                    return nil
                default:
                    index += 1
                }
            }
            return nil
        }

        mutating func object(into output: inout [UInt8]) -> Bool {
            depth += 1
            defer { depth -= 1 }
            guard depth <= 64 else { return false }
            index += 1
            var members: [(key: ArraySlice<UInt8>, value: [UInt8])] = []
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                output.append(contentsOf: "{}".utf8)
                return true
            }
            while true {
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\""), let keyRange = string() else { return false }
                let key = bytes[(keyRange.lowerBound + 1)..<(keyRange.upperBound - 1)]
                guard isSimpleKey(key), index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return false }
                index += 1
                var value: [UInt8] = []
                guard self.value(into: &value) else { return false }
                members.append((key, value))
                guard index < bytes.count else { return false }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                guard bytes[index] == UInt8(ascii: "}") else { return false }
                index += 1
                break
            }
            members.sort { SortedJSON.keyPrecedes($0.key, $1.key) }
            output.append(UInt8(ascii: "{"))
            for (offset, member) in members.enumerated() {
                if offset > 0 { output.append(UInt8(ascii: ",")) }
                output.append(UInt8(ascii: "\""))
                output.append(contentsOf: member.key)
                output.append(contentsOf: "\":".utf8)
                output.append(contentsOf: member.value)
            }
            output.append(UInt8(ascii: "}"))
            return true
        }

        mutating func array(into output: inout [UInt8]) -> Bool {
            depth += 1
            defer { depth -= 1 }
            guard depth <= 64 else { return false }
            index += 1
            output.append(UInt8(ascii: "["))
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                output.append(UInt8(ascii: "]"))
                return true
            }
            while true {
                guard value(into: &output), index < bytes.count else { return false }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    output.append(UInt8(ascii: ","))
                    continue
                }
                guard bytes[index] == UInt8(ascii: "]") else { return false }
                index += 1
                output.append(UInt8(ascii: "]"))
                return true
            }
        }
    }
}
