import FerryProtocol

/// The gate's one-pass check of one field of an event frame (`properties`, `traits` or
/// `context`): the JSON is parsed and, in the same pass, each value is checked against its flat
/// schema (``SchemaTable``) and each string that may be personal is shown to the detectors. No
/// tape is written and nothing is walked twice; nothing is allocated or retained.
///
/// It answers ``Outcome/passes`` only when the two-pass check (``JSONTape`` then ``Validator``
/// and the redactor's walk, the reference ``QualityGate/judge(_:)`` agrees with) would pass the
/// field untouched: `OnePassCheckTests` and the `plan` fuzzer compare the two. What it does not
/// decide in one pass — keywords that need the full schema of a subtree (`const`, an `enum` with
/// a value that is not a string, `not`), escaped member names or strings a rule or a detector
/// must read decoded — it answers ``Outcome/unsure``, and the gate asks the two-pass check.
struct OnePassCheck {
    /// What the check found.
    enum Outcome: Equatable {
        /// The field is valid JSON, breaks no rule of its schema, and redaction leaves it as it is.
        case passes
        /// It breaks a rule, the detectors would change one of its strings, or it is not one
        /// JSON object: ``QualityGate/judge(_:)`` must decide (for a planned event, that
        /// judgement redacts or refuses it; an unplanned event's properties the plan never
        /// reads, so their syntax alone does not make it fail).
        case judge
        /// Not decided in one pass: ask the two-pass check.
        case unsure
    }

    private let base: UnsafeRawPointer
    private let count: Int
    private var index = 0
    /// The plan's schemas; nil with no plan (syntax and detectors only).
    private let table: SchemaTable?
    /// The detectors the strings are shown to; nil when none is on.
    private let probe: DetectionProbe?

    private init(base: UnsafeRawPointer, count: Int, table: SchemaTable?, probe: DetectionProbe?) {
        self.base = base
        self.count = count
        self.table = table
        self.probe = probe
    }

    /// Checks `bytes`, which must hold one JSON object, against schema `schema` of `table` (-1 or
    /// a nil table: no schema), showing its strings to `probe`'s detectors.
    static func check(object bytes: UnsafeRawBufferPointer, schema: Int, table: SchemaTable?, probe: DetectionProbe?) -> Outcome {
        guard let base = bytes.baseAddress else { return .judge }
        var check = OnePassCheck(base: base, count: bytes.count, table: table, probe: probe)
        check.skipWhitespace()
        guard check.index < check.count, check.byte(check.index) == UInt8(ascii: "{") else { return .judge }
        let outcome = check.value(Int32(truncatingIfNeeded: schema), depth: 0, key: nil)
        guard outcome == .passes else { return outcome }
        check.skipWhitespace()
        return check.index == check.count ? .passes : .judge
    }

    @inline(__always)
    private func byte(_ offset: Int) -> UInt8 { base.load(fromByteOffset: offset, as: UInt8.self) }

    private mutating func skipWhitespace() {
        while index < count {
            let next = byte(index)
            guard next == 0x20 || next == 0x0A || next == 0x0D || next == 0x09 else { return }
            index &+= 1
        }
    }

    /// The flat record of `schema` when it checks something (nil: any value passes, only its
    /// syntax and strings are looked at).
    @inline(__always)
    private func flat(_ schema: Int32) -> UnsafePointer<FlatSchema>? {
        guard schema >= 0, let table else { return nil }
        let record = table.flat + Int(schema)
        return record.pointee.ruleCount == 0 && !record.pointee.flags.contains(.never) ? nil : record
    }

    /// One value from its first byte: parsed, checked against `schema` and its strings shown to
    /// the detectors. `key` is the raw name of the member the value is under (an array's elements
    /// are under their array's), as the redactor's walk passes it to the detectors.
    private mutating func value(_ schema: Int32, depth: Int, key: UnsafeRawBufferPointer?) -> Outcome {
        guard depth < JSONTape.maxDepth, index < count else { return .judge }
        let schema = flat(schema)
        if let schema {
            let flags = schema.pointee.flags
            if flags.contains(.never) { return .judge }
            if !flags.isDisjoint(with: [.const, .enumAny, .not]) { return .unsure }
        }
        switch byte(index) {
        case UInt8(ascii: "{"): return object(schema, depth: depth)
        case UInt8(ascii: "["): return array(schema, depth: depth, key: key)
        case UInt8(ascii: "\""): return string(schema, key: key)
        case UInt8(ascii: "t"): return literal("true", schema, .boolean)
        case UInt8(ascii: "f"): return literal("false", schema, .boolean)
        case UInt8(ascii: "n"): return literal("null", schema, .null)
        default: return number(schema)
        }
    }

