#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import DequeModule
import FerryProtocol
import FerryThreads
import Logging
import Synchronization
import ZeroMQ

/// Sends events to the local `ferryd` without ever blocking the app.
///
/// ```swift
/// let ferry = try FerryClient(configuration: .init(source: "checkout"), logger: logger)
/// ferry.track("Order Completed", properties: ["total": 42.5])
/// try await ferry.flush(timeout: .seconds(5))   // optional: wait for the durable acks
/// await ferry.shutdown()
/// ```
///
/// ``track(_:properties:userID:anonymousID:context:)`` and friends encode the event and put it in a bounded
/// in-memory outbox, then return; the events gather for up to ``FerryClientConfiguration/sendDelay``
/// (5 ms by default) and go out together in one message. ``send(_:)``, ``flush(timeout:)`` and
/// ``shutdown()`` never wait for that delay. The thread that queues an event that may go now hands
/// it to the socket itself (a non-blocking send) when the socket is free; a dedicated I/O thread
/// sends the rest, reads the acks as they arrive and re-sends. An event leaves the outbox only
/// when the agent acks it. Unacked batches are re-sent (after
/// ``FerryClientConfiguration/resendAfter``, and whenever the agent comes back), so the agent can
/// start after the app, restart or crash; its dedup makes re-sends safe.
public final class FerryClient: Sendable {
    /// The configuration in use.
    public let configuration: FerryClientConfiguration
    let logger: Logger
    let state: Mutex<State>
    let wake: WakePipe
    /// The I/O thread's alarm, which other threads set without waking it (the send delay's end).
    let alarm: IOAlarm
    /// The DEALER socket. Whoever holds this lock may use it (see `FerryClient+IO.swift`).
    let socket: Mutex<ZMQSocket>
    /// The socket's `ZMQ_FD`, which the I/O thread polls without the lock.
    let notification: CInt
    private let context: ZMQContext
    private let ids = EventIDGenerator()
    /// This client's session: with the sequence number it makes every event's intake exactly
    /// once, however late a re-send comes (see PROTOCOL.md, "Sessions").
    public let session = EventID(high: .random(in: 0...UInt64.max), low: .random(in: 0...UInt64.max))
    private let sequence = Atomic<UInt64>(0)
    private let thread = Mutex<DedicatedThread?>(nil)
    private let pid = UInt32(truncatingIfNeeded: getpid())

    struct Entry {
        var index: UInt64
        var id: EventID
        var frame: [UInt8]
        /// When `track()` queued it (read only with a ``FerryClientConfiguration/sendDelay``).
        var queuedAt: ContinuousClock.Instant?
    }

    struct InFlight {
        var entries: [Entry]
        var message: [[UInt8]]
        var sentAt: ContinuousClock.Instant
    }

    struct State {
        var pending: Deque<Entry> = []
        var inFlight: [UInt32: InFlight] = [:]
        var inFlightEvents = 0
        var nextIndex: UInt64 = 1
        var nextRequestID: UInt32 = 1
        /// Falls to 1 (no extensions, no session) if the agent answers `unsupported_version`.
        var protocolVersion = ferryProtocolVersion
        var receipts: [UInt64: @Sendable (Receipt) -> Void] = [:]
        var flushWaiters: [Int: (target: UInt64, continuation: CheckedContinuation<Bool, Never>)] = [:]
        var nextWaiterID = 0
        var statistics = FerryClientStatistics()
        /// Events up to this outbox index go out without waiting for the send delay: an awaited
        /// ``FerryClient/send(_:)`` or a ``FerryClient/flush(timeout:)`` is waiting for them.
        var sendNowThrough: UInt64 = 0
        /// A send failed (no agent, or its pipe is full): nobody sends until `retryAt`, when the
        /// I/O thread tries again (a failing send per queued event would cost a batch build each).
        var sendBlocked = false
        var retryAt: ContinuousClock.Instant?
        /// The I/O thread is in poll(2) and wakes by itself at `ioWakesAt` (nil: only when
        /// signalled). While it runs it reads the state again before sleeping, so nobody signals it.
        var ioAsleep = false
        var ioWakesAt: ContinuousClock.Instant?
        /// When the alarm is set to ring, if it is.
        var alarmAt: ContinuousClock.Instant?
        var closed = false

