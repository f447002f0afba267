import FerryProtocol

extension QualityGate {
    /// True when ``judge(_:)`` would pass the event in `frame` untouched (redaction changes
    /// nothing, the plan finds no violation), decided from the frame's bytes in place: no field is
    /// decoded, copied or turned into a string. The ingest stage's common case (a passing event
    /// is stored as it came). False says only "judge the decoded event": the rare paths
    /// (redaction, violations, a field that is not an object) stay in ``judge(_:)`` alone.
    ///
    /// The decision is ``judge(_:)``'s, made by the same code: each field is read into a tape on
    /// the stack (``JSONTape/withNodes(_:_:)``), then the redactor's walk decides without writing
    /// the edits, and the plan's half of the judgement (``checkPlan(type:name:properties:context:into:)``)
    /// runs as it does there.
    ///
    /// `header` is `frame`'s fixed header, already read and validated (`EventHeader(frame)`).
    public func passesUntouched(frame: [UInt8], header: EventHeader) -> Bool {
        frame.withUnsafeBytes { raw in
            let fields = FrameFields(raw, header)
            let type = header.type
            if fields.properties.isEmpty {
                return ParsedJSON.empty.withView { passes(fields, type, properties: $0, hasProperties: false) }
            }
            // The tapes live on the stack for the call: nothing allocated.
            return JSONTape.withNodes(fields.properties) { nodes in
                guard let nodes, nodes[0].kind == .object else { return false }
                return passes(fields, type, properties: JSONView(bytes: fields.properties, nodes: nodes), hasProperties: true)
            }
        }
    }

    private func passes(_ fields: FrameFields, _ type: EventType, properties: JSONView, hasProperties: Bool) -> Bool {
        if fields.context.isEmpty {
            return passes(fields, type, properties: properties, hasProperties: hasProperties, context: nil)
        }
        return JSONTape.withNodes(fields.context) { nodes in
            guard let nodes, nodes[0].kind == .object else { return false }
            return passes(fields, type, properties: properties, hasProperties: hasProperties, context: JSONView(bytes: fields.context, nodes: nodes))
        }
    }

    /// The order of ``judge(_:)``: redaction (any change: false), then the plan.
    private func passes(_ fields: FrameFields, _ type: EventType, properties: JSONView, hasProperties: Bool, context: JSONView?) -> Bool {
        let isTraits = type == .identify || type == .group
        // The redactor and the plan are used through optional chaining, not bound to locals: a
        // binding would copy (retain and release) their compiled cores per event.
        if redactor != nil {
            if hasProperties && redactor?.leavesUnchanged(properties, root: isTraits ? .traits : .properties) == false { return false }
            if let context, redactor?.leavesUnchanged(context, root: .context) == false { return false }
            guard (fields.userID.isEmpty || redactor?.leavesIdentifierUnchanged(fields.userID, .userId) != false)
                && (fields.anonymousID.isEmpty || redactor?.leavesIdentifierUnchanged(fields.anonymousID, .anonymousId) != false)
                && (fields.previousID.isEmpty || redactor?.leavesIdentifierUnchanged(fields.previousID, .previousId) != false)
                && (fields.groupID.isEmpty || redactor?.leavesIdentifierUnchanged(fields.groupID, .groupId) != false) else { return false }
        }
        guard plan != nil else { return true }
        var violations: [Violation] = []
        _ = checkPlan(type: type, name: fields.name, properties: properties, context: context, into: &violations)
        return violations.isEmpty
    }
}

/// The fields of an event frame the gate reads, as views of the frame's bytes (valid within the
/// `withUnsafeBytes` scope that made them). An absent field is empty.
struct FrameFields {
    var name = UnsafeRawBufferPointer(start: nil, count: 0)
    var userID = UnsafeRawBufferPointer(start: nil, count: 0)
    var properties = UnsafeRawBufferPointer(start: nil, count: 0)
    var anonymousID = UnsafeRawBufferPointer(start: nil, count: 0)
    var groupID = UnsafeRawBufferPointer(start: nil, count: 0)
    var previousID = UnsafeRawBufferPointer(start: nil, count: 0)
    var context = UnsafeRawBufferPointer(start: nil, count: 0)

    /// The fields of `raw`, an event frame whose validated fixed header is `header`. A field
    /// given twice in the extension block counts as its last, as `WireEvent(decoding:)` reads it.
    ///
    /// The fields are cut without bounds checks: the validated header declares no more bytes
    /// than the frame holds (`EventHeader(_:)` refuses it otherwise), and each extension's
    /// length is checked against what is left.
    init(_ raw: UnsafeRawBufferPointer, _ header: EventHeader) {
        let base = raw.baseAddress!  // a valid frame holds at least its fixed header
        let nameStart = WireEvent.fixedHeaderSize + header.sourceLength
        let userStart = nameStart + header.nameLength
        let propertiesStart = userStart + header.userIDLength + header.onceKeyLength
        name = UnsafeRawBufferPointer(start: base + nameStart, count: header.nameLength)
        userID = UnsafeRawBufferPointer(start: base + userStart, count: header.userIDLength)
        properties = UnsafeRawBufferPointer(start: base + propertiesStart, count: header.propertiesLength)
        var offset = header.extensionsOffset
        while raw.count - offset >= EventExtension.entryHeaderSize {
            let tag = UInt16(littleEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt16.self))
            let length = Int(UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: offset + 2, as: UInt32.self)))
            let value = offset + EventExtension.entryHeaderSize
            guard length <= raw.count - value else { break }
            let field = UnsafeRawBufferPointer(start: base + value, count: length)
            switch EventExtension.Tag(rawValue: tag) {
            case .anonymousID: anonymousID = field
            case .groupID: groupID = field
            case .previousID: previousID = field
            case .context: context = field
            default: break
            }
            offset = value + length
        }
    }
}
