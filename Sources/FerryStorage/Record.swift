import FerryProtocol

/// The on-disk framing of one log record.
///
/// ```
/// magic:u32le  length:u32le  crc32c:u32le  body[length]
/// body = kind:u8  acceptedAt:u64le  payload
/// ```
/// The CRC covers the length field and the body, so a damaged length is caught too. The magic
/// lets recovery resynchronise to the next record after a damaged one. The payload depends on
/// the kind (see ``Kind``); data format 2 writes ``Kind/eventWithMetadata`` records and reads all
/// three kinds.
public enum LogRecord {
    /// Marks the start of every record.
    public static let magic: UInt32 = 0x1DA1_7EF5
    /// magic + length + crc.
    public static let headerSize = 12
    /// kind + acceptedAt.
    public static let bodyPrefixSize = 9
    /// Upper bound on a record body; anything larger is treated as damage.
    public static let maxBodySize = 16 << 20
    /// The most metadata one record can carry (its length is a u16).
    public static let maxMetadataSize = 0xFFFF

    /// What a record holds.
    public enum Kind: UInt8, Sendable {
        /// Data format 1: an event frame exactly as it arrived on the wire (payload = frame).
        case event = 1
        /// An event erased by a purge or an erasure request: the record keeps its length (so
        /// every offset in the segment stays valid), and its payload is the event id, then
        /// `hasSession:u8 session[16] sequence:u64le` (so the dedup structures still know the
        /// event after a restart), then zeros. Records erased by data format 1 have zeros after
        /// the id.
        case erased = 2
        /// Data format 2: `metadataLength:u16le metadata[metadataLength] frame`, where the
        /// metadata is what the agent itself recorded about the event (``RecordMetadata``) and
        /// the frame is the event exactly as it arrived on the wire.
        case eventWithMetadata = 3
    }

    /// The framed size of an erased record: at least the id and the session fields.
    static let minimumErasedPayload = 16 + 1 + 16 + 8

