import FerryProtocol
import Foundation

/// The on-disk framing of one log record.
///
/// ```
/// magic:u32le  length:u32le  crc32c:u32le  body[length]
/// body = kind:u8  acceptedAt:u64le  payload
/// ```
/// The CRC covers the length field and the body, so a damaged length is caught too. The magic
/// lets recovery resynchronise to the next record after a damaged one.
public enum LogRecord {
    /// Marks the start of every record.
    public static let magic: UInt32 = 0x1DA1_7EF5
    /// magic + length + crc.
    public static let headerSize = 12
    /// kind + acceptedAt.
    public static let bodyPrefixSize = 9
    /// Upper bound on a record body; anything larger is treated as damage.
    public static let maxBodySize = 16 << 20

    /// What a record holds.
    public enum Kind: UInt8, Sendable {
        /// An event frame exactly as it arrived on the wire.
        case event = 1
        /// An event erased by a purge or an erasure request: the record keeps its length (so
        /// every offset in the segment stays valid) and the event id (so the dedup window still
        /// knows it), and every other byte of the frame is zero.
        case erased = 2
    }

    /// Rewrites the framed record in `record` (header and body, exactly one record) as an
    /// ``Kind/erased`` record of the same size, with a fresh CRC.
    public static func erase(_ record: inout [UInt8]) {
        precondition(record.count >= headerSize + bodyPrefixSize)
        record[headerSize] = Kind.erased.rawValue
        let keep = headerSize + bodyPrefixSize + 16 // the event id
        if record.count > keep {
            for i in keep..<record.count { record[i] = 0 }
        }
        let crc = record.withUnsafeBytes { raw in
            CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[headerSize...]),
                            continuing: CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[4..<8])))
        }
        record.withUnsafeMutableBytes { $0.storeBytes(of: crc.littleEndian, toByteOffset: 8, as: UInt32.self) }
    }

    /// The framed record of `event` as it is on disk, rewritten as an ``Kind/erased`` record of
    /// the same size (see ``erase(_:)``). The one place that knows how a stored event's record is
    /// laid out, for both ways of erasing (by content, ``SegmentedLog/erase(from:matching:)``, and
    /// by recorded position, ``SegmentedLog/erase(at:afterEach:)``).
    public static func erasedImage(of event: StoredEvent) -> [UInt8] {
        var record = [UInt8](repeating: 0, count: headerSize)
        record.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: magic.littleEndian, toByteOffset: 0, as: UInt32.self)
            raw.storeBytes(of: UInt32(event.size - headerSize).littleEndian, toByteOffset: 4, as: UInt32.self)
        }
        record.append(Kind.event.rawValue)
        appendLE(event.acceptedAt, to: &record)
        record += event.frame
        erase(&record)
        return record
    }

    /// Appends a framed event record to `buffer`.
    public static func appendEvent(_ frame: [UInt8], acceptedAt: UInt64, to buffer: inout [UInt8]) {
        let length = UInt32(bodyPrefixSize + frame.count)
        let start = buffer.count
        appendLE(magic, to: &buffer)
        appendLE(length, to: &buffer)
        appendLE(UInt32(0), to: &buffer) // crc, patched below
        buffer.append(Kind.event.rawValue)
        appendLE(acceptedAt, to: &buffer)
        buffer += frame
        let crc = buffer.withUnsafeBytes { raw in
            let lengthField = UnsafeRawBufferPointer(rebasing: raw[(start + 4)..<(start + 8)])
            let body = UnsafeRawBufferPointer(rebasing: raw[(start + headerSize)...])
            return CRC32C.checksum(body, continuing: CRC32C.checksum(lengthField))
        }
        buffer.withUnsafeMutableBytes { $0.storeBytes(of: crc.littleEndian, toByteOffset: start + 8, as: UInt32.self) }
    }

    /// The framed size of an event record with a frame of `frameSize` bytes.
    public static func framedSize(frameSize: Int) -> Int { headerSize + bodyPrefixSize + frameSize }

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
              Kind(rawValue: body[0]) != nil else { return .invalid }
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

    /// Creates a stored event.
    public init(position: LogPosition, size: Int, acceptedAt: UInt64, frame: [UInt8], kind: LogRecord.Kind = .event) {
        self.position = position
        self.size = size
        self.acceptedAt = acceptedAt
        self.frame = frame
        self.kind = kind
    }

    /// True for a record erased by a purge: it holds no event any more.
    public var isErased: Bool { kind == .erased }

    /// The fixed header of the event (validated when it was accepted).
    public func header() throws(ProtocolError) -> EventHeader { try EventHeader(frame) }
    /// The fully decoded event.
    public func decoded() throws(ProtocolError) -> WireEvent { try WireEvent(decoding: frame) }
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

