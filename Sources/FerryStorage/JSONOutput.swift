import FerryProtocol

/// JSON text written through a pointer into space reserved beforehand: the hot encoders (a stored
/// event's object, written once per delivered event) reserve an upper bound of an event's bytes
/// once and then write every key, number and string without an array append each (each append
/// checked the array's uniqueness and capacity; together they were a quarter of delivery).
///
/// Every write checks that it fits (a trap, never a write past the reserved space), so a bound
/// that is too small is a crash in tests, not memory corruption. Use it through
/// `Array.append(addingCapacity:initializingWith:)`, as ``write(into:maxCount:first:_:)`` does.
package struct JSONOutput {
    private let base: UnsafeMutablePointer<UInt8>
    private let capacity: Int
    /// Bytes written so far.
    package private(set) var count = 0
    /// Whether the next key is the object's first (no comma before it).
    package var first: Bool

    private init(base: UnsafeMutablePointer<UInt8>, capacity: Int, first: Bool) {
        self.base = base
        self.capacity = capacity
        self.first = first
    }

    /// Appends at most `maxCount` bytes that `write` writes to `out`, in place; `first` is the
    /// object's state (no field yet) before and after. `write` must not touch `out` itself.
    package static func write(into out: inout [UInt8], maxCount: Int, first: inout Bool, _ write: (inout JSONOutput) -> Void) {
        var state = first
        out.append(addingCapacity: maxCount) { span in
            span.withUnsafeMutableBufferPointer { buffer, initialized in
                var output = JSONOutput(base: buffer.baseAddress! + initialized, capacity: buffer.count - initialized, first: state)
                write(&output)
                initialized += output.count
                state = output.first
            }
        }
        first = state
    }

    /// Traps unless `count` more bytes fit.
    @inline(__always)
    private func reserve(_ count: Int) {
        precondition(count <= capacity - self.count, "JSONOutput: bound too small")
    }

    /// Appends one byte.
    @inline(__always)
    package mutating func byte(_ byte: UInt8) {
        reserve(1)
        base[count] = byte
        count += 1
    }

    /// Appends `bytes` as they are.
    @inline(__always)
    package mutating func raw(_ bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress else { return }
        reserve(bytes.count)
        (base + count).update(from: source.assumingMemoryBound(to: UInt8.self), count: bytes.count)
        count += bytes.count
    }

    /// Appends `text` as it is (a JSON literal or punctuation).
    @inline(__always)
    package mutating func raw(_ text: StaticString) {
        raw(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// Writes the separator and `"name":` of the next field; `name` needs no escape (the
    /// agent's own literals).
    @inline(__always)
    package mutating func key(_ name: StaticString) {
        let length = name.utf8CodeUnitCount
        reserve(length + 4)
        if !first {
            base[count] = UInt8(ascii: ",")
            count += 1
        }
        first = false
        base[count] = UInt8(ascii: "\"")
        (base + count + 1).update(from: name.utf8Start, count: length)
        base[count + 1 + length] = UInt8(ascii: "\"")
        base[count + 2 + length] = UInt8(ascii: ":")
        count += length + 3
    }

    /// Appends the decimal digits of `value`, as ``JSONText/appendInteger(_:to:)`` does.
    @inline(__always)
    package mutating func integer(_ value: UInt64) {
        var digits = 1
        var rest = value
        while rest >= 10 {
            digits += 1
            rest /= 10
        }
        reserve(digits)
        rest = value
        var at = count + digits
        repeat {
            at -= 1
            base[at] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: rest % 10)
            rest /= 10
        } while rest > 0
        count += digits
    }

    /// Appends `id`'s canonical text in quotes.
    @inline(__always)
    package mutating func quoted(_ id: EventID) {
        reserve(38)
        base[count] = UInt8(ascii: "\"")
        id.writeText(into: UnsafeMutableBufferPointer(start: base + count + 1, count: 36))
        base[count + 37] = UInt8(ascii: "\"")
        count += 38
    }

    /// Appends the valid UTF-8 in `utf8` as a quoted, escaped JSON string (at most six bytes
    /// written per byte read, plus the quotes), as ``JSONText/appendString(utf8:to:)`` does.
    package mutating func string(utf8: UnsafeRawBufferPointer) {
        byte(UInt8(ascii: "\""))
        var start = 0
        for index in 0..<utf8.count {
            let byte = utf8[index]
            guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
            if start < index { raw(UnsafeRawBufferPointer(rebasing: utf8[start..<index])) }
            start = index + 1
            escaped(byte)
        }
        if start < utf8.count { raw(UnsafeRawBufferPointer(rebasing: utf8[start...])) }
        byte(UInt8(ascii: "\""))
    }

    /// Appends `bytes` as a JSON string read as `String(decoding:as:)` reads UTF-8 (an invalid
    /// byte becomes U+FFFD, three bytes), as ``JSONText/appendString(decoding:to:)`` does.
    package mutating func string(decoding bytes: UnsafeRawBufferPointer) {
        if bytes.allSatisfy({ $0 < 0x80 }) {
            string(utf8: bytes)
        } else {
            var text = String(decoding: bytes, as: UTF8.self)
            text.withUTF8 { string(utf8: UnsafeRawBufferPointer($0)) }
        }
    }

    /// The escape sequence of a byte JSON does not allow unescaped in a string.
    private mutating func escaped(_ byte: UInt8) {
        self.byte(UInt8(ascii: "\\"))
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): self.byte(byte)
        case UInt8(ascii: "\n"): self.byte(UInt8(ascii: "n"))
        case UInt8(ascii: "\r"): self.byte(UInt8(ascii: "r"))
        case UInt8(ascii: "\t"): self.byte(UInt8(ascii: "t"))
        default:
            let hex: StaticString = "0123456789abcdef"
            raw("u00")
            self.byte(hex.utf8Start[Int(byte >> 4)])
            self.byte(hex.utf8Start[Int(byte & 0xF)])
        }
    }

    /// The bytes written since `start` (valid until the next write).
    package func written(from start: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + start, count: count - start)
    }

    /// Turns the raw newlines written since `start` into spaces (raw newlines only occur as
    /// whitespace in valid JSON), so an object stays on one line.
    package mutating func compact(from start: Int) {
        for index in start..<count where base[index] == UInt8(ascii: "\n") || base[index] == UInt8(ascii: "\r") {
            base[index] = UInt8(ascii: " ")
        }
    }
}