        /// When the oldest in-flight batch was (last) sent, if any: the next re-send is due then.
        var oldestSentAt: ContinuousClock.Instant? {
            var oldest: ContinuousClock.Instant?
            for batch in inFlight.values where oldest == nil || batch.sentAt < oldest! { oldest = batch.sentAt }
            return oldest
        }

        /// The smallest outbox index not yet resolved (everything below is acked or dropped).
        var lowestUnresolved: UInt64 {
            var lowest = pending.first?.index ?? nextIndex
            for batch in inFlight.values { lowest = min(lowest, batch.entries.first?.index ?? lowest) }
            return lowest
        }

        /// How many events the next message may carry now, or nil if none may go out: a full
        /// batch (`batchMaxEvents`, or as many as fit in `batchMaxBytes`) while the in-flight
        /// window (`maxInFlightBatches`) has room, a partial one only once its send delay ended
        /// and while fewer than `partialBatchesInFlight` messages are in flight. Under
        /// load the events that arrive meanwhile gather into one message instead of going out one
        /// message each, which would cost the agent a message apiece and queue them behind each
        /// other. Once closed, everything goes (the last pass before the socket closes).
        func nextBatchSize(_ configuration: FerryClientConfiguration, now: ContinuousClock.Instant) -> Int? {
            guard !pending.isEmpty, closed || inFlight.count < configuration.maxInFlightBatches else { return nil }
            var count = 0, bytes = 0
            for entry in pending.prefix(configuration.batchMaxEvents) {
                if count > 0 && bytes + entry.frame.count > configuration.batchMaxBytes { break }
                bytes += entry.frame.count
                count += 1
            }
            let full = count == configuration.batchMaxEvents || count < pending.count
            if !full && !closed {
                if inFlight.count >= configuration.partialBatchesInFlight { return nil }
                if let due = partialBatchDue(configuration), due > now { return nil }
            }
            return count
        }

        /// When the partial batch at the head of the outbox may go out under
        /// ``FerryClientConfiguration/sendDelay``: its oldest event's queue time plus the delay;
        /// `nil` when it need not wait (no delay, an awaited send or a flush waits for one of its
        /// events, closing, nothing queued).
        func partialBatchDue(_ configuration: FerryClientConfiguration) -> ContinuousClock.Instant? {
            guard configuration.sendDelay > .zero, !closed, let first = pending.first, first.index > sendNowThrough,
                  let queuedAt = first.queuedAt else { return nil }
            return queuedAt + configuration.sendDelay
        }

        /// When the I/O thread must wake by itself: to retry a failed send, to re-send the oldest
        /// unacked batch, or to send a partial batch whose send delay ends (if the in-flight window
        /// lets it go then); nil if only a signal, an ack or the alarm needs it.
        func ioDeadline(_ configuration: FerryClientConfiguration) -> ContinuousClock.Instant? {
            // While sends are blocked nothing goes out (re-sends neither) before the retry.
            if sendBlocked { return retryAt }
            var deadline: ContinuousClock.Instant?
            if let oldest = oldestSentAt { deadline = earliest(deadline, oldest + configuration.resendAfter) }
            if inFlight.count < min(configuration.partialBatchesInFlight, configuration.maxInFlightBatches),
               let due = partialBatchDue(configuration) {
                deadline = earliest(deadline, due)
            }
            return deadline
        }

        /// Makes sure the sleeping I/O thread wakes by `deadline`: sets the alarm (no wake-up
        /// now) if it would sleep longer. Returns true if the wake pipe must be written instead
        /// (no alarm on this system). Called with the state locked, so the thread cannot fall
        /// asleep in between with an older deadline.
        mutating func wakeIO(by deadline: ContinuousClock.Instant, now: ContinuousClock.Instant, alarm: IOAlarm) -> Bool {
            guard ioAsleep, ioWakesAt.map({ deadline < $0 }) ?? true else { return false }
            ioWakesAt = deadline
            if alarm.set(after: deadline - now) {
                alarmAt = deadline
                return false
            }
            ioAsleep = false
            return true
        }
    }

