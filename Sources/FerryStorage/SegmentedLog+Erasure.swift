#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

// Erasure in place, by recorded position (never a search by content): the record keeps its size
// and offset, its payload is overwritten.

extension SegmentedLog {
    /// Writes each of `records` (erased records computed earlier, ``ErasedRecord``) at its
    /// recorded position, then `fdatasync`s the touched segments; `afterEach` runs after each
    /// write. The record on disk is not read to decide what to write, so a record torn by an
    /// earlier interrupted overwrite is erased whole too. A record whose segment is gone
    /// (delivered and deleted) or that lies past its segment's end (a torn tail that recovery cut
    /// off) has no bytes left and is skipped; one already erased is left as it is. Returns how
    /// many records were erased by this call.
    ///
    /// Call it where nothing else writes the log (the commit thread, between groups).
    @discardableResult
    package func erase(at records: [ErasedRecord], afterEach: () throws -> Void = {}) throws -> Int {
        var touched: [UInt64: (fd: CInt, path: String)] = [:]
        defer { for (_, file) in touched { close(file.fd) } }
        var erased: [LogPosition] = []
        var repaired: [UInt64: Int] = [:]
        for record in records {
            guard let segment = state.withLock({ $0.segments.first { $0.index == record.position.segment } }),
                  record.position.offset >= Self.segmentHeaderSize,
                  record.position.offset + Int64(record.size) <= segment.size else { continue }
            let file: (fd: CInt, path: String)
            if let open = touched[segment.index] {
                file = open
            } else {
                file = (try FileIO.open(segment.path, O_RDWR), segment.path)
                touched[segment.index] = file
            }
            let current = try FileIO.pread(file.fd, count: record.size, at: record.position.offset, path: file.path)
            let parsed = current.withUnsafeBytes { LogRecord.parse($0, at: 0) }
            if case .record(let body, let size) = parsed, size == record.size, current[body.lowerBound] == LogRecord.Kind.erased.rawValue {
                continue
            }
            let image = record.bytes
            try image.withUnsafeBytes { try FileIO.pwriteAll(file.fd, $0, at: record.position.offset, path: file.path) }
            erased.append(record.position)
            if case .record(_, let size) = parsed, size == record.size {} else {
                // Torn before: recovery did not count it as a record; now it is a valid one.
                repaired[segment.index, default: 0] += 1
            }
            try afterEach()
        }
        for (_, file) in touched { try FileIO.fdatasync(file.fd, path: file.path) }
        if !erased.isEmpty {
            state.withLock { state in
                for (consumer, cursor) in state.cursors {
                    state.erasedPending[consumer, default: 0] += erased.count { $0 >= cursor }
                }
                for (index, count) in repaired {
                    if let i = state.segments.firstIndex(where: { $0.index == index }) { state.segments[i].records += count }
                }
            }
        }
        return erased.count
    }
}
