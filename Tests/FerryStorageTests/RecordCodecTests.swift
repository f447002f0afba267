@testable import FerryStorage
import FerryTestKit
import FerryProtocol
import Testing

@Suite("Log record codec")
struct RecordCodecTests {
    static func framed(_ frame: [UInt8], acceptedAt: UInt64 = 0x0102_0304_0506_0708) -> [UInt8] {
        var buffer: [UInt8] = []
        LogRecord.appendEvent(frame, acceptedAt: acceptedAt, to: &buffer)
        return buffer
    }

    static func parse(_ buffer: [UInt8], at offset: Int = 0) -> LogRecord.Parse {
        buffer.withUnsafeBytes { LogRecord.parse($0, at: offset) }
    }

    @Test("a record round-trips: frame, acceptedAt, size, kind", arguments: [0, 1, 52, 1000, 70_000])
    func roundTrip(frameSize: Int) throws {
        let frame = (0..<frameSize).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let acceptedAt: UInt64 = 1_732_000_000_123
        let prefix: [UInt8] = [9, 9, 9] // the record need not start at offset 0
        var buffer = prefix
        LogRecord.appendEvent(frame, acceptedAt: acceptedAt, to: &buffer)
        #expect(buffer.count == prefix.count + LogRecord.framedSize(frameSize: frameSize))
        #expect(readLE(buffer, at: prefix.count, as: UInt32.self) == LogRecord.magic)
        #expect(Int(readLE(buffer, at: prefix.count + 4, as: UInt32.self)) == LogRecord.bodyPrefixSize + 2 + frameSize)

        guard case .record(let body, let size) = Self.parse(buffer, at: prefix.count) else {
            Issue.record("a freshly framed record does not parse: \(Self.parse(buffer, at: prefix.count))")
            return
        }
        #expect(size == LogRecord.framedSize(frameSize: frameSize))
        #expect(body == (prefix.count + LogRecord.headerSize)..<buffer.count)
        #expect(buffer[body.lowerBound] == LogRecord.Kind.eventWithMetadata.rawValue)
        #expect(readLE(buffer, at: body.lowerBound + 1, as: UInt64.self) == acceptedAt)
        #expect(readLE(buffer, at: body.lowerBound + LogRecord.bodyPrefixSize, as: UInt16.self) == 0) // no metadata
        #expect(Array(buffer[(body.lowerBound + LogRecord.bodyPrefixSize + 2)...]) == frame)
    }