    /// Creates a client and starts its I/O thread. Works whether or not the agent is running.
    public init(configuration: FerryClientConfiguration = FerryClientConfiguration(), logger: Logger) throws {
        precondition(configuration.outboxCapacity > 0 && configuration.batchMaxEvents > 0 && configuration.batchMaxBytes > 0
                     && configuration.maxInFlightBatches > 0 && configuration.partialBatchesInFlight > 0
                     && configuration.sendDelay >= .zero)
        self.configuration = configuration
        self.logger = logger
        state = Mutex(State())
        let context: ZMQContext
        let pipe: WakePipe
        do {
            context = try ZMQContext()
            pipe = try WakePipe()
        } catch {
            throw FerryClientError.socket("\(error)")
        }
        self.context = context
        wake = pipe
        // The socket is made here and handed to whichever thread holds its lock (libzmq lets a
        // socket move between threads with a full memory barrier, which the lock gives).
        let socket: ZMQSocket
        do {
            socket = try ZMQSocket(context: context, type: .dealer)
            // Without a connected agent, sends fail at once instead of queueing in a pipe
            // the agent may never read; the events wait in the outbox instead.
            try socket.setOption(.immediate, 1)
            try socket.setOption(.reconnectInterval, 50)
            try socket.setOption(.reconnectIntervalMax, 500)
            try socket.connect(FerryPaths.ingestEndpoint(configuration.runtimeDirectory))
            notification = try socket.option(.notificationDescriptor)
        } catch {
            context.terminate()
            pipe.close()
            throw FerryClientError.socket("\(error)")
        }
        self.socket = Mutex(socket)
        alarm = IOAlarm()
        let thread = DedicatedThread(name: "ferry-client") { [self] in runIO() }
        self.thread.withLock { $0 = thread }
    }

    // MARK: Emitting

    // Every helper takes an `anonymousID` (empty: the configuration's) and a `context` (Segment's
    // context object: app, device, locale …; empty: none). The helpers encode the event straight
    // into its frame (no ``Event``, no JSON buffer); use ``enqueue(_:)`` with an ``Event`` for a
    // category, a once-key or a local-only event.

    /// Queues a `track` event (the user did something) and returns its id at once.
    ///
    /// ```swift
    /// ferry.track("Order Completed", properties: ["total": 42.5], userID: "u1")
    /// ```
    @discardableResult
    public func track(
        _ name: String, properties: [String: FerryValue] = [:], userID: String = "", anonymousID: String = "",
        context: [String: FerryValue] = [:]
    ) -> EventID {
        queueHelperEvent(.track, name: name, properties: properties, userID: userID, anonymousID: anonymousID,
                context: context)
    }

    /// Queues a `screen` event (the user saw an app screen) and returns its id at once.
    @discardableResult
    public func screen(
        _ name: String, properties: [String: FerryValue] = [:], userID: String = "", anonymousID: String = "",
        context: [String: FerryValue] = [:]
    ) -> EventID {
        queueHelperEvent(.screen, name: name, properties: properties, userID: userID, anonymousID: anonymousID,
                context: context)
    }

    /// Queues a `page` event (the user saw a web page) and returns its id at once.
    ///
    /// ```swift
    /// ferry.page("Pricing", properties: ["path": "/pricing"], context: ["locale": "fr-FR"])
    /// ```
    @discardableResult
    public func page(
        _ name: String, properties: [String: FerryValue] = [:], userID: String = "", anonymousID: String = "",
        context: [String: FerryValue] = [:]
    ) -> EventID {
        queueHelperEvent(.page, name: name, properties: properties, userID: userID, anonymousID: anonymousID,
                context: context)
    }

    /// Queues an `identify` event (who the user is, with traits) and returns its id at once.
    @discardableResult
    public func identify(
        userID: String, traits: [String: FerryValue] = [:], anonymousID: String = "", context: [String: FerryValue] = [:]
    ) -> EventID {
        queueHelperEvent(.identify, name: "", properties: traits, userID: userID, anonymousID: anonymousID,
                context: context)
    }