/// An erased record to write at a recorded place: where it goes, its size, and the bytes of its
/// body that an erased record keeps (kind, acceptedAt, the event id; everything after them is
/// zero). It is computed once from the live record and recorded before anything is erased, so
/// writing it again is idempotent and needs nothing from the record on disk, which a power cut
/// may have torn half-way through an earlier overwrite.
public struct ErasedRecord: Sendable, Hashable, Codable {
    /// Where the record starts.
    public var position: LogPosition
    /// Framed size on disk.
    public var size: Int
    /// The leading body bytes of the erased record; the rest of the body is zeros.
    public var kept: [UInt8]

    /// The erased form of `event`, read from the log.
    public init(_ event: StoredEvent) {
        position = event.position
        size = event.size
        let image = LogRecord.erasedImage(of: event)
        // Trailing zeros need not be recorded, but the event id is kept whole even when it ends
        // in zero bytes (it is how a redo recognises the event).
        let minimum = min(image.count, LogRecord.headerSize + LogRecord.bodyPrefixSize + 16)
        var end = image.count
        while end > minimum && image[end - 1] == 0 { end -= 1 }
        kept = Array(image[LogRecord.headerSize..<end])
    }

    /// The whole framed record: header (magic, length, CRC32C) and body.
    public var bytes: [UInt8] {
        var record = [UInt8](repeating: 0, count: LogRecord.headerSize)
        record.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: LogRecord.magic.littleEndian, toByteOffset: 0, as: UInt32.self)
            raw.storeBytes(of: UInt32(size - LogRecord.headerSize).littleEndian, toByteOffset: 4, as: UInt32.self)
        }
        record += kept
        record += [UInt8](repeating: 0, count: max(0, size - record.count))
        let crc = record.withUnsafeBytes { raw in
            CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[LogRecord.headerSize...]),
                            continuing: CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[4..<8])))
        }
        record.withUnsafeMutableBytes { $0.storeBytes(of: crc.littleEndian, toByteOffset: 8, as: UInt32.self) }
        return record
    }

    /// The erased event's id (kept at body offset 9).
    public var eventID: EventID {
        let start = LogRecord.bodyPrefixSize
        var id = kept.count > start ? Array(kept[start...].prefix(16)) : []
        id += [UInt8](repeating: 0, count: 16 - id.count)
        return EventID(bytes: id)
    }

    private enum CodingKeys: String, CodingKey { case segment = "s", offset = "o", size = "n", kept = "k" }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        position = LogPosition(segment: try container.decode(UInt64.self, forKey: .segment),
                               offset: try container.decode(Int64.self, forKey: .offset))
        size = try container.decode(Int.self, forKey: .size)
        guard let data = Data(base64Encoded: try container.decode(String.self, forKey: .kept)) else {
            throw DecodingError.dataCorruptedError(forKey: .kept, in: container, debugDescription: "not base64")
        }
        kept = Array(data)
        guard size >= LogRecord.headerSize + kept.count, kept.count >= LogRecord.bodyPrefixSize else {
            throw DecodingError.dataCorruptedError(forKey: .size, in: container, debugDescription: "size too small")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(position.segment, forKey: .segment)
        try container.encode(position.offset, forKey: .offset)
        try container.encode(size, forKey: .size)
        try container.encode(Data(kept).base64EncodedString(), forKey: .kept)
    }
}