    @Test("metadata travels beside the frame; readers skip tags they do not know")
    func metadata() throws {
        let event = Events.make(3, name: "with metadata")
        let metadata = RecordMetadata(fields: [.init(tag: 1, value: [1, 2, 3, 4]), .init(tag: 200, value: Array("x".utf8))])
        var buffer: [UInt8] = []
        LogRecord.appendEvent(event.encoded(), acceptedAt: 5, metadata: metadata, to: &buffer)
        #expect(buffer.count == LogRecord.framedSize(frameSize: event.encoded().count, metadataSize: metadata.encoded.count))
        guard case .record(let body, let size) = Self.parse(buffer) else {
            Issue.record("record does not parse")
            return
        }
        let stored = buffer.withUnsafeBytes { raw in
            StoredEvent(position: LogPosition(segment: 1, offset: 16), size: size, body: UnsafeRawBufferPointer(rebasing: raw[body]))
        }
        #expect(stored.kind == .eventWithMetadata)
        #expect(stored.metadata == metadata)
        #expect(stored.metadata[1] == [1, 2, 3, 4])
        #expect(try stored.decoded() == event)
        // A metadata length past the body is damage.
        var damaged = buffer
        damaged[LogRecord.headerSize + LogRecord.bodyPrefixSize] = 0xFF
        damaged[LogRecord.headerSize + LogRecord.bodyPrefixSize + 1] = 0xFF
        let crc = damaged.withUnsafeBytes { raw in
            CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[LogRecord.headerSize...]),
                            continuing: CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[4..<8])))
        }
        damaged.withUnsafeMutableBytes { $0.storeBytes(of: crc.littleEndian, toByteOffset: 8, as: UInt32.self) }
        #expect(Self.parse(damaged) == .invalid)
    }

    @Test("format 1 records (kind 1) still read as events")
    func formatOneRecords() throws {
        let event = Events.make(4)
        var buffer: [UInt8] = []
        LogRecord.appendFormat1Event(event.encoded(), acceptedAt: 8, to: &buffer)
        guard case .record(let body, let size) = Self.parse(buffer) else {
            Issue.record("record does not parse")
            return
        }
        let stored = buffer.withUnsafeBytes { raw in
            StoredEvent(position: LogPosition(segment: 1, offset: 16), size: size, body: UnsafeRawBufferPointer(rebasing: raw[body]))
        }
        #expect(stored.kind == .event)
        #expect(stored.acceptedAt == 8)
        #expect(try stored.decoded() == event)
    }

    @Test("an erased record keeps the id, session and sequence, and is built from them alone (it can replace a torn record)",
          arguments: [false, true])
    func erasedRecord(withSession: Bool) throws {
        var event = Events.make(9, padding: 30)
        let session = EventID(high: 0xAB, low: 0xCD)
        if withSession { event.session = session }
        var record = Self.framed(event.encoded(), acceptedAt: 77)
        let original = record
        LogRecord.erase(&record)
        #expect(record.count == original.count)
        #expect(record == LogRecord.erasedRecord(size: original.count, acceptedAt: 77, id: event.id,
                                                 session: withSession ? session : nil, sequence: event.sequence))
        guard case .record(let body, _) = Self.parse(record) else {
            Issue.record("erased record does not parse")
            return
        }
        let decoded = record.withUnsafeBytes { RecordBody(UnsafeRawBufferPointer(rebasing: $0[body])) }
        #expect(decoded.kind == .erased)
        #expect(decoded.eventID == event.id)
        #expect(decoded.acceptedAt == 77)
        #expect(decoded.session == (withSession ? session : nil))
        #expect(decoded.sequence == (withSession ? event.sequence : 0))
        // Nothing of the event's text remains.
        #expect(!String(decoding: record, as: UTF8.self).contains(event.name))
    }

    @Test("a real event frame round-trips and decodes")
    func eventFrameRoundTrip() throws {
        let event = Events.make(7, name: "Order Completed", padding: 40)
        let buffer = Self.framed(event.encoded(), acceptedAt: 99)
        guard case .record(let body, _) = Self.parse(buffer) else {
            Issue.record("record does not parse")
            return
        }
        let stored = StoredEvent(position: LogPosition(segment: 1, offset: 16), size: buffer.count, acceptedAt: 99,
                                 frame: Array(buffer[(body.lowerBound + LogRecord.bodyPrefixSize + 2)...]))
        #expect(try stored.decoded() == event)
        #expect(stored.decodedID == event.id)
    }

    @Test("two records back to back parse one after the other")
    func consecutiveRecords() {
        let a = Events.make(1).encoded(), b = Events.make(2, padding: 10).encoded()
        var buffer: [UInt8] = []
        LogRecord.appendEvent(a, acceptedAt: 1, to: &buffer)
        LogRecord.appendEvent(b, acceptedAt: 2, to: &buffer)
        guard case .record(_, let first) = Self.parse(buffer) else {
            Issue.record("first record does not parse")
            return
        }
        guard case .record(let body, let second) = Self.parse(buffer, at: first) else {
            Issue.record("second record does not parse")
            return
        }
        #expect(first + second == buffer.count)
        #expect(Array(buffer[(body.lowerBound + LogRecord.bodyPrefixSize + 2)...]) == b)
    }

    @Test("every single-bit flip in the body is caught by the CRC")
    func bodyBitFlips() {
        let original = Self.framed(Events.make(3, padding: 5).encoded())
        var missed: [Int] = []
        for bit in (LogRecord.headerSize * 8)..<(original.count * 8) {
            var damaged = original
            damaged[bit / 8] ^= UInt8(1 << (bit % 8))
            if case .record = Self.parse(damaged) { missed.append(bit) }
        }
        #expect(missed.isEmpty, "bit flips in the body not detected: \(missed.prefix(20))")
    }

    @Test("every single-bit flip in the length field is caught", arguments: 0..<32)
    func lengthBitFlip(bit: Int) {
        let original = Self.framed(Events.make(4).encoded())
        var damaged = original
        damaged[4 + bit / 8] ^= UInt8(1 << (bit % 8))
        let damagedLength = Int(readLE(damaged, at: 4, as: UInt32.self))
        // Without trailing bytes a longer length just looks incomplete; never a record.
        if case .record = Self.parse(damaged) { Issue.record("damaged length \(damagedLength) parsed as a record") }
        // With plenty of bytes after it, the CRC (which covers the length) must reject it.
        let padded = damaged + [UInt8](repeating: 0, count: 70_000)
        let result = Self.parse(padded)
        if damagedLength <= 70_000 + original.count - LogRecord.headerSize {
            #expect(result == .invalid, "length \(damagedLength) (was \(original.count - LogRecord.headerSize)): \(result)")
        } else if case .record = result {
            Issue.record("damaged length \(damagedLength) parsed as a record")
        }
    }

    @Test("a flipped bit in the magic or the stored CRC is caught", arguments: Array(0..<4) + Array(8..<12))
    func headerByteFlip(byte: Int) {
        var damaged = Self.framed(Events.make(5).encoded())
        damaged[byte] ^= 0x10
        #expect(Self.parse(damaged) == .invalid)
    }

    @Test("an unknown record kind with a valid CRC is invalid")
    func unknownKind() {
        var buffer = Self.framed(Events.make(6).encoded())
        buffer[LogRecord.headerSize] = 0x7F
        // Recompute the CRC so only the kind is wrong.
        let crc = buffer.withUnsafeBytes { raw in
            CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[LogRecord.headerSize...]),
                            continuing: CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[4..<8])))
        }
        buffer.withUnsafeMutableBytes { $0.storeBytes(of: crc.littleEndian, toByteOffset: 8, as: UInt32.self) }
        #expect(Self.parse(buffer) == .invalid)
    }

    @Test("a record cut short is incomplete, not invalid")
    func truncatedRecord() {
        let buffer = Self.framed(Events.make(8).encoded())
        #expect(Self.parse(Array(buffer.prefix(5))) == .incomplete(needed: LogRecord.headerSize))
        #expect(Self.parse(Array(buffer.dropLast())) == .incomplete(needed: buffer.count))
        #expect(Self.parse(buffer) != .incomplete(needed: buffer.count))
    }

    @Test("lengths below the body prefix or above the maximum are invalid")
    func impossibleLengths() {
        for length in [UInt32(0), UInt32(LogRecord.bodyPrefixSize - 1), UInt32(LogRecord.maxBodySize + 1), UInt32.max] {
            var buffer = Self.framed(Events.make(9).encoded())
            buffer.withUnsafeMutableBytes { $0.storeBytes(of: length.littleEndian, toByteOffset: 4, as: UInt32.self) }
            #expect(Self.parse(buffer) == .invalid, "length \(length)")
        }
    }

    @Test("resynchronise skips garbage (even a fake magic) and finds the next valid record")
    func resynchronise() {
        let a = Self.framed(Events.make(10).encoded())
        let b = Self.framed(Events.make(11).encoded())
        var garbage: [UInt8] = [0xF5, 0x7E, 0xA1, 0x1D, 0xFF, 0xFF, 0, 0, 1, 2, 3, 4] // magic + absurd length
        garbage += (0..<37).map { UInt8($0) }
        let buffer = a + garbage + b
        let found = buffer.withUnsafeBytes { LogRecord.resynchronise($0, after: 0) }
        #expect(found == a.count + garbage.count)
        // From inside the damaged record as well.
        var damaged = a
        damaged[30] ^= 1
        let whole = damaged + b
        #expect(whole.withUnsafeBytes { LogRecord.resynchronise($0, after: 0) } == a.count)
        // Nothing valid after: nil. An incomplete record at the end is not a resync point.
        #expect((a + garbage).withUnsafeBytes { LogRecord.resynchronise($0, after: 0) } == nil)
        #expect((a + b.dropLast()).withUnsafeBytes { LogRecord.resynchronise($0, after: 0) } == nil)
    }
}

@Suite("Data format marker")
struct DataFormatMarkerTests {
    @Test("a new directory gets the current format; a format 1 directory is upgraded; a newer one is refused untouched")
    func marker() throws {
        let dir = try ScratchDirectory()
        defer { dir.remove() }
        #expect(try DataFormat.prepare(dir.path) == nil)
        #expect(try DataFormat.recorded(in: dir.path) == DataFormat.current)
        #expect(try DataFormat.prepare(dir.path) == DataFormat.current)

        try FileIO.writeAtomically(Array("ferry-data 9\n".utf8), to: dir.path + "/FORMAT")
        do {
            try DataFormat.prepare(dir.path)
            Issue.record("a newer format was accepted")
        } catch let error as StorageError {
            #expect(error.code == .corrupt)
            #expect(error.message.contains("data format 9, written by a newer ferryd"))
        }
        #expect(try FileIO.readFile(dir.path + "/FORMAT") == Array("ferry-data 9\n".utf8))

        try FileIO.writeAtomically(Array("garbage".utf8), to: dir.path + "/FORMAT")
        #expect(throws: StorageError.self) { try DataFormat.prepare(dir.path) }
    }
}