    /// Queues a `group` event (the user belongs to group `groupID`, an account or organisation,
    /// with the group's traits) and returns its id at once.
    ///
    /// ```swift
    /// ferry.group("acme", traits: ["plan": "enterprise"], userID: "u1")
    /// ```
    @discardableResult
    public func group(
        _ groupID: String, traits: [String: FerryValue] = [:], userID: String = "", anonymousID: String = "",
        context: [String: FerryValue] = [:]
    ) -> EventID {
        queueHelperEvent(.group, name: "", properties: traits, userID: userID, anonymousID: anonymousID,
                groupID: groupID, context: context)
    }

    /// Queues an `alias` event (`previousID`, such as an anonymous id, is the same user as
    /// `userID`) and returns its id at once.
    ///
    /// ```swift
    /// ferry.alias(userID: "u1", previousID: "anon-7")
    /// ```
    @discardableResult
    public func alias(
        userID: String, previousID: String, anonymousID: String = "", context: [String: FerryValue] = [:]
    ) -> EventID {
        queueHelperEvent(.alias, name: "", userID: userID, anonymousID: anonymousID, previousID: previousID,
                context: context)
    }

    /// A helper's event, its properties and context encoded straight into the frame.
    private func queueHelperEvent(
        _ type: EventType, name: String, properties: [String: FerryValue] = [:], userID: String, anonymousID: String,
        groupID: String = "", previousID: String = "", context: [String: FerryValue]
    ) -> EventID {
        encodeAndQueue(type, name: name, userID: userID, anonymousID: anonymousID, groupID: groupID, previousID: previousID,
                jsonCapacity: FerryValue.estimatedJSONSize(properties) + FerryValue.estimatedJSONSize(context),
                properties: { if !properties.isEmpty { FerryValue.appendObject(properties, to: &$0) } },
                context: { if !context.isEmpty { FerryValue.appendObject(context, to: &$0) } })
    }

    /// Queues any event and returns its id at once. After ``shutdown()`` the event is dropped.
    @discardableResult
    public func enqueue(_ event: Event) -> EventID {
        queue(event, receipt: nil)
    }

    /// Sends an event and waits for its final status (accepted, duplicate, rejected, …). Waits as
    /// long as it takes for the agent to come up; combine with a timeout if that matters. The
    /// event does not wait for the send delay: it goes out at once, with the events queued before
    /// it (from the calling thread when the socket is free).
    public func send(_ event: Event) async -> Receipt {
        await withCheckedContinuation { continuation in
            _ = queue(event, receipt: { continuation.resume(returning: $0) }, urgent: true)
        }
    }

    /// Queues an event at once, in call order like ``enqueue(_:)``, and calls `onReceipt` once
    /// with its final status: on the thread that reads the agent's ack (the client's I/O thread,
    /// or a thread that sent events itself and found acks waiting), or on the caller's when the
    /// event is refused at once. `onReceipt` must be quick and must not call back into the client.
    /// Nobody awaits the event here, so it may wait for the send delay like ``enqueue(_:)``.
    ///
    /// ```swift
    /// for line in lines {   // one receipt per line, the events sent in line order
    ///     ferry.enqueue(event(line)) { receipt in report(line, receipt.status) }
    /// }
    /// ```
    @discardableResult
    public func enqueue(_ event: Event, onReceipt: @escaping @Sendable (Receipt) -> Void) -> EventID {
        queue(event, receipt: onReceipt)
    }

    private func queue(_ event: Event, receipt: (@Sendable (Receipt) -> Void)?, urgent: Bool = false) -> EventID {
        encodeAndQueue(event.type, name: event.name, userID: event.userID, onceKey: event.onceKey, category: event.category,
                localOnly: event.localOnly, anonymousID: event.anonymousID, groupID: event.groupID,
                previousID: event.previousID, jsonCapacity: event.propertiesJSON.count + event.contextJSON.count,
                receipt: receipt, urgent: urgent, properties: { $0.append(contentsOf: event.propertiesJSON) },
                context: { $0.append(contentsOf: event.contextJSON) })
    }

