import FerryProtocol
import Logging
import Synchronization

/// Where delivery stands, for `ferry status`.
public struct DeliveryState: Sendable {
    /// What the loop is doing.
    public enum Phase: String, Sendable {
        case starting, idle, delivering, retrying, paused, stopped
    }
    /// The sink's name.
    public var sink: String
    /// What the loop is doing now.
    public var phase: Phase = .starting
    /// Agent ms of the last successful batch.
    public var lastSuccessAt: UInt64?
    /// Failed attempts since the last success.
    public var consecutiveFailures = 0
    /// The last failure's message.
    public var lastError: String?
    /// Agent ms of the next retry while ``phase`` is `retrying`.
    public var retryAt: UInt64?
}

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
            throw AgentError(code: .corrupt, message: "cursor file \(path) has a bad header")
        }
        let length = Int(readLE(bytes, at: 20, as: UInt32.self))
        guard bytes.count == 28 + length,
              CRC32C.checksum(Array(bytes[..<(bytes.count - 4)])) == readLE(bytes, at: bytes.count - 4, as: UInt32.self) else {
            throw AgentError(code: .corrupt, message: "cursor file \(path) fails its checksum")
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
}

/// Reads the log from the cursor, hands batches to the sink, and advances the cursor only after
/// the sink acknowledged a batch. Failures are retried with exponential backoff and full jitter
/// (or the sink's `retry(after:)`); nothing is skipped.
final class DeliveryLoop: Sendable {
    let sink: any Sink
    private let log: SegmentedLog
    private let cursorStore: CursorStore
    private let configuration: AgentConfiguration.Delivery
    private let counters: AgentCounters
    private let logger: Logger
    private let io: BlockingExecutor
    let wakeup = AsyncSignal()
    let state: Mutex<DeliveryState>
    private let published: @Sendable (DeliveryBatch) -> Void
    private let gate: any DeliveryGate
    private let blocked: @Sendable ([StoredEvent], String) -> Void
    private let initialCheckpoint: [UInt8]?

    /// `gate` is asked before every attempt; `blocked` is told about events it refused.
    /// `checkpoint` is the sink's checkpoint at start, stored again when a batch is skipped whole.
    init(
        sink: any Sink, log: SegmentedLog, cursorStore: CursorStore, configuration: AgentConfiguration.Delivery,
        counters: AgentCounters, logger: Logger, checkpoint: [UInt8]? = nil,
        gate: any DeliveryGate = OpenDeliveryGate(),
        blocked: @escaping @Sendable ([StoredEvent], String) -> Void = { _, _ in },
        published: @escaping @Sendable (DeliveryBatch) -> Void
    ) {
        self.sink = sink
        self.gate = gate
        self.blocked = blocked
        self.initialCheckpoint = checkpoint
        self.log = log
        self.cursorStore = cursorStore
        self.configuration = configuration
        self.counters = counters
        self.logger = logger
        self.published = published
        io = BlockingExecutor.shared
        state = Mutex(DeliveryState(sink: sink.name))
    }

