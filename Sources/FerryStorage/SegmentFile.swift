import FerryProtocol

/// The segment file format: `<directory>/<index, 20 digits>.seg`, each starting with a 16-byte
/// header (`FERRYSG1`, index as u64le) followed by ``LogRecord``s.
public enum SegmentFile {
    /// Size of the header.
    public static let headerSize: Int64 = 16
    /// The header's first 8 bytes.
    public static let magic = Array("FERRYSG1".utf8)

    /// The file name of segment `index`.
    public static func fileName(for index: UInt64) -> String {
        paddedIndex(index) + ".seg"
    }

    /// `index` in decimal, zero-padded to 20 digits (every `UInt64` fits), so that file names sort
    /// as their numbers do: segments here, the file sink's `events-<index>.jsonl` files too.
    package static func paddedIndex(_ index: UInt64) -> String {
        let digits = String(index)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits
    }

    /// The header of segment `index`.
    public static func header(index: UInt64) -> [UInt8] {
        var header = magic
        appendLE(index, to: &header)
        return header
    }
}

/// One segment file as the log tracks it.
package struct SegmentInfo: Sendable {
    package var index: UInt64
    package var path: String
    /// Bytes known durable (fsync'd) and readable.
    package var size: Int64
    package var records: Int
    /// Records before each consumer's cursor, by consumer (sink) name.
    package var deliveredRecords: [String: Int]
    /// False for a segment the writer created in a group not yet committed: readers must not
    /// move on to it, or they would skip that group's records still going into the one before.
    package var visible = true
    /// Whether ``records`` is known: a sealed segment left out of start-up recovery is counted
    /// (and CRC-checked) later by ``SegmentedLog/verifySealedSegments(shouldStop:)``.
    package var verified = true
    /// Framed bytes of the segment's events by the sender's uid (events with an origin), for the
    /// per-uid share of the retention cap.
    package var uidBytes: [UInt32: Int64] = [:]

    /// Records some consumer has not passed yet (the most any registered consumer lacks).
    package func undelivered(consumers: some Collection<String>) -> Int {
        consumers.map { records - (deliveredRecords[$0] ?? 0) }.max() ?? 0
    }
}
