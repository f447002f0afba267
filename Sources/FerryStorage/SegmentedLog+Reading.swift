#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol
import Synchronization

// Reading committed records: by position, in batches, skipping damage exactly as recovery did.

extension SegmentedLog {
    /// Reads up to `maxEvents` events (and about `maxBytes`) starting at `position`, skipping any
    /// damaged region. Returns the events and the position after the last one. Only committed
    /// (fsync'd) bytes are read.
    package func read(from position: LogPosition, maxEvents: Int, maxBytes: Int) throws -> (events: [StoredEvent], next: LogPosition) {
        var position = position
        var events: [StoredEvent] = []
        events.reserveCapacity(min(maxEvents, 4096))
        var bytes = 0
        while events.count < maxEvents && bytes < maxBytes {
            let segments = state.withLock { $0.segments.filter(\.visible) }
            guard let segment = segments.first(where: { $0.index >= position.segment }) else { break }
            if segment.index != position.segment {
                position = LogPosition(segment: segment.index, offset: Self.segmentHeaderSize)
            }
            position.offset = max(position.offset, Self.segmentHeaderSize)
            if position.offset >= segment.size {
                // End of this segment: move on if a later one exists, else we are at the head.
                guard let next = segments.first(where: { $0.index > segment.index }) else { break }
                position = LogPosition(segment: next.index, offset: Self.segmentHeaderSize)
                continue
            }
            // One large sequential read, but not a whole `maxBytes` for `maxEvents` small records:
            // sized for 512 bytes a record (more reads follow when they are larger).
            let left = maxEvents - events.count
            let byCount = left >= 1 << 40 ? Int.max : left * 512
            let want = Int(min(Int64(max(min(maxBytes - bytes, byCount), 64 << 10)), segment.size - position.offset))
            let chunk = try readChunk(segment: segment, at: position.offset, count: want)
            // Committed bytes hold only complete records, so within the last chunk of a segment
            // "incomplete" means damage; before that it may be a record crossing the chunk's end.
            let reachesEnd = position.offset + Int64(chunk.count) >= segment.size
            var consumed = 0
            let parsed: Bool = chunk.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count && events.count < maxEvents && (bytes < maxBytes || events.isEmpty) {
                    switch LogRecord.parse(raw, at: offset) {
                    case .record(let body, let size):
                        events.append(StoredEvent(
                            position: LogPosition(segment: segment.index, offset: position.offset + Int64(offset)),
                            size: size, body: UnsafeRawBufferPointer(rebasing: raw[body])))
                        bytes += size
                        offset += size
                    case .incomplete where !reachesEnd:
                        consumed = offset
                        return offset > 0
                    case .incomplete, .invalid:
                        // Recovery already reported this region; skip it the same way, stopping
                        // where a record may start that this chunk cannot show whole.
                        offset = LogRecord.resynchronise(raw, after: offset, allowIncomplete: !reachesEnd) ?? raw.count
                    }
                }
                consumed = offset
                return true
            }
            if !parsed {
                // A record larger than the chunk: read exactly it (parse capped its length).
                let header = try readChunk(segment: segment, at: position.offset, count: LogRecord.headerSize)
                let length = header.count == LogRecord.headerSize ? Int(readLE(header, at: 4, as: UInt32.self)) : 0
                let whole = try readChunk(segment: segment, at: position.offset, count: LogRecord.headerSize + length)
                if case .record(let body, let size) = whole.withUnsafeBytes({ LogRecord.parse($0, at: 0) }) {
                    events.append(whole.withUnsafeBytes { raw in
                        StoredEvent(position: position, size: size, body: UnsafeRawBufferPointer(rebasing: raw[body]))
                    })
                    bytes += size
                    consumed = size
                } else {
                    // A damaged length made the "record" look long: resynchronise over the rest
                    // of the segment, exactly as recovery did, so only the damaged record is lost.
                    let rest = try readChunk(segment: segment, at: position.offset, count: Int(segment.size - position.offset))
                    consumed = rest.withUnsafeBytes { LogRecord.resynchronise($0, after: 0) } ?? rest.count
                }
            }
            position.offset += Int64(consumed)
        }
        return (events, position)
    }

    /// The record at `position` if a valid one of `size` bytes is there (`nil` if its segment is
    /// gone, or the bytes there are not such a record).
    package func record(at position: LogPosition, size: Int) throws -> StoredEvent? {
        guard let segment = state.withLock({ $0.segments.first { $0.index == position.segment } }),
              position.offset + Int64(size) <= segment.size else { return nil }
        let bytes = try readChunk(segment: segment, at: position.offset, count: size)
        return bytes.withUnsafeBytes { raw -> StoredEvent? in
            guard case .record(let body, let parsedSize) = LogRecord.parse(raw, at: 0), parsedSize == size else { return nil }
            return StoredEvent(position: position, size: size, body: UnsafeRawBufferPointer(rebasing: raw[body]))
        }
    }

    /// `count` bytes of `segment` from `offset` (fewer at its end).
    func readChunk(segment: SegmentInfo, at offset: Int64, count: Int) throws -> [UInt8] {
        let fd = try FileIO.open(segment.path, O_RDONLY)
        defer { close(fd) }
        return try FileIO.pread(fd, count: count, at: offset, path: segment.path)
    }

    /// The end of the log: the position after the last record of the newest segment. Between two
    /// group commits (where the commit thread asks) every byte before it is committed.
    package var endPosition: LogPosition {
        state.withLock { state in
            state.segments.last.map { LogPosition(segment: $0.index, offset: $0.size) }
                ?? LogPosition(segment: 0, offset: 0)
        }
    }

    /// The position of the oldest segment's first byte (its header), whatever any cursor says.
    package var startPosition: LogPosition {
        LogPosition(segment: state.withLock { $0.segments.first?.index } ?? 0, offset: 0)
    }
}
