import FerryProtocol

/// Persists a sink's delivery cursor and checkpoint atomically.
///
/// File `<data>/cursors/<sink>.cursor`: `"FCUR" segment:u64le offset:i64le n:u32le checkpoint[n]
/// crc32c:u32le`. A damaged file is reported and ignored: delivery restarts from the oldest
/// segment, which may repeat events but never loses one.
public struct CursorStore: Sendable {
    /// The cursor file.
    public let path: String

    /// A store for `sink` in `dataDirectory`.
    public init(dataDirectory: String, sink: String) {
        path = dataDirectory + "/cursors/" + sink + ".cursor"
    }

    /// The stored cursor and checkpoint; `nil` if none. Throws `corrupt` for a damaged file.
    public func load() throws -> (position: LogPosition, checkpoint: [UInt8]?)? {
        guard let bytes = try FileIO.readFile(path) else { return nil }
        guard bytes.count >= 28, Array(bytes[0..<4]) == Array("FCUR".utf8) else {
            throw StorageError(code: .corrupt, message: "cursor file \(path) has a bad header")
        }
        let length = Int(readLE(bytes, at: 20, as: UInt32.self))
        guard bytes.count == 28 + length,
              CRC32C.checksum(Array(bytes[..<(bytes.count - 4)])) == readLE(bytes, at: bytes.count - 4, as: UInt32.self) else {
            throw StorageError(code: .corrupt, message: "cursor file \(path) fails its checksum")
        }
        let position = LogPosition(segment: readLE(bytes, at: 4), offset: readLE(bytes, at: 12))
        return (position, length == 0 ? nil : Array(bytes[24..<(24 + length)]))
    }

    /// Stores the cursor and checkpoint (temp file, fsync, rename, fsync of the directory).
    public func save(_ position: LogPosition, checkpoint: [UInt8]?) throws {
        var bytes = Array("FCUR".utf8)
        appendLE(position.segment, to: &bytes)
        appendLE(position.offset, to: &bytes)
        appendLE(UInt32(checkpoint?.count ?? 0), to: &bytes)
        bytes += checkpoint ?? []
        appendLE(CRC32C.checksum(bytes), to: &bytes)
        try FileIO.writeAtomically(bytes, to: path)
    }

    /// Whether `name` can name a sink's files (its cursor and dead-letter directory): 1-64
    /// letters, digits, `-` or `_`.
    public static func isValidSinkName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 64 && name.utf8.allSatisfy { byte in
            (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
        }
    }
}