    /// Encodes an event (its properties and context appended by the closures, see
    /// `WireEvent.encode`) and puts it in the outbox. If it may go now (no send delay, `urgent`:
    /// a caller awaits it, or it fills a batch) this thread sends it when the socket is free;
    /// if it waits for the send delay, the I/O thread's alarm is set for the delay's end.
    private func encodeAndQueue(
        _ type: EventType, name: String, userID: String, onceKey: String = "", category: UInt8 = 0,
        localOnly: Bool = false, anonymousID: String, groupID: String, previousID: String, jsonCapacity: Int,
        receipt: (@Sendable (Receipt) -> Void)? = nil, urgent: Bool = false, properties: (inout [UInt8]) -> Void,
        context: (inout [UInt8]) -> Void
    ) -> EventID {
        let now = WallClock.unixMilliseconds()
        let id = ids.next(unixMilliseconds: now)
        let frame = WireEvent.encode(
            id: id, timestamp: now, sequence: sequence.wrappingAdd(1, ordering: .relaxed).newValue, pid: pid,
            type: type, category: category, flags: localOnly ? .localOnly : [], source: configuration.source,
            name: name, userID: userID, onceKey: onceKey, session: session,
            anonymousID: anonymousID.isEmpty ? configuration.anonymousID : anonymousID, groupID: groupID,
            previousID: previousID, jsonCapacity: jsonCapacity, properties: properties, context: context)
        var dropped: (id: EventID, onReceipt: (@Sendable (Receipt) -> Void)?, flushWaiters: Bool)?
        var refused = false
        enum Next { case nothing, send, wakeIO }
        let lingering = configuration.sendDelay > .zero
        let queuedAt = lingering ? ContinuousClock.now : nil
        let next = state.withLock { state -> Next in
            guard !state.closed else {
                refused = true
                return .nothing
            }
            state.statistics.enqueued += 1
            if state.pending.count + state.inFlightEvents >= configuration.outboxCapacity {
                state.statistics.droppedFromOutbox += 1
                if configuration.overflowPolicy == .dropOldest, let oldest = state.pending.popFirst() {
                    // Its receipt and the flush waiters it held back are answered outside the lock
                    // (most apps register neither: no lookup, no second lock then).
                    dropped = (oldest.id, state.receipts.isEmpty ? nil : state.receipts.removeValue(forKey: oldest.index),
                               !state.flushWaiters.isEmpty)
                } else {
                    refused = true
                    return .nothing
                }
            }
            let index = state.nextIndex
            state.nextIndex += 1
            state.pending.append(Entry(index: index, id: id, frame: frame, queuedAt: queuedAt))
            if let receipt { state.receipts[index] = receipt }
            if urgent { state.sendNowThrough = index }
            // While sends fail the I/O thread's retry sends this one too.
            if state.sendBlocked { return .nothing }
            guard let queuedAt else {
                // No send delay: send now unless the in-flight window holds the batch back (the
                // ack that opens it wakes the I/O thread, which sends then).
                return state.nextBatchSize(configuration, now: ContinuousClock.now) == nil ? .nothing : .send
            }
            if state.nextBatchSize(configuration, now: queuedAt) != nil { return .send }
            // The batch waits for the send delay: the I/O thread must wake when it ends.
            guard state.inFlight.count < min(configuration.partialBatchesInFlight, configuration.maxInFlightBatches),
                  let due = state.partialBatchDue(configuration) else { return .nothing }
            return state.wakeIO(by: due, now: queuedAt, alarm: alarm) ? .wakeIO : .nothing
        }
        if let dropped {
            dropped.onReceipt?(Receipt(id: dropped.id, status: .droppedFromOutbox))
            if dropped.flushWaiters { resumeFlushWaiters() }
        }
        if refused {
            let closed = state.withLock { $0.closed }
            receipt?(Receipt(id: id, status: closed ? .clientClosed : .droppedFromOutbox))
            return id
        }
        switch next {
        case .nothing: break
        case .send: sendFromCaller()
        case .wakeIO: wake.wake()
        }
        return id
    }

