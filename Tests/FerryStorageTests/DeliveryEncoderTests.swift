import Testing
@testable import FerryProtocol
@testable import FerryStorage

/// The pieces the delivery speed-ups of issue 24 rest on: the object check that also reports raw
/// newlines, metadata kept as its encoded bytes, delivered counts per run.
@Suite("Delivery encoders: the object check, metadata in place, delivered runs")
struct DeliveryEncoderTests {
    static let seeds = [
        "{}", " {} \n", "{\"plan\":\"pro\",\"n\":-0.5,\"ok\":true,\"x\":null,\"l\":[1,[2,{}],\"s\"]}",
        "{\n  \"a\": [ 1,\r\n 2 ],\t\"b\" : \"x\\ny\"\n}", "{\"a\":\"\\/\\b\\f\\n\\r\\t\\\"\\\\\"}", "{\"é\":1}",
        "{\"a\":\"\\u00e9\"}", "{\"a\":1e3}", "{\"a\":123456789012345}", "{\"a\":1234567890123456}", "[1]", "{\"a\":\"\u{1}\"}",
    ]

    /// Deterministic mutations of the seeds: every byte replaced by a few interesting bytes, and
    /// every prefix.
    static func corpus() -> [[UInt8]] {
        var out: [[UInt8]] = []
        let replacements: [UInt8] = [0x22, 0x5C, 0x0A, 0x0D, 0x20, 0x7B, 0x7D, 0x2C, 0x3A, 0x31, 0x01, 0xC3, 0x80]
        for seed in seeds.map({ Array($0.utf8) }) {
            out.append(seed)
            for index in seed.indices {
                out.append(Array(seed[..<index]))
                for byte in replacements {
                    var mutated = seed
                    mutated[index] = byte
                    out.append(mutated)
                }
            }
        }
        return out
    }

    @Test("isObject(_:newlines:) answers as isObject(_:); newlines exactly when a raw \\n or \\r is in it; compacted, an object stays one")
    func objectCheckWithNewlines() {
        for bytes in Self.corpus() where bytes.withUnsafeBytes({ UTF8Validation.isValid($0) }) {
            var newlines = false
            let object = bytes.withUnsafeBytes { JSONTape.isObject($0, newlines: &newlines) }
            #expect(object == bytes.withUnsafeBytes { JSONTape.isObject($0) }, "\(bytes)")
            guard object else { continue }
            #expect(newlines == (bytes.contains(0x0A) || bytes.contains(0x0D)), "\(String(decoding: bytes, as: UTF8.self))")
            // Copied as it is and compacted, a line never breaks and never becomes invalid.
            #expect(JSONWriter.isJSONObject(JSONWriter.compactJSON(bytes)), "\(bytes)")
        }
    }

    @Test("metadata kept as its bytes: fields, lookups, equality and a cut-short entry as before")
    func metadataInPlace() {
        let fields: [RecordMetadata.Field] = [.init(tag: 4, value: Array("sh".utf8)), .init(tag: 1, value: [1, 0, 0, 0]),
                                              .init(tag: 4, value: Array("second".utf8)), .init(tag: 9, value: [])]
        let metadata = RecordMetadata(fields: fields)
        #expect(metadata.fields == fields)
        #expect(metadata[4] == Array("sh".utf8) && metadata[1] == [1, 0, 0, 0] && metadata[9] == [] && metadata[2] == nil)
        let decoded = metadata.encoded.withUnsafeBytes { RecordMetadata(decoding: $0) }
        #expect(decoded == metadata && decoded.hashValue == metadata.hashValue)
        // A cut-short last entry ends the list, and is not part of the value.
        let cut = (metadata.encoded + [7, 5, 0, 1]).withUnsafeBytes { RecordMetadata(decoding: $0) }
        #expect(cut == metadata && cut.fields == fields)
        var changed = metadata
        changed.fields.append(.init(tag: 3, value: [2, 0, 0, 0]))
        #expect(changed[3] == [2, 0, 0, 0] && changed != metadata && metadata.fields.count == 4)
        #expect(RecordMetadata().encoded.isEmpty && RecordMetadata().fields.isEmpty)
    }

    @Test("origin written from the metadata's bytes in place: the first field of each tag, null for missing or malformed ones")
    func originFromBytes() throws {
        let metadata = RecordMetadata(fields: [.init(tag: EventOrigin.Tag.uid, value: [1, 2]), .init(tag: 200, value: [9]),
                                               .init(tag: EventOrigin.Tag.comm, value: [0x66, 0xFF]), .init(tag: EventOrigin.Tag.comm, value: [0x67]),
                                               .init(tag: EventOrigin.Tag.pid, value: [7, 0, 0, 0])])
        var json = JSONWriter()
        json.originField(metadata)
        #expect(String(decoding: json.finish(), as: UTF8.self)
                    == #"{"origin":{"uid":null,"gid":null,"pid":7,"comm":"f\#u{FFFD}","exe":null,"unit":null}}"#)
        var none = JSONWriter()
        none.originField(RecordMetadata(fields: [.init(tag: 200, value: [1])]))
        #expect(String(decoding: none.finish(), as: UTF8.self) == #"{"origin":null}"#)
    }

    @Test("delivered events are counted per run of one segment, from the cursor on; erased ones counted apart")
    func deliveredRuns() {
        func event(_ segment: UInt64, _ offset: Int64, erased: Bool = false) -> StoredEvent {
            StoredEvent(position: LogPosition(segment: segment, offset: offset), size: 10, acceptedAt: 0, frame: [],
                        kind: erased ? .erased : .eventWithMetadata)
        }
        let events = [event(1, 100), event(1, 200, erased: true), event(1, 300), event(2, 16), event(2, 26, erased: true), event(3, 16)]
        let (runs, erased) = SegmentedLog.deliveredRuns(events, from: LogPosition(segment: 1, offset: 200))
        #expect(runs.map(\.segment) == [1, 2, 3] && runs.map(\.count) == [2, 2, 1] && erased == 2)
        let none = SegmentedLog.deliveredRuns(events, from: LogPosition(segment: 4, offset: 0))
        #expect(none.runs.isEmpty && none.erased == 0)
    }
}
