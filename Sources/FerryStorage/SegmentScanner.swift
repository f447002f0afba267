#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Scans one segment file record by record, resynchronising past damage.
package enum SegmentScanner {
    /// What a scan found.
    package struct Result: Sendable {
        /// Offsets of the valid records, in order.
        package var records: [Int64] = []
        /// Damaged regions skipped.
        package var corruptRegions = 0
        /// Bytes in damaged regions (including a torn tail).
        package var corruptBytes: Int64 = 0
        /// Bytes cut off the end (only when truncation was asked for).
        package var truncatedBytes: Int64 = 0
        /// File size after the scan.
        package var size: Int64 = 0
        /// Whether the segment header was valid.
        package var headerValid = true
        /// Damaged regions as (offset, length), for `ferry queue inspect`.
        package var damage: [(offset: Int64, length: Int64)] = []
    }

    /// Bytes read per step: the scan holds one such window, not the whole segment (a record
    /// larger than it is read whole, up to ``LogRecord/maxBodySize``).
    package static let windowBytes = 1 << 20

    /// Scans `path`. With `truncateTornTail`, trailing bytes that hold no valid record are cut
    /// off (a write torn by a crash). `visit` sees each valid record's offset, size and body.
    /// The file is read in windows of ``windowBytes``; damage is found and resynchronised past
    /// exactly as if the whole file were read at once.
    package static func scan(
        path: String, truncateTornTail: Bool, windowBytes: Int = SegmentScanner.windowBytes,
        visit: (Int64, Int, UnsafeRawBufferPointer) -> Void = { _, _, _ in }
    ) throws -> Result {
        let fd = try FileIO.open(path, truncateTornTail ? O_RDWR : O_RDONLY)
        defer { close(fd) }
        let size = try FileIO.fileSize(fd, path: path)
        var result = Result()
        let headerSize = SegmentedLog.segmentHeaderSize
        let header = try FileIO.pread(fd, count: Int(min(headerSize, size)), at: 0, path: path)
        result.headerValid = header.count >= Int(headerSize) && Array(header[0..<8]) == SegmentedLog.segmentMagic
        var validEnd = min(headerSize, size)
        // Where the damaged region being crossed started (a region may span windows).
        var damageStart: Int64?
        func endDamage(at end: Int64) {
            guard let start = damageStart else { return }
            result.corruptRegions += 1
            result.corruptBytes += end - start
            result.damage.append((start, end - start))
            damageStart = nil
        }
        var base = headerSize
        var want = windowBytes
        while base < size {
            let chunk = try FileIO.pread(fd, count: Int(min(Int64(want), size - base)), at: base, path: path)
            guard !chunk.isEmpty else { break }
            let reachesEnd = base + Int64(chunk.count) >= size
            want = windowBytes
            let consumed: Int = chunk.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count {
                    switch LogRecord.parse(raw, at: offset) {
                    case .record(let body, let size):
                        if damageStart != nil { endDamage(at: base + Int64(offset)) }
                        result.records.append(base + Int64(offset))
                        visit(base + Int64(offset), size, UnsafeRawBufferPointer(rebasing: raw[body]))
                        offset += size
                        validEnd = base + Int64(offset)
                    case .incomplete(let needed) where !reachesEnd:
                        // Read on from here; a record larger than a window is read whole.
                        if offset == 0 { want = max(windowBytes, needed) }
                        return offset
                    case .incomplete, .invalid:
                        if damageStart == nil { damageStart = base + Int64(offset) }
                        // Stops early where a record may start that this window cannot show whole.
                        guard let next = LogRecord.resynchronise(raw, after: offset, allowIncomplete: !reachesEnd) else {
                            return raw.count
                        }
                        offset = next
                    }
                }
                return offset
            }
            base += Int64(consumed)
        }
        // Nothing valid follows the last damage: a torn tail (or damage reaching the end).
        endDamage(at: size)
        result.size = size
        if truncateTornTail && validEnd < size && validEnd >= headerSize {
            try FileIO.ftruncate(fd, validEnd, path: path)
            try FileIO.fdatasync(fd, path: path)
            result.truncatedBytes = size - validEnd
            result.corruptBytes -= result.truncatedBytes
            result.corruptRegions -= 1
            result.damage.removeLast()
            result.size = validEnd
        } else if truncateTornTail && size < headerSize {
            // A segment torn while its header was written: rewrite the header.
            let index = UInt64(path.split(separator: "/").last!.dropLast(4)) ?? 0
            let header = SegmentedLog.segmentHeader(index: index)
            try header.withUnsafeBytes { raw in try FileIO.pwriteAll(fd, raw, at: 0, path: path) }
            try FileIO.fdatasync(fd, path: path)
            result.truncatedBytes = size
            result.size = headerSize
            result.headerValid = true
        }
        return result
    }
}
