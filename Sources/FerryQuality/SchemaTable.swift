/// The compiled schemas as the validator reads them per event: one flat, trivial record per
/// schema (``FlatSchema``: flags, counts, indices into contiguous arrays) next to the full
/// ``Schema`` (messages, regular expressions, `const` and non-string `enum` values), which only
/// the rarer checks and the violation messages read. Reading a flat record retains nothing: the
/// passing path of ``Validator`` does no reference counting.
struct FlatSchema {
    struct Flags: OptionSet {
        let rawValue: UInt16
        static let never = Flags(rawValue: 1 << 0)
        static let types = Flags(rawValue: 1 << 1)
        static let const = Flags(rawValue: 1 << 2)
        /// `enum` with a value that is not a string (checked on the full schema).
        static let enumAny = Flags(rawValue: 1 << 3)
        /// `enum` of strings only (compared with ``SchemaTable/enumStrings`` in place).
        static let enumStrings = Flags(rawValue: 1 << 4)
        static let not = Flags(rawValue: 1 << 5)
        static let items = Flags(rawValue: 1 << 6)
        /// `pattern`, `minLength`, `maxLength` or `format`.
        static let text = Flags(rawValue: 1 << 7)
        /// `pattern` or `format` (read on the full schema).
        static let patternOrFormat = Flags(rawValue: 1 << 8)
        /// `minimum`, `maximum`, `exclusiveMinimum` or `exclusiveMaximum`.
        static let bounds = Flags(rawValue: 1 << 9)
        static let additionalForbidden = Flags(rawValue: 1 << 10)
        static let additionalSchema = Flags(rawValue: 1 << 11)
    }

    var flags: Flags = []
    /// ``Schema/ruleCount`` (0 and not `never`: nothing to check).
    var ruleCount: Int32 = 0
    var types: Schema.Types = []
    var memberStart: Int32 = 0
    var memberCount: Int32 = 0
    var requiredCount: Int32 = 0
    var additional: Int32 = -1
    var items: Int32 = -1
    var not: Int32 = -1
    var enumStart: Int32 = 0
    var enumCount: Int32 = 0
    /// -1: none.
    var minLength: Int32 = -1
    var maxLength: Int32 = -1
}

/// A member a flat schema names: its key's bytes in ``SchemaTable/bytes``.
struct FlatMember {
    var keyStart: Int32
    var keyCount: Int32
    /// Its schema, -1 for none.
    var schema: Int32
    /// Its bit in the required mask, -1 for none.
    var requiredBit: Int32
}

/// A string of a flat `enum`: its UTF-8 bytes in ``SchemaTable/bytes``.
struct FlatString {
    var start: Int32
    var count: Int32
}


/// The schemas of a plan, flat and full, read in place (pointers into ``SchemaStorage``, valid
/// while the plan that owns it lives).
struct SchemaTable {
    let full: UnsafeBufferPointer<Schema>
    let flat: UnsafePointer<FlatSchema>
    let members: UnsafePointer<FlatMember>
    let enumStrings: UnsafePointer<FlatString>
    let bytes: UnsafePointer<UInt8>

    /// Whether schema `index` checks nothing.
    func isTrivial(_ index: Int) -> Bool { flat[index].ruleCount == 0 && !flat[index].flags.contains(.never) }
}

/// Owns the storage a ``SchemaTable`` points into: built once per load from the compiled
/// schemas, never changed, freed with the plan.
final class SchemaStorage: @unchecked Sendable {
    // Written only by init; read-only afterwards (so sharing across threads is safe).
    private let full: UnsafeMutableBufferPointer<Schema>
    private let flat: UnsafeMutableBufferPointer<FlatSchema>
    private let members: UnsafeMutableBufferPointer<FlatMember>
    private let enumStrings: UnsafeMutableBufferPointer<FlatString>
    private let bytes: UnsafeMutableBufferPointer<UInt8>

    init(_ schemas: [Schema]) {
        var flatSchemas: [FlatSchema] = []
        var flatMembers: [FlatMember] = []
        var strings: [FlatString] = []
        var pool: [UInt8] = []
        func intern(_ text: [UInt8]) -> (Int32, Int32) {
            let start = Int32(pool.count)
            pool += text
            return (start, Int32(text.count))
        }
        for schema in schemas {
            var record = FlatSchema()
            record.ruleCount = Int32(clamping: schema.ruleCount)
            if schema.never { record.flags.insert(.never) }
            if let types = schema.types { record.flags.insert(.types); record.types = types }
            if schema.constValue != nil { record.flags.insert(.const) }
            if let values = schema.enumValues {
                var texts: [[UInt8]] = []
                for value in values { if case .string(let text) = value { texts.append(Array(text.utf8)) } }
                if texts.count == values.count {
                    record.flags.insert(.enumStrings)
                    record.enumStart = Int32(strings.count)
                    record.enumCount = Int32(texts.count)
                    for text in texts {
                        let (start, count) = intern(text)
                        strings.append(FlatString(start: start, count: count))
                    }
                } else {
                    record.flags.insert(.enumAny)
                }
            }
            if let not = schema.not { record.flags.insert(.not); record.not = Int32(not) }
            if let items = schema.items { record.flags.insert(.items); record.items = Int32(items) }
            if schema.pattern != nil || schema.format != nil { record.flags.formUnion([.patternOrFormat, .text]) }
            if let minimum = schema.minLength { record.flags.insert(.text); record.minLength = Int32(minimum) }
            if let maximum = schema.maxLength { record.flags.insert(.text); record.maxLength = Int32(maximum) }
            if schema.minimum != nil || schema.maximum != nil || schema.exclusiveMinimum != nil || schema.exclusiveMaximum != nil {
                record.flags.insert(.bounds)
            }
            switch schema.additional {
            case .allowed: break
            case .forbidden: record.flags.insert(.additionalForbidden)
            case .schema(let index): record.flags.insert(.additionalSchema); record.additional = Int32(index)
            }
            record.memberStart = Int32(flatMembers.count)
            record.memberCount = Int32(schema.members.count)
            record.requiredCount = Int32(schema.requiredCount)
            for member in schema.members {
                let (start, count) = intern(member.key)
                flatMembers.append(FlatMember(keyStart: start, keyCount: count, schema: Int32(member.schema ?? -1),
                                              requiredBit: Int32(member.requiredBit ?? -1)))
            }
            flatSchemas.append(record)
        }
        func copy<Element>(_ elements: [Element]) -> UnsafeMutableBufferPointer<Element> {
            // At least one element, so every table has a base address.
            let buffer = UnsafeMutableBufferPointer<Element>.allocate(capacity: max(elements.count, 1))
            _ = buffer.initialize(fromContentsOf: elements)
            return UnsafeMutableBufferPointer(rebasing: buffer[0..<elements.count])
        }
        full = copy(schemas)
        flat = copy(flatSchemas)
        members = copy(flatMembers)
        enumStrings = copy(strings)
        bytes = copy(pool)
    }

    deinit {
        full.deinitialize().deallocate()
        flat.deallocate()
        members.deallocate()
        enumStrings.deallocate()
        bytes.deallocate()
    }

    /// The table, valid while this storage lives.
    @inline(__always)
    var table: SchemaTable {
        SchemaTable(full: UnsafeBufferPointer(full), flat: flat.baseAddress!, members: members.baseAddress!,
                    enumStrings: enumStrings.baseAddress!, bytes: bytes.baseAddress!)
    }
}