    /// Whether a value of `kind` (not a number) may stand where `schema` is: its `type`, and a
    /// string `enum` only takes strings.
    @inline(__always)
    private static func admits(_ schema: UnsafePointer<FlatSchema>?, _ kind: Schema.Types) -> Bool {
        guard let schema else { return true }
        let flags = schema.pointee.flags
        if flags.contains(.types) && !schema.pointee.types.contains(kind) { return false }
        return !flags.contains(.enumStrings) || kind == .string
    }

    private mutating func object(_ schema: UnsafePointer<FlatSchema>?, depth: Int) -> Outcome {
        guard Self.admits(schema, .object) else { return .judge }
        index &+= 1
        skipWhitespace()
        var seen: UInt64 = 0
        let members = schema.map { table!.members + Int($0.pointee.memberStart) }
        let memberCount = schema.map { Int($0.pointee.memberCount) } ?? 0
        if index < count && byte(index) == UInt8(ascii: "}") {
            index &+= 1
        } else {
            while true {
                guard index < count, byte(index) == UInt8(ascii: "\"") else { return .judge }
                let keyStart = index &+ 1
                let key: UnsafeRawBufferPointer
                // A name the schema lists, written as it is (the common case): found by comparing
                // its bytes and the closing quote, without scanning the name first.
                let found = memberCount > 0 ? literalMember(members!, memberCount, at: keyStart) : -1
                if found >= 0 {
                    key = UnsafeRawBufferPointer(start: base + keyStart, count: Int(members![found].keyCount))
                    index = keyStart &+ key.count &+ 1
                } else {
                    let name = JSONScan.string(base, count: count, from: keyStart)
                    guard name.fault == nil else { return .judge }
                    key = UnsafeRawBufferPointer(start: base + keyStart, count: name.end &- keyStart)
                    index = name.end &+ 1
                    // A name with an escape is compared decoded by the validator. One without
                    // is not listed: had it been, `literalMember` would have found it (a name
                    // that is not literal holds a byte that raw text cannot).
                    if memberCount > 0 && name.escaped { return .unsure }
                }
                skipWhitespace()
                guard index < count, byte(index) == UInt8(ascii: ":") else { return .judge }
                index &+= 1
                skipWhitespace()
                var member: Int32 = -1
                if let schema {
                    if found >= 0 {
                        let bit = members![found].requiredBit
                        if bit >= 0 { seen |= 1 &<< UInt64(bit) }
                        member = members![found].schema
                    } else if schema.pointee.flags.contains(.additionalForbidden) {
                        return .judge
                    } else if schema.pointee.flags.contains(.additionalSchema) {
                        member = schema.pointee.additional
                    }
                }
                let outcome = value(member, depth: depth &+ 1, key: key)
                guard outcome == .passes else { return outcome }
                skipWhitespace()
                guard index < count else { return .judge }
                let separator = byte(index)
                index &+= 1
                if separator == UInt8(ascii: "}") { break }
                guard separator == UInt8(ascii: ",") else { return .judge }
                skipWhitespace()
            }
        }
        if let schema {
            let requiredCount = Int(schema.pointee.requiredCount)
            if requiredCount > 0 && seen != (requiredCount == 64 ? .max : (1 &<< UInt64(requiredCount)) &- 1) { return .judge }
        }
        return .passes
    }

    /// The member among `memberCount` whose name is written at `start` as it is, followed by
    /// the closing quote; -1 for none (a name with an escape, or one the schema does not list).
    @inline(__always)
    private func literalMember(_ members: UnsafePointer<FlatMember>, _ memberCount: Int, at start: Int) -> Int {
        for position in 0..<memberCount where members[position].literal {
            if isWritten(Int(members[position].keyStart), Int(members[position].keyCount), at: start) { return position }
        }
        return -1
    }

    /// The length of the string of `schema`'s `enum` written at `start` as it is, followed by the
    /// closing quote and nothing the detectors look at (``FlatString/plain``); nil for none.
    @inline(__always)
    private func plainEnumString(_ schema: UnsafePointer<FlatSchema>, at start: Int) -> Int? {
        let strings = table!.enumStrings + Int(schema.pointee.enumStart)
        for position in 0..<Int(schema.pointee.enumCount) where strings[position].plain {
            let length = Int(strings[position].count)
            if isWritten(Int(strings[position].start), length, at: start) { return length }
        }
        return nil
    }

    /// Whether the `length` bytes at `poolStart` in the table's byte pool are written at `start`
    /// and followed by a closing quote.
    @inline(__always)
    private func isWritten(_ poolStart: Int, _ length: Int, at start: Int) -> Bool {
        count &- start > length && byte(start &+ length) == UInt8(ascii: "\"")
            && Validator.equalBytes(table!.bytes + poolStart, base + start, length)
    }

