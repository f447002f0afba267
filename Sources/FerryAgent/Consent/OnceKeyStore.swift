#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Crypto
import FerryProtocol
import FerryStorage

/// Durable once-key marks (conversion dedup): the first event carrying a key counts, later ones
/// are answered `duplicate`, across restarts and for every process of the host.
///
/// File `<data>/consent/once.keys`: fixed 20-byte records, `sha256(key)[0..<16]` then its
/// CRC32C (little-endian). Keys themselves are never stored. Marks are kept forever (16 bytes of
/// memory each). Owned by the commit thread.
final class OnceKeyStore {
    /// A key's mark: the first 128 bits of its SHA-256.
    struct Mark: Hashable {
        var high: UInt64
        var low: UInt64

        init(key: String) {
            let digest = Array(SHA256.hash(data: Array(key.utf8)))
            high = digest[0..<8].reduce(0) { $0 << 8 | UInt64($1) }
            low = digest[8..<16].reduce(0) { $0 << 8 | UInt64($1) }
        }

        init(bytes: ArraySlice<UInt8>) {
            high = bytes.prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
            low = bytes.dropFirst(8).prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
        }

        var bytes: [UInt8] {
            (0..<8).map { UInt8(truncatingIfNeeded: high >> UInt64(56 - 8 * $0)) }
                + (0..<8).map { UInt8(truncatingIfNeeded: low >> UInt64(56 - 8 * $0)) }
        }
    }

    static let recordSize = 20
    let path: String
    private var marks: Set<Mark> = []
    private var pending: [Mark] = []

    /// Loads the marks; a torn or damaged tail is cut off (with a count in `damaged`).
    init(path: String) throws {
        self.path = path
        guard let bytes = try FileIO.readFile(path) else { return }
        var good = 0
        while good + Self.recordSize <= bytes.count {
            let record = bytes[good..<(good + 16)]
            let crc = readLE(bytes, at: good + 16, as: UInt32.self)
            guard CRC32C.checksum(Array(record)) == crc else { break }
            marks.insert(Mark(bytes: record))
            good += Self.recordSize
        }
        damagedBytes = bytes.count - good
        if damagedBytes > 0 {
            let fd = try FileIO.open(path, O_WRONLY)
            defer { close(fd) }
            if ftruncate(fd, off_t(good)) != 0 { throw StorageError.system("truncate", path: path, errno: errno) }
        }
    }

    /// Bytes cut off a damaged tail at load.
    private(set) var damagedBytes = 0

    /// Marks known.
    var count: Int { marks.count }

    /// Whether `mark` was recorded before.
    func contains(_ mark: Mark) -> Bool { marks.contains(mark) }

    /// Records `mark` (a no-op if it is known); the next ``commit()`` makes it durable. The commit
    /// stage records a group's marks only once the group's writes succeeded.
    func insert(_ mark: Mark) {
        guard marks.insert(mark).inserted else { return }
        pending.append(mark)
    }

    /// Writes the marks made since the last call and `fdatasync`s them.
    func commit() throws {
        guard !pending.isEmpty else { return }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(pending.count * Self.recordSize)
        for mark in pending {
            let raw = mark.bytes
            bytes += raw
            appendLE(CRC32C.checksum(raw), to: &bytes)
        }
        try FileIO.appendDurably(bytes, to: path)
        pending.removeAll(keepingCapacity: true)
    }
}
