import FerryProtocol

/// How a ``FerryClient`` behaves. Every field has a default.
public struct FerryClientConfiguration: Sendable, Hashable {
    /// The name events are stamped with (`source`). Defaults to the process name.
    public var source: String
    /// Where the agent's sockets are; same rules as the agent (`$FERRY_RUNTIME_DIR`, …).
    public var runtimeDirectory: String
    /// Most events held in memory waiting for an ack.
    public var outboxCapacity: Int
    /// What happens to an event that does not fit in the outbox.
    public var overflowPolicy: OverflowPolicy
    /// Most events per message sent to the agent.
    public var batchMaxEvents: Int
    /// Most bytes of event frames per message (a larger single event still goes alone). The
    /// agent holds a few unread messages per client, so this bounds what each client can make
    /// it hold; 64 KiB keeps a message's cost per event small.
    public var batchMaxBytes: Int
    /// Most messages sent but not yet acked (full batches use the whole window).
    public var maxInFlightBatches: Int
    /// A message that is not a full batch (held back by neither `batchMaxEvents` nor
    /// `batchMaxBytes`) goes out only while fewer than this many messages are in flight (default
    /// 1): the events queued meanwhile go out together, in one message, when the ack comes, so a
    /// burst costs one wake-up and one message instead of one each per event. An app sending
    /// rarely still sends each event at once.
    public var partialBatchesInFlight: Int
    /// How long an event nobody awaits may wait for more events before it goes out (default 5 ms;
    /// zero: at once). Like Kafka's `linger.ms` (whose default Kafka 4.0 raised from 0 to 5 ms,
    /// KIP-1030): at a trickle, events sent one by one each cost a wake-up of this process's
    /// threads, of libzmq's I/O threads on both sides and of the agent's threads, and an agent
    /// commit; waiting lets several share them. ``FerryClient/track(_:properties:userID:anonymousID:context:)``
    /// and the other helpers, ``FerryClient/enqueue(_:)`` and ``FerryClient/enqueue(_:onReceipt:)``
    /// wait; an awaited ``FerryClient/send(_:)``, ``FerryClient/flush(timeout:)``,
    /// ``FerryClient/shutdown()`` and a batch of `batchMaxEvents` events never do (one filled by
    /// `batchMaxBytes` first waits at most the delay).
    ///
    /// Meanwhile the events live only in this process's memory, as every unacked event does: a
    /// crash of the app within the delay loses them. That window is the delay plus the agent's
    /// commit (about a millisecond); Segment's libraries hold events in memory for 0.5 to 10 s
    /// (their flush interval) before sending. Set it to `.zero` to send each event at once.
    public var sendDelay: Duration
    /// A message not acked within this time is sent again (the agent drops the duplicates).
    public var resendAfter: Duration
    /// The `anonymousId` every event carries unless the event sets its own (`Event.anonymousID`);
    /// empty (the default) for none. Use a stable id for a user not known by a user id yet.
    public var anonymousID: String

    /// What to drop when the outbox is full.
    public enum OverflowPolicy: String, Sendable, Hashable, CaseIterable {
        /// Drop the oldest event not yet sent (the default: fresh data wins). If every held
        /// event is already in flight, the new one is dropped instead.
        case dropOldest = "drop-oldest"
        /// Drop the new event.
        case dropNewest = "drop-newest"
    }

    /// Creates a configuration.
    public init(
        source: String = FerryClientConfiguration.processName(),
        runtimeDirectory: String = FerryPaths.agentRuntimeDirectory(),
        outboxCapacity: Int = 10_000,
        overflowPolicy: OverflowPolicy = .dropOldest,
        batchMaxEvents: Int = 256,
        batchMaxBytes: Int = 64 << 10,
        maxInFlightBatches: Int = 8,
        resendAfter: Duration = .seconds(2),
        anonymousID: String = "",
        partialBatchesInFlight: Int = 1,
        sendDelay: Duration = .milliseconds(5)
    ) {
        self.source = source
        self.runtimeDirectory = runtimeDirectory
        self.outboxCapacity = outboxCapacity
        self.overflowPolicy = overflowPolicy
        self.batchMaxEvents = batchMaxEvents
        self.batchMaxBytes = batchMaxBytes
        self.maxInFlightBatches = maxInFlightBatches
        self.resendAfter = resendAfter
        self.anonymousID = anonymousID
        self.partialBatchesInFlight = partialBatchesInFlight
        self.sendDelay = sendDelay
    }

    /// The current process's name, from `/proc/self/comm` or `argv[0]`.
    public static func processName() -> String {
        let arguments = CommandLine.arguments
        guard let first = arguments.first, !first.isEmpty else { return "unknown" }
        return String(first.split(separator: "/").last ?? Substring(first))
    }
}