    /// Runs until the task is cancelled. A batch being delivered when cancellation comes is
    /// finished or abandoned (and re-delivered after restart), never half-acknowledged.
    func run() async {
        defer { state.withLock { $0.phase = .stopped } }
        let log = self.log
        let maxEvents = configuration.batchMaxEvents, maxBytes = configuration.batchMaxBytes
        var lastCheckpoint = initialCheckpoint
        while !Task.isCancelled {
            let read: (events: [StoredEvent], next: LogPosition)
            do {
                read = try await io.run { try log.read(from: log.cursor, maxEvents: maxEvents, maxBytes: maxBytes) }
            } catch {
                logger.error("cannot read the log", metadata: ["error": "\(error)"])
                guard await pause(.milliseconds(configuration.retryMaxMilliseconds)) else { return }
                continue
            }
            if read.events.isEmpty {
                state.withLock { $0.phase = .idle }
                await wakeup.wait()
                continue
            }
            let batch: DeliveryBatch, checkpoint: [UInt8]?
            switch await deliverWithRetry(DeliveryBatch(events: read.events)) {
            case .cancelled:
                return
            case .paused:
                state.withLock { $0.phase = .paused }
                await wakeup.wait()
                continue
            case .delivered(let sent, let stored):
                batch = sent
                checkpoint = sent.events.isEmpty ? lastCheckpoint : stored
            }
            lastCheckpoint = checkpoint
            do {
                let store = cursorStore, next = read.next
                try await io.run { try store.save(next, checkpoint: checkpoint) }
            } catch {
                // The sink has the batch but the cursor did not move: it will be delivered again
                // after a restart (at-least-once); the file sink's checkpoint makes that harmless.
                logger.error("cannot persist the delivery cursor", metadata: ["error": "\(error)"])
            }
            log.markDelivered(read.events, next: read.next)
            counters.delivered.add(batch.events.count, ordering: .relaxed)
            guard !batch.events.isEmpty else { continue }
            state.withLock {
                $0.phase = .delivering
                $0.lastSuccessAt = WallClock.unixMilliseconds()
                $0.consecutiveFailures = 0
                $0.retryAt = nil
            }
            published(batch)
        }
    }

    private enum Outcome {
        case delivered(DeliveryBatch, checkpoint: [UInt8]?)
        case paused
        case cancelled
    }

    /// Delivers one batch, retrying until it succeeds, asking the gate before every attempt.
    /// Events the gate blocks are reported and left out; an all-blocked batch is "delivered" empty.
    private func deliverWithRetry(_ original: DeliveryBatch) async -> Outcome {
        var attempt = 0
        var pending = original
        while !Task.isCancelled {
            let batch: DeliveryBatch
            switch gate.admit(pending, sink: sink.name) {
            case .paused:
                return .paused
            case .deliver(let admitted, let refused, let reason):
                if !refused.isEmpty { blocked(refused, reason) }
                batch = admitted
                pending.events = admitted.events
            }
            if batch.events.isEmpty { return .delivered(batch, checkpoint: nil) }
            state.withLock { $0.phase = attempt == 0 ? .delivering : .retrying }
            do {
                return .delivered(batch, checkpoint: try await sink.deliver(batch))
            } catch {
                attempt += 1
                counters.deliveryFailures.add(1, ordering: .relaxed)
                let sinkError = error as? SinkError
                var delay = backoff(attempt: attempt)
                if case .retry(let after?) = sinkError?.disposition { delay = max(after, .zero) }
                let message = sinkError?.message ?? "\(error)"
                logger.warning("delivery failed; will retry", metadata: [
                    "sink": "\(sink.name)", "attempt": "\(attempt)", "error": "\(message)",
                    "retry_in_ms": "\(delay.components.seconds * 1000 + delay.components.attoseconds / 1_000_000_000_000_000)",
                ])
                let retryAt = WallClock.unixMilliseconds() + UInt64(max(0, delay.components.seconds * 1000))
                state.withLock {
                    $0.phase = .retrying
                    $0.consecutiveFailures += 1
                    $0.lastError = message
                    $0.retryAt = retryAt
                }
                guard await pause(delay) else { return .cancelled }
            }
        }
        return .cancelled
    }

    /// Exponential backoff with full jitter: uniform in [0, min(cap, initial·2^attempt)].
    func backoff(attempt: Int) -> Duration {
        let ceiling = min(Double(configuration.retryMaxMilliseconds),
                          Double(configuration.retryInitialMilliseconds) * pow2(min(attempt, 30)))
        return .milliseconds(Int(Double.random(in: 0...ceiling)))
    }

    private func pow2(_ n: Int) -> Double { Double(1 << n) }

    /// Sleeps unless cancelled; returns false when cancelled.
    private func pause(_ duration: Duration) async -> Bool {
        do {
            try await Task.sleep(for: duration)
            return true
        } catch {
            return false
        }
    }
}