    // MARK: Waiting

    /// Waits until every event queued before this call has a final status (acked, or dropped by
    /// the overflow policy). Throws ``FerryClientError/timeout(_:)`` if that takes longer than
    /// `timeout`; the events stay queued.
    public func flush(timeout: Duration) async throws {
        let (waiterID, target, done) = state.withLock { state -> (Int, UInt64, Bool) in
            let target = state.nextIndex - 1
            defer { state.nextWaiterID += 1 }
            return (state.nextWaiterID, target, state.lowestUnresolved > target)
        }
        if done { return }
        let completed = await withTaskGroup(of: Bool?.self) { group -> Bool in
            group.addTask {
                await withCheckedContinuation { continuation in
                    enum Start { case done, closed, waiting }
                    let start = self.state.withLock { state -> Start in
                        if state.lowestUnresolved > target { return .done }
                        // After shutdown() nothing resolves a waiter (and the wake pipe is gone).
                        if state.closed { return .closed }
                        state.flushWaiters[waiterID] = (target, continuation)
                        // A flush does not wait out the send delay: what it waits for goes now.
                        state.sendNowThrough = max(state.sendNowThrough, target)
                        return .waiting
                    }
                    switch start {
                    case .done: continuation.resume(returning: true)
                    case .closed: continuation.resume(returning: false)
                    case .waiting: self.sendFromCaller()
                    }
                }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            let first = await group.next()!
            if first == nil {
                // Timed out: resume the waiter ourselves if the I/O thread has not.
                let waiter = state.withLock { $0.flushWaiters.removeValue(forKey: waiterID) }
                waiter?.continuation.resume(returning: false)
                let other = await group.next()!
                return other ?? false
            }
            group.cancelAll()
            return first!
        }
        if !completed {
            let pending = statistics.pending
            throw FerryClientError.timeout("\(pending) events still unacknowledged after \(timeout)")
        }
    }

    func resumeFlushWaiters() {
        let ready = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
            guard !state.flushWaiters.isEmpty else { return [] }
            let lowest = state.lowestUnresolved
            let done = state.flushWaiters.filter { $0.value.target < lowest }
            for key in done.keys { state.flushWaiters.removeValue(forKey: key) }
            return done.values.map(\.continuation)
        }
        ready.forEach { $0.resume(returning: true) }
    }

    /// Current counters.
    public var statistics: FerryClientStatistics {
        state.withLock { state in
            var statistics = state.statistics
            statistics.pending = state.pending.count + state.inFlightEvents
            return statistics
        }
    }

    /// Sends the events still queued at once (none waits for the send delay), then stops the I/O
    /// thread and closes the socket, which keeps trying to pass the last messages to the agent for
    /// up to a second without making this call wait for acks. Events
    /// not yet acked are abandoned (their ``send(_:)`` callers get
    /// ``Receipt/Status-swift.enum/clientClosed``: the agent may still have stored them); call
    /// ``flush(timeout:)`` first to wait for them.
    public func shutdown() async {
        let first = state.withLock { state -> Bool in
            defer { state.closed = true }
            return !state.closed
        }
        guard first else { return }
        wake.wake()
        if let thread = thread.withLock({ $0 }) { await thread.joinAsync() }
        let (receipts, waiters, entries) = state.withLock { state in
            defer {
                state.receipts = [:]
                state.flushWaiters = [:]
            }
            let entries = Array(state.pending) + state.inFlight.values.flatMap(\.entries)
            return (state.receipts, state.flushWaiters.values.map(\.continuation), entries)
        }
        let idsByIndex = Dictionary(uniqueKeysWithValues: entries.map { ($0.index, $0.id) })
        for (index, onReceipt) in receipts {
            onReceipt(Receipt(id: idsByIndex[index] ?? .zero, status: .clientClosed))
        }
        waiters.forEach { $0.resume(returning: false) }
        await BlockingExecutor.shared.run { [context, wake, alarm] in
            context.terminate()
            wake.close()
            alarm.close()
        }
    }
}
