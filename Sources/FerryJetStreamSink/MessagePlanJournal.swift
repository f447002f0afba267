import FerryProtocol
import FerryStorage

/// The durable record of the last ``MessagePlan`` a JetStream sink published, so that a batch
/// re-published after a crash is cut into the same messages under the same `Nats-Msg-Id`s.
///
/// File `<data>/cursors/<sink>.messages`, beside the sink's cursor:
/// `"FJSM" n:u32le (firstID[16] count:u32le digest:u32le){n} crc32c:u32le`, replaced atomically
/// (temp file, fsync, rename, fsync of the directory) before the first message of a plan is
/// published. It is never removed: a plan whose first event is behind the cursor simply no longer
/// matches any batch. A damaged file is reported and treated as no record: delivery continues and
/// loses nothing, though a batch re-sent after a crash may then be cut differently and some of its
/// events stored twice in the stream.
struct MessagePlanJournal: Sendable {
    /// The file.
    let path: String

    private static let magic = Array("FJSM".utf8)
    private static let entrySize = 24

    /// The journal of sink `sink` in `dataDirectory`.
    init(dataDirectory: String, sink: String) {
        path = dataDirectory + "/cursors/" + sink + ".messages"
    }

    /// The recorded plan; empty when there is none. Throws ``StorageError`` (`corrupt`) for a
    /// damaged file, or the read's error.
    func load() throws -> [MessagePlan.Message] {
        guard let bytes = try FileIO.readFile(path) else { return [] }
        return try Self.decode(bytes, path: path)
    }

    /// Records `messages` durably.
    func save(_ messages: [MessagePlan.Message]) throws {
        try FileIO.writeAtomically(Self.encode(messages), to: path)
    }

    static func encode(_ messages: [MessagePlan.Message]) -> [UInt8] {
        var bytes = magic
        bytes.reserveCapacity(12 + messages.count * entrySize)
        appendLE(UInt32(messages.count), to: &bytes)
        for message in messages {
            message.firstID.append(to: &bytes)
            appendLE(UInt32(message.count), to: &bytes)
            appendLE(message.digest, to: &bytes)
        }
        appendLE(CRC32C.checksum(bytes), to: &bytes)
        return bytes
    }

    static func decode(_ bytes: [UInt8], path: String) throws -> [MessagePlan.Message] {
        guard bytes.count >= 12, Array(bytes[0..<4]) == magic else {
            throw StorageError(code: .corrupt, message: "message plan \(path) has a bad header")
        }
        let count = Int(readLE(bytes, at: 4, as: UInt32.self))
        guard count <= (bytes.count - 12) / entrySize, bytes.count == 12 + count * entrySize,
              CRC32C.checksum(Array(bytes[..<(bytes.count - 4)])) == readLE(bytes, at: bytes.count - 4, as: UInt32.self) else {
            throw StorageError(code: .corrupt, message: "message plan \(path) fails its checksum")
        }
        var messages: [MessagePlan.Message] = []
        messages.reserveCapacity(count)
        for index in 0..<count {
            let offset = 8 + index * entrySize
            let events = Int(readLE(bytes, at: offset + 16, as: UInt32.self))
            guard events >= 1 else {
                throw StorageError(code: .corrupt, message: "message plan \(path) records a message of no events")
            }
            messages.append(MessagePlan.Message(firstID: EventID(bytes: bytes, at: offset), count: events,
                                                digest: readLE(bytes, at: offset + 20, as: UInt32.self)))
        }
        return messages
    }
}