    /// An ``Kind/erased`` record of exactly `size` framed bytes for the event `id` (with its
    /// session and sequence when it had a session), accepted at `acceptedAt`. Built from these
    /// facts alone, not from the bytes it replaces, so it can overwrite a torn record.
    public static func erasedRecord(size: Int, acceptedAt: UInt64, id: EventID, session: EventID?, sequence: UInt64) -> [UInt8] {
        precondition(size >= headerSize + bodyPrefixSize + 16, "an erased record needs room for the event id")
        var record: [UInt8] = []
        record.reserveCapacity(size)
        appendLE(magic, to: &record)
        appendLE(UInt32(size - headerSize), to: &record)
        appendLE(UInt32(0), to: &record)
        record.append(Kind.erased.rawValue)
        appendLE(acceptedAt, to: &record)
        id.append(to: &record)
        if size >= headerSize + bodyPrefixSize + minimumErasedPayload {
            if let session {
                record.append(1)
                session.append(to: &record)
                appendLE(sequence, to: &record)
            } else {
                record.append(contentsOf: repeatElement(0, count: 25))
            }
        }
        record.append(contentsOf: repeatElement(0, count: size - record.count))
        let crc = record.withUnsafeBytes { raw in
            CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[headerSize...]),
                            continuing: CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[4..<8])))
        }
        record.withUnsafeMutableBytes { $0.storeBytes(of: crc.littleEndian, toByteOffset: 8, as: UInt32.self) }
        return record
    }

    /// Rewrites the framed record in `record` (header and body, exactly one valid record) as an
    /// ``Kind/erased`` record of the same size, with a fresh CRC.
    public static func erase(_ record: inout [UInt8]) {
        precondition(record.count >= headerSize + bodyPrefixSize)
        let facts: (acceptedAt: UInt64, id: EventID, session: EventID?, sequence: UInt64) = record.withUnsafeBytes { raw in
            let body = UnsafeRawBufferPointer(rebasing: raw[headerSize...])
            let decoded = RecordBody(body)
            return (decoded.acceptedAt, decoded.eventID, decoded.session, decoded.sequence)
        }
        record = erasedRecord(size: record.count, acceptedAt: facts.acceptedAt, id: facts.id, session: facts.session,
                              sequence: facts.sequence)
    }

    /// Appends a framed data format 2 event record (``Kind/eventWithMetadata``) to `buffer`.
    public static func appendEvent(_ frame: [UInt8], acceptedAt: UInt64, metadata: RecordMetadata = .init(), to buffer: inout [UInt8]) {
        appendEvent(frame, acceptedAt: acceptedAt, encodedMetadata: metadata.encoded, to: &buffer)
    }

    /// ``appendEvent(_:acceptedAt:metadata:to:)`` with the metadata already encoded (one encoding
    /// for every event of a message). At most ``maxMetadataSize`` bytes.
    public static func appendEvent(_ frame: [UInt8], acceptedAt: UInt64, encodedMetadata meta: [UInt8], to buffer: inout [UInt8]) {
        precondition(meta.count <= maxMetadataSize, "record metadata is limited to \(maxMetadataSize) bytes")
        let length = UInt32(bodyPrefixSize + 2 + meta.count + frame.count)
        let start = buffer.count
        // The fixed part in one append (per-field appends were the top self cost of a record).
        withUnsafeTemporaryAllocation(byteCount: headerSize + bodyPrefixSize + 2, alignment: 8) { fixed in
            fixed.storeBytes(of: magic.littleEndian, toByteOffset: 0, as: UInt32.self)
            fixed.storeBytes(of: length.littleEndian, toByteOffset: 4, as: UInt32.self)
            fixed.storeBytes(of: 0, toByteOffset: 8, as: UInt32.self) // crc, patched below
            fixed.storeBytes(of: Kind.eventWithMetadata.rawValue, toByteOffset: 12, as: UInt8.self)
            fixed.storeBytes(of: acceptedAt.littleEndian, toByteOffset: 13, as: UInt64.self)
            fixed.storeBytes(of: UInt16(meta.count).littleEndian, toByteOffset: 21, as: UInt16.self)
            buffer.append(contentsOf: UnsafeRawBufferPointer(fixed))
        }
        if !meta.isEmpty { buffer += meta }
        buffer += frame
        patchCRC(of: start, in: &buffer)
    }

    /// Appends a framed data format 1 event record (``Kind/event``) to `buffer`: what a format 1
    /// agent wrote (tests of reading old data directories use it).
    public static func appendFormat1Event(_ frame: [UInt8], acceptedAt: UInt64, to buffer: inout [UInt8]) {
        let start = buffer.count
        appendLE(magic, to: &buffer)
        appendLE(UInt32(bodyPrefixSize + frame.count), to: &buffer)
        appendLE(UInt32(0), to: &buffer)
        buffer.append(Kind.event.rawValue)
        appendLE(acceptedAt, to: &buffer)
        buffer += frame
        patchCRC(of: start, in: &buffer)
    }

    private static func patchCRC(of start: Int, in buffer: inout [UInt8]) {
        let crc = buffer.withUnsafeBytes { raw in
            let lengthField = UnsafeRawBufferPointer(rebasing: raw[(start + 4)..<(start + 8)])
            let body = UnsafeRawBufferPointer(rebasing: raw[(start + headerSize)...])
            return CRC32C.checksum(body, continuing: CRC32C.checksum(lengthField))
        }
        buffer.withUnsafeMutableBytes { $0.storeBytes(of: crc.littleEndian, toByteOffset: start + 8, as: UInt32.self) }
    }

    /// The framed size of an event record with a frame of `frameSize` bytes and `metadataSize`
    /// bytes of metadata.
    public static func framedSize(frameSize: Int, metadataSize: Int = 0) -> Int {
        headerSize + bodyPrefixSize + 2 + metadataSize + frameSize
    }

    /// The result of looking for a record at an offset.
    public enum Parse: Equatable {
        /// A valid record: its body range within the buffer and the total framed size.
        case record(body: Range<Int>, size: Int)
        /// Not enough bytes to tell (a record may continue past the buffer).
        case incomplete(needed: Int)
        /// Bytes here are not a valid record.
        case invalid
    }

    /// Checks the record starting at `offset` in `buffer`.
    public static func parse(_ buffer: UnsafeRawBufferPointer, at offset: Int) -> Parse {
        let available = buffer.count - offset
        guard available >= headerSize else { return .incomplete(needed: headerSize) }
        guard buffer.loadUnaligned(fromByteOffset: offset, as: UInt32.self).littleEndian == magic else { return .invalid }
        let length = Int(buffer.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self).littleEndian)
        guard length >= bodyPrefixSize, length <= maxBodySize else { return .invalid }
        guard available >= headerSize + length else { return .incomplete(needed: headerSize + length) }
        let stored = buffer.loadUnaligned(fromByteOffset: offset + 8, as: UInt32.self).littleEndian
        let lengthField = UnsafeRawBufferPointer(rebasing: buffer[(offset + 4)..<(offset + 8)])
        let body = UnsafeRawBufferPointer(rebasing: buffer[(offset + headerSize)..<(offset + headerSize + length)])
        guard CRC32C.checksum(body, continuing: CRC32C.checksum(lengthField)) == stored,
              let kind = Kind(rawValue: body[0]) else { return .invalid }
        switch kind {
        case .event: break
        case .erased: guard length >= bodyPrefixSize + 16 else { return .invalid }
        case .eventWithMetadata:
            guard length >= bodyPrefixSize + 2,
                  length >= bodyPrefixSize + 2 + Int(body.loadUnaligned(fromByteOffset: bodyPrefixSize, as: UInt16.self).littleEndian)
            else { return .invalid }
        }
        return .record(body: (offset + headerSize)..<(offset + headerSize + length), size: headerSize + length)
    }

    /// The offset of the next valid record after `offset` (exclusive), or `nil` if none is
    /// complete within the buffer. With `allowIncomplete` (the buffer is a window onto a longer
    /// file), it also stops at the first place a record may start that the buffer cannot show
    /// whole, so the caller can read on from there instead of skipping it.
    public static func resynchronise(_ buffer: UnsafeRawBufferPointer, after offset: Int, allowIncomplete: Bool = false) -> Int? {
        var candidate = offset + 1
        while candidate < buffer.count {
            if buffer.count - candidate < headerSize {
                // Too short to tell: only a window's caller can look further.
                return allowIncomplete ? candidate : nil
            }
            if buffer[candidate] == 0xF5, buffer[candidate + 1] == 0x7E, buffer[candidate + 2] == 0xA1,
               buffer[candidate + 3] == 0x1D {
                switch parse(buffer, at: candidate) {
                case .record: return candidate
                case .incomplete where allowIncomplete: return candidate
                case .incomplete, .invalid: break
                }
            }
            candidate += 1
        }
        return nil
    }
}