    private mutating func array(_ schema: UnsafePointer<FlatSchema>?, depth: Int, key: UnsafeRawBufferPointer?) -> Outcome {
        guard Self.admits(schema, .array) else { return .judge }
        let items = schema.map { $0.pointee.flags.contains(.items) ? $0.pointee.items : -1 } ?? -1
        index &+= 1
        skipWhitespace()
        if index < count && byte(index) == UInt8(ascii: "]") {
            index &+= 1
            return .passes
        }
        while true {
            let outcome = value(items, depth: depth &+ 1, key: key)
            guard outcome == .passes else { return outcome }
            skipWhitespace()
            guard index < count else { return .judge }
            let separator = byte(index)
            index &+= 1
            if separator == UInt8(ascii: "]") { return .passes }
            guard separator == UInt8(ascii: ",") else { return .judge }
            skipWhitespace()
        }
    }

    private mutating func string(_ schema: UnsafePointer<FlatSchema>?, key: UnsafeRawBufferPointer?) -> Outcome {
        let start = index &+ 1
        if let schema, schema.pointee.flags.contains(.enumStrings), let length = plainEnumString(schema, at: start) {
            // One of the enum's strings as written (the common case of an enum): no scan.
            index = start &+ length &+ 1
            return stringChecks(schema, UnsafeRawBufferPointer(start: base + start, count: length), escaped: false, enumChecked: true)
        }
        let scanned = JSONScan.string(base, count: count, from: start)
        guard scanned.fault == nil else { return .judge }
        let text = UnsafeRawBufferPointer(start: base + start, count: scanned.end &- start)
        index = scanned.end &+ 1
        if scanned.candidate, let probe {
            // The detectors read a string decoded.
            if scanned.escaped { return .unsure }
            if !probe.leavesUnchanged(text, key: key) { return .judge }
        }
        guard let schema else { return .passes }
        return stringChecks(schema, text, escaped: scanned.escaped, enumChecked: false)
    }

    /// A string's checks against `schema`: `text` as written (decoded unless `escaped`).
    @inline(__always)
    private func stringChecks(_ schema: UnsafePointer<FlatSchema>, _ text: UnsafeRawBufferPointer, escaped: Bool, enumChecked: Bool) -> Outcome {
        let flags = schema.pointee.flags
        if flags.contains(.types) && !schema.pointee.types.contains(.string) { return .judge }
        if flags.contains(.enumStrings) && !enumChecked {
            if escaped { return .unsure }
            if !Validator.enumStringsContain(table!, schema, text) { return .judge }
        }
        guard flags.contains(.text) else { return .passes }
        // The common bound alone: within that many bytes as written (as the validator decides).
        if !flags.contains(.patternOrFormat) && schema.pointee.minLength < 0 && text.count <= Int(schema.pointee.maxLength) {
            return .passes
        }
        if escaped { return .unsure }
        return Validator.textPasses(table!.full.baseAddress! + (schema - table!.flat), schema, text) ? .passes : .judge
    }

    private mutating func literal(_ text: StaticString, _ schema: UnsafePointer<FlatSchema>?, _ kind: Schema.Types) -> Outcome {
        let length = text.utf8CodeUnitCount
        guard count &- index >= length else { return .judge }
        for offset in 0..<length where byte(index &+ offset) != text.utf8Start[offset] { return .judge }
        index &+= length
        return Self.admits(schema, kind) ? .passes : .judge
    }

    private mutating func number(_ schema: UnsafePointer<FlatSchema>?) -> Outcome {
        let start = index
        let scanned = JSONScan.number(base, count: count, from: start)
        guard scanned.fault == nil else { return .judge }
        index = scanned.end
        guard let schema else { return .passes }
        let flags = schema.pointee.flags
        if flags.contains(.enumStrings) { return .judge }
        let node = JSONNode(kind: .number, escaped: false, start: Int32(truncatingIfNeeded: start), end: Int32(truncatingIfNeeded: index),
                            next: 0, count: 0)
        let bytes = UnsafeRawBufferPointer(start: base, count: count)
        if flags.contains(.types) {
            let types = schema.pointee.types
            guard types.contains(.number) || (types.contains(.integer) && JSONTape.isInteger(node, in: bytes)) else { return .judge }
        }
        guard flags.contains(.bounds) else { return .passes }
        let full = table!.full.baseAddress! + (schema - table!.flat)
        return Validator.numberPasses(full, JSONTape.double(node, in: bytes)) ? .passes : .judge
    }
}
