extension SegmentedLog {
    /// Events per page of ``forEachRecord(from:_:)``.
    package static let pageMaxEvents = 4096
    /// Bytes per page of ``forEachRecord(from:_:)`` (4 MiB).
    package static let pageMaxBytes = 4 << 20

    /// Calls `body` with every record from `position` (the oldest when nil) to the end of the
    /// log, oldest first, erased ones included, reading at most ``pageMaxEvents`` events and
    /// ``pageMaxBytes`` bytes at a time with ``read(from:maxEvents:maxBytes:)``.
    package func forEachRecord(from position: LogPosition? = nil, _ body: (StoredEvent) throws -> Void) throws {
        var position = position ?? startPosition
        while true {
            let (events, next) = try read(from: position, maxEvents: Self.pageMaxEvents, maxBytes: Self.pageMaxBytes)
            for event in events { try body(event) }
            if events.isEmpty || next == position { break }
            position = next
        }
    }
}
