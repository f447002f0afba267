#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol
import Synchronization

/// Persists a sink's delivery cursor and checkpoint atomically.
///
/// File `<data>/cursors/<sink>.cursor`: `"FCUR" segment:u64le offset:i64le n:u32le checkpoint[n]
/// crc32c:u32le`. A damaged file is reported and ignored: delivery restarts from the oldest
/// segment, which may repeat events but never loses one.
///
/// The file is kept open between saves (copies of a store share it): a save in place is an
/// `lstat` of the path (is it still the file kept open?), one `pwrite` and one `fdatasync`, no
/// `open`. A save that replaces the file (a record of another size), or a file put in its place
/// by someone else, has the next save open it anew.
public struct CursorStore: Sendable {
    /// The cursor file.
    public let path: String
    /// The cursor file kept open for saves in place.
    private let kept = KeptFile()

    /// A store for `sink` in `dataDirectory`.
    public init(dataDirectory: String, sink: String) {
        path = dataDirectory + "/cursors/" + sink + ".cursor"
    }

    /// Closes the file kept open for saves (a later save opens it again).
    public func close() {
        kept.close()
    }

    /// The stored cursor and checkpoint; `nil` if none. Throws `corrupt` for a damaged file. A file
    /// that fails its checksum is read once more before it is called damaged: a reader in another
    /// process may have caught an in-place save (``save(_:checkpoint:)``) half copied.
    public func load() throws -> (position: LogPosition, checkpoint: [UInt8]?)? {
        do {
            return try loadOnce()
        } catch let error as StorageError where error.code == .corrupt {
            return try loadOnce()
        }
    }

    private func loadOnce() throws -> (position: LogPosition, checkpoint: [UInt8]?)? {
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

    /// The largest record saved in place: one sector, which a disk writes whole or not at all
    /// (PostgreSQL relies on the same for `pg_control`).
    static let inPlaceMaxBytes = 512

    /// Stores the cursor and checkpoint durably, replacing the previous ones as one step.
    ///
    /// When the file exists with exactly the new record's size (the usual case: a sink's
    /// checkpoint keeps its size) and the record fits in one sector (``inPlaceMaxBytes``), the
    /// record is overwritten in place and `fdatasync`'d: one write and one sync, no directory
    /// change. Otherwise (first save, a size change) the file is replaced atomically (temp file,
    /// fsync, rename, fsync of the directory). Either way a crash leaves the old record or the new
    /// one; a torn sector, which the checksum would catch, is the one case the in-place path adds
    /// (reported as damage: delivery then starts over from the oldest segment, repeating events).
    public func save(_ position: LogPosition, checkpoint: [UInt8]?) throws {
        var bytes = Array("FCUR".utf8)
        appendLE(position.segment, to: &bytes)
        appendLE(position.offset, to: &bytes)
        appendLE(UInt32(checkpoint?.count ?? 0), to: &bytes)
        bytes += checkpoint ?? []
        appendLE(CRC32C.checksum(bytes), to: &bytes)
        if try overwriteInPlace(bytes) { return }
        // A new inode takes the path: the descriptor kept is of the old one.
        kept.close()
        try FileIO.writeAtomically(bytes, to: path)
    }

    /// Overwrites the file with `bytes` and syncs it, if it exists with their size and they fit
    /// in one sector; false (nothing written) otherwise.
    private func overwriteInPlace(_ bytes: [UInt8]) throws -> Bool {
        guard bytes.count <= Self.inPlaceMaxBytes else { return false }
        return try kept.withFile(path) { fd, size in
            guard size == Int64(bytes.count) else { return false }
            try bytes.withUnsafeBytes { raw in try FileIO.pwriteAll(fd, raw, at: 0, path: path) }
            try CrashPoints.reach("cursor.written")
            try FileIO.fdatasync(fd, path: path)
            return true
        } ?? false
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

/// A file kept open between uses, with its size when opened (the cursor file: its saves in place
/// keep the size). Closed when forgotten, replaced or released.
private final class KeptFile: Sendable {
    private struct Open {
        var fd: CInt
        var size: Int64
        var device: UInt64
        var inode: UInt64
    }
    private let file = Mutex<Open?>(nil)

    deinit {
        close()
    }

    /// Runs `body` with the file at `path` (opened write-only if none is kept) and its size;
    /// `nil` when the file cannot be opened (it does not exist). A failure of `body` closes the
    /// file: the next use opens it afresh. Uses are not concurrent (one delivery loop saves a
    /// sink's cursor), so holding the lock over the write costs nothing.
    func withFile<T: Sendable>(_ path: String, _ body: (CInt, Int64) throws -> T) throws -> T? {
        try file.withLock { kept -> T? in
            if let open = kept {
                var named = stat()
                if lstat(path, &named) != 0 || UInt64(named.st_dev) != open.device || UInt64(named.st_ino) != open.inode {
                    // Replaced or removed: what the path names now is the file.
                    _ = Glibc.close(open.fd)
                    kept = nil
                }
            }
            let open: Open
            if let kept {
                open = kept
            } else {
                guard let fd = try? FileIO.open(path, O_WRONLY) else { return nil }
                var st = stat()
                guard fstat(fd, &st) == 0 else {
                    let error = StorageError.system("fstat", path: path, errno: errno)
                    _ = Glibc.close(fd)
                    throw error
                }
                open = Open(fd: fd, size: Int64(st.st_size), device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
                kept = open
            }
            do {
                return try body(open.fd, open.size)
            } catch {
                _ = Glibc.close(open.fd)
                kept = nil
                throw error
            }
        }
    }

    func close() {
        if let open = file.withLock({ kept -> Open? in defer { kept = nil }; return kept }) { _ = Glibc.close(open.fd) }
    }
}