/// What the agent itself recorded about an event when it accepted it, stored beside the frame in
/// a ``LogRecord/Kind/eventWithMetadata`` record.
///
/// Encoded as entries `tag:u8 length:u16le value[length]`. Readers skip tags they do not know,
/// so fields can be added without a new data format. No tags are defined yet: the host-service
/// work adds the sender's kernel-verified origin here.
public struct RecordMetadata: Hashable, Sendable {
    /// One field.
    public struct Field: Hashable, Sendable {
        /// The field's tag.
        public var tag: UInt8
        /// The field's value.
        public var value: [UInt8]
        /// Creates a field.
        public init(tag: UInt8, value: [UInt8]) {
            self.tag = tag
            self.value = value
        }
    }

    /// The encoded entries, complete ones only: one buffer per event read back from the log,
    /// not one per field (``fields`` is decoded from it when asked for).
    private var storage: [UInt8]

    /// The fields, in encoding order.
    public var fields: [Field] {
        get {
            var fields: [Field] = []
            forEachField { tag, value in fields.append(Field(tag: tag, value: Array(value))) }
            return fields
        }
        set { storage = Self.encode(newValue) }
    }

    /// Creates metadata with `fields`.
    public init(fields: [Field] = []) { storage = Self.encode(fields) }

    private static func encode(_ fields: [Field]) -> [UInt8] {
        var out: [UInt8] = []
        for field in fields {
            out.append(field.tag)
            appendLE(UInt16(field.value.count), to: &out)
            out += field.value
        }
        return out
    }

    /// Calls `body` with each field's tag and value, in encoding order, read in place.
    package func forEachField(_ body: (UInt8, UnsafeRawBufferPointer) throws -> Void) rethrows {
        try storage.withUnsafeBytes { bytes in
            var offset = 0
            while bytes.count - offset >= 3 {
                let length = Int(bytes.loadUnaligned(fromByteOffset: offset + 1, as: UInt16.self).littleEndian)
                try body(bytes[offset], UnsafeRawBufferPointer(rebasing: bytes[(offset + 3)..<(offset + 3 + length)]))
                offset += 3 + length
            }
        }
    }

    /// The value of the first field tagged `tag`.
    public subscript(tag: UInt8) -> [UInt8]? {
        var found: [UInt8]?
        forEachField { fieldTag, value in
            if found == nil && fieldTag == tag { found = Array(value) }
        }
        return found
    }

    /// The encoded entries (empty for no fields).
    public var encoded: [UInt8] { storage }

    /// Decodes entries; a cut-short entry ends the list.
    public init(decoding bytes: UnsafeRawBufferPointer) {
        var offset = 0
        while bytes.count - offset >= 3 {
            let length = Int(bytes.loadUnaligned(fromByteOffset: offset + 1, as: UInt16.self).littleEndian)
            guard bytes.count - offset - 3 >= length else { break }
            offset += 3 + length
        }
        storage = Array(UnsafeRawBufferPointer(rebasing: bytes[..<offset]))
    }
}

