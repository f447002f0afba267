import FerryStorage

/// Which sinks an erasure (`ferry forget --user`) is carried to: the decision alone, from the
/// positions of the user's events still in the log and each sink's cursor (docs/CONSENT.md,
/// "Erasure upstream"). Pure: the consent worker gathers the inputs on the commit thread.
///
/// A sink gets the request when it may have delivered one of the user's events:
///
/// 1. one of them lies before its cursor (delivered);
/// 2. delivery has started, and one lies within the first `batch.maxBytes` after its cursor (it
///    may be in the batch on the wire as the erasure happens: the send-time gate stops batches
///    still in memory, not one already sent; before `ferry start` nothing is ever on the wire);
/// 3. the log no longer tells whose events the sink was sent — segments were deleted (every sink
///    had passed them) or dropped by the retention cap, and the sink has delivered anything at
///    all; or a record before its cursor was erased by an earlier purge (an erased record keeps its
///    id, not its user): whether those records held the user's events is unknowable, so the answer
///    is yes.
///
/// A sink that delivered nothing at all never gets one.
package enum ErasureTargets {
    /// What the rule reads of one sink.
    package struct Sink: Sendable, Hashable {
        /// The sink's name.
        package var name: String
        /// Where its delivery resumes (everything before was delivered or dead-lettered).
        package var cursor: LogPosition
        /// Its `batch.maxBytes`: how far after the cursor a batch on the wire can reach.
        package var batchMaxBytes: Int

        /// Creates the view of a sink.
        package init(name: String, cursor: LogPosition, batchMaxBytes: Int) {
            self.name = name
            self.cursor = cursor
            self.batchMaxBytes = batchMaxBytes
        }
    }

    /// The names of the sinks of `sinks` to send the erasure to, in their order. `covered`: the
    /// positions of the user's (not yet erased) events in the log; `firstSegment`: the index of
    /// the log's oldest segment (segments start at 1: a larger index means older ones are gone);
    /// `deliveryStarted`: whether any batch can have been sent (false before `ferry start` with
    /// `autoStart: false`); `firstErased`: the position of the log's first erased record, if any.
    package static func sinks(_ sinks: [Sink], covered: [LogPosition], firstSegment: UInt64, deliveryStarted: Bool = true,
                              firstErased: LogPosition? = nil) -> [String] {
        let start = LogPosition(segment: max(1, firstSegment), offset: SegmentedLog.segmentHeaderSize)
        let lost = firstSegment > 1
        return sinks.filter { sink in
            if lost && sink.cursor > start { return true }
            if let firstErased, firstErased < sink.cursor { return true }
            return covered.contains { position in
                position < sink.cursor || (deliveryStarted && onTheWire(position, after: sink.cursor, bytes: sink.batchMaxBytes))
            }
        }.map(\.name)
    }

    /// Whether `position` (at or after `cursor`) lies within `bytes` of it: in the batch a sink
    /// may have on the wire (a batch reads at most `bytes`, possibly across one segment boundary).
    static func onTheWire(_ position: LogPosition, after cursor: LogPosition, bytes: Int) -> Bool {
        guard position >= cursor else { return false }
        if position.segment == cursor.segment { return position.offset - cursor.offset < Int64(bytes) }
        return position.segment == cursor.segment + 1 && position.offset < Int64(bytes)
    }
}