/// The parts of a record body (as ``LogRecord/parse(_:at:)`` validated it), read in place.
///
/// Ranges are relative to the body's start. For an erased record the frame is empty and the
/// id, session and sequence come from the erased payload.
package struct RecordBody {
    package var kind: LogRecord.Kind
    package var acceptedAt: UInt64
    package var metadata: Range<Int>
    package var frame: Range<Int>
    package var eventID: EventID
    package var session: EventID?
    package var sequence: UInt64

    /// The event's source (client name), read from the frame in `body` (this record's body).
    package func source(in body: UnsafeRawBufferPointer) -> String {
        guard frame.count >= WireEvent.fixedHeaderSize else { return "" }
        let length = Int(body.loadLE(at: frame.lowerBound + 40, as: UInt16.self))
        let start = frame.lowerBound + WireEvent.fixedHeaderSize
        guard start + length <= frame.upperBound else { return "" }
        return String(decoding: body[start..<(start + length)], as: UTF8.self)
    }

    /// The sender's uid recorded in the metadata of `body` (this record's body), if any.
    package func senderUID(in body: UnsafeRawBufferPointer) -> UInt32? {
        var offset = metadata.lowerBound
        while metadata.upperBound - offset >= 3 {
            let tag = body[offset]
            let length = Int(body.loadLE(at: offset + 1, as: UInt16.self))
            guard offset + 3 + length <= metadata.upperBound else { return nil }
            if tag == 1 /* EventOrigin.Tag.uid */ && length == 4 { return body.loadLE(at: offset + 3, as: UInt32.self) }
            offset += 3 + length
        }
        return nil
    }

    /// Reads a validated body.
    package init(_ body: UnsafeRawBufferPointer) {
        kind = LogRecord.Kind(rawValue: body[0]) ?? .erased
        acceptedAt = body.loadLE(at: 1, as: UInt64.self)
        let prefix = LogRecord.bodyPrefixSize
        session = nil
        sequence = 0
        switch kind {
        case .event:
            metadata = prefix..<prefix
            frame = prefix..<body.count
        case .eventWithMetadata:
            let length = Int(body.loadLE(at: prefix, as: UInt16.self))
            metadata = (prefix + 2)..<(prefix + 2 + length)
            frame = metadata.upperBound..<body.count
        case .erased:
            metadata = prefix..<prefix
            frame = body.count..<body.count
            eventID = EventID(bytes: body, at: prefix)
            if body.count >= prefix + LogRecord.minimumErasedPayload, body[prefix + 16] == 1 {
                session = EventID(bytes: body, at: prefix + 17)
                sequence = body.loadLE(at: prefix + 33, as: UInt64.self)
            }
            return
        }
        eventID = frame.count >= 16 ? EventID(bytes: body, at: frame.lowerBound) : .zero
        if frame.count >= WireEvent.fixedHeaderSize {
            sequence = body.loadLE(at: frame.lowerBound + 24, as: UInt64.self)
            // Stored frames were validated at intake; only the session is wanted here.
            session = EventHeader.session(ofValidated: UnsafeRawBufferPointer(rebasing: body[frame]))
        }
    }
}

/// A decoded event record as read back from the log.
public struct StoredEvent: Sendable {
    /// Where the record starts.
    public var position: LogPosition
    /// Framed size on disk.
    public var size: Int
    /// Agent wall-clock time when the record was accepted (ms since the Unix epoch).
    public var acceptedAt: UInt64
    /// The event frame as it arrived (for an erased record: the event id, then zeros).
    public var frame: [UInt8]
    /// What the record holds.
    public var kind: LogRecord.Kind
    /// What the agent recorded about the event when it accepted it (empty for format 1 records).
    public var metadata: RecordMetadata

    /// Creates a stored event.
    public init(position: LogPosition, size: Int, acceptedAt: UInt64, frame: [UInt8], kind: LogRecord.Kind = .eventWithMetadata,
                metadata: RecordMetadata = .init()) {
        self.position = position
        self.size = size
        self.acceptedAt = acceptedAt
        self.frame = frame
        self.kind = kind
        self.metadata = metadata
    }

    /// Decodes the record whose validated body is `body`, found at `position` with framed `size`.
    package init(position: LogPosition, size: Int, body: UnsafeRawBufferPointer) {
        let decoded = RecordBody(body)
        let frame: [UInt8]
        if decoded.kind == .erased {
            // An erased record's "frame" is its id, then zeros (as format 1 readers saw it).
            frame = Array(body[LogRecord.bodyPrefixSize...])
        } else {
            frame = Array(body[decoded.frame])
        }
        self.init(position: position, size: size, acceptedAt: decoded.acceptedAt, frame: frame, kind: decoded.kind,
                  metadata: RecordMetadata(decoding: UnsafeRawBufferPointer(rebasing: body[decoded.metadata])))
    }

    /// True for a record erased by a purge: it holds no event any more.
    public var isErased: Bool { kind == .erased }

    /// The fixed header of the event (validated when it was accepted).
    public func header() throws(ProtocolError) -> EventHeader { try EventHeader(frame) }
    /// The fully decoded event. The event-model extensions are not checked again (the agent did
    /// at ingest; a frame stored by an agent that did not know them is read as it is).
    public func decoded() throws(ProtocolError) -> WireEvent { try WireEvent(decoding: frame, checkingFields: false) }
}

/// A place in the log: a segment and a byte offset within it.
public struct LogPosition: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The segment's sequence number (its file name).
    public var segment: UInt64
    /// Byte offset within the segment file.
    public var offset: Int64

    /// Creates a position.
    public init(segment: UInt64, offset: Int64) {
        self.segment = segment
        self.offset = offset
    }

    public static func < (lhs: LogPosition, rhs: LogPosition) -> Bool {
        (lhs.segment, lhs.offset) < (rhs.segment, rhs.offset)
    }

    public var description: String { "\(segment):\(offset)" }
}

extension StoredEvent {
    /// The event id, read from the frame's first 16 bytes.
    public var decodedID: EventID { EventID(bytes: frame) }
}

/// An erased record to write at a recorded place: where it goes, its size, and the facts an
/// erased record keeps (acceptedAt, the event id, its session and sequence). It is taken once
/// from the live record and recorded before anything is erased, so writing it again is idempotent
/// and needs nothing from the record on disk, which a power cut may have torn half-way through an
/// earlier overwrite. The one way the log builds an erased record (``bytes``).
public struct ErasedRecord: Sendable, Hashable, Codable {
    /// Where the record starts.
    public var position: LogPosition
    /// Framed size on disk.
    public var size: Int
    /// When the event was accepted.
    public var acceptedAt: UInt64
    /// The erased event's id.
    public var eventID: EventID
    /// The event's client session and sequence number, if it had a session.
    public var session: EventID?
    public var sequence: UInt64

    /// The erased form of `event`, read from the log.
    public init(_ event: StoredEvent) {
        let header = try? event.header()
        position = event.position
        size = event.size
        acceptedAt = event.acceptedAt
        eventID = event.decodedID
        session = header?.session
        // Only an event with a session has a sequence an erased record keeps.
        sequence = session == nil ? 0 : header?.sequence ?? 0
    }

    /// The whole framed record (``LogRecord/erasedRecord(size:acceptedAt:id:session:sequence:)``).
    public var bytes: [UInt8] {
        LogRecord.erasedRecord(size: size, acceptedAt: acceptedAt, id: eventID, session: session, sequence: sequence)
    }

    private enum CodingKeys: String, CodingKey {
        case segment = "s", offset = "o", size = "n", acceptedAt = "a", eventID = "i", session = "e", sequence = "q"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        position = LogPosition(segment: try container.decode(UInt64.self, forKey: .segment),
                               offset: try container.decode(Int64.self, forKey: .offset))
        size = try container.decode(Int.self, forKey: .size)
        acceptedAt = try container.decode(UInt64.self, forKey: .acceptedAt)
        func id(_ text: String?, _ key: CodingKeys) throws -> EventID? {
            guard let text else { return nil }
            guard let id = EventID(text) else {
                throw DecodingError.dataCorruptedError(forKey: key, in: container, debugDescription: "not an event id")
            }
            return id
        }
        eventID = try id(try container.decode(String.self, forKey: .eventID), .eventID)!
        session = try id(try container.decodeIfPresent(String.self, forKey: .session), .session)
        sequence = try container.decodeIfPresent(UInt64.self, forKey: .sequence) ?? 0
        guard size >= LogRecord.headerSize + LogRecord.bodyPrefixSize + 16 else {
            throw DecodingError.dataCorruptedError(forKey: .size, in: container, debugDescription: "too small for an erased record")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(position.segment, forKey: .segment)
        try container.encode(position.offset, forKey: .offset)
        try container.encode(size, forKey: .size)
        try container.encode(acceptedAt, forKey: .acceptedAt)
        try container.encode(eventID.description, forKey: .eventID)
        try container.encodeIfPresent(session?.description, forKey: .session)
        if session != nil { try container.encode(sequence, forKey: .sequence) }
    }
}
