import NIOCore

/// The decisions of one HTTP API connection as a value (after async-http-client's
/// `HTTP1ConnectionStateMachine` and hummingbird's `HTTPConnectionStateHandler`): events go in —
/// request parts, the bytes' arrival, a response ready, the timer, quiescing, the close — and
/// the actions to perform come out. No I/O, no clock: every event that needs the time is given
/// `now`, so ``HTTPConnectionHandler`` reads its event loop's clock and tests give a fake one.
///
/// What it decides:
/// - **Read deadline.** A request must arrive whole within ``Configuration/requestTimeout`` of
///   its first byte; else `408` and the connection closes (slow-loris).
/// - **Idle.** A connection with nothing being received or answered for
///   ``Configuration/idleTimeout`` is closed.
/// - **Body budget.** Each body part is taken against the listener's budget (shared by every
///   connection); a part that does not fit makes the request `503 busy`, and a body past
///   ``Configuration/maxBodyBytes`` `413`. A refused body is read and thrown away (so the client
///   reads the answer rather than a reset), up to ``Configuration/maxDiscardedBytes``; then the
///   answer is written at once and the connection closes.
/// - **Keep-alive.** A response keeps the connection open when the request asked for it and no
///   refused body was thrown away.
/// - **Pipelined requests.** Requests received before the previous one is answered wait in order
///   (at most ``Configuration/maxQueued``, then reading pauses); one is processed at a time, and
///   answers are written in the order the requests came, whatever order they are decided in.
/// - **Quiescing** (SIGTERM): the request being processed is answered and every answer queued
///   is written, each before the close; requests not yet processed are answered `503
///   shutting_down` (retryable); then the connection closes. After
///   ``Configuration/shutdownGrace`` it is closed whatever is left.
package struct HTTPConnectionStateMachine {
    /// The limits of a connection.
    package struct Configuration: Sendable {
        /// How long a request may take to arrive, first byte to end.
        package var requestTimeout: TimeAmount
        /// How long a connection may stay idle between requests.
        package var idleTimeout: TimeAmount
        /// How long quiescing waits for the answers queued before it closes anyway.
        package var shutdownGrace: TimeAmount
        /// The largest body.
        package var maxBodyBytes: Int
        /// The most bytes of a refused body read and thrown away before the connection closes.
        package var maxDiscardedBytes: Int
        /// The most requests waiting for their answers (being processed or queued behind).
        package var maxQueued: Int
        /// Which `Host` and `Origin` headers are served.
        package var hostPolicy: HostPolicy

        /// The limits of docs/HTTP-INGEST.md with `hostPolicy`.
        package init(
            requestTimeout: TimeAmount = .seconds(HTTPIngestServer.requestSeconds),
            idleTimeout: TimeAmount = .seconds(HTTPIngestServer.idleSeconds), shutdownGrace: TimeAmount = .seconds(5),
            maxBodyBytes: Int = IngestVerdict.maxBodyBytes, maxDiscardedBytes: Int = 8 * IngestVerdict.maxBodyBytes,
            maxQueued: Int = 16, hostPolicy: HostPolicy
        ) {
            self.requestTimeout = requestTimeout
            self.idleTimeout = idleTimeout
            self.shutdownGrace = shutdownGrace
            self.maxBodyBytes = maxBodyBytes
            self.maxDiscardedBytes = maxDiscardedBytes
            self.maxQueued = maxQueued
            self.hostPolicy = hostPolicy
        }
    }

    /// What the machine reads of a request head.
    package struct Head: Sendable, Equatable {
        /// The method (`POST`).
        package var method: String
        /// The request target (`/v1/batch`).
        package var uri: String
        /// Whether the request asks to keep the connection open (HTTP/1.1 without `Connection: close`).
        package var keepAlive: Bool
        /// `Content-Type`.
        package var contentType: String?
        /// `Content-Encoding`.
        package var contentEncoding: String?
        /// `Content-Length`, when given and a number.
        package var contentLength: Int?
        /// `Host`.
        package var host: String?
        /// `Origin` (browsers send it).
        package var origin: String?
        /// `Authorization` (Basic: the write key).
        package var authorization: String?

        /// A head; every header is optional.
        package init(method: String, uri: String, keepAlive: Bool = true, contentType: String? = "application/json",
                     contentEncoding: String? = nil, contentLength: Int? = nil, host: String? = "127.0.0.1",
                     origin: String? = nil, authorization: String? = nil) {
            self.method = method
            self.uri = uri
            self.keepAlive = keepAlive
            self.contentType = contentType
            self.contentEncoding = contentEncoding
            self.contentLength = contentLength
            self.host = host
            self.origin = origin
            self.authorization = authorization
        }
    }

    /// A whole request that may be stored: what a responder is given.
    package struct Request: Sendable, Equatable {
        /// Its place on the connection (0, 1, …).
        package var number: Int
        /// Its head.
        package var head: Head
        /// What its head allows (endpoint, gzip).
        package var admitted: IngestVerdict.Admitted
        /// The whole body, as received.
        package var body: ByteBuffer
        /// When its head was decoded (monotonic nanoseconds of the loop's clock).
        package var receivedAt: NIODeadline
    }

    /// What to do.
    package enum Action: Equatable {
        /// Hand the request to the responder; feed its answer back with ``responseReady(_:number:now:)``.
        case process(Request)
        /// Write this response; close once it is written when `keepAlive` is false.
        case write(IngestResponse, keepAlive: Bool)
        /// Close now (nothing left to write).
        case close
        /// Arm the connection's one timer for `at` (replacing any armed); call ``timerFired(now:)``.
        case scheduleTimer(at: NIODeadline)
        /// Disarm the timer.
        case cancelTimer
        /// Give `bytes` back to the listener's body budget.
        case release(Int)
        /// Pass on a read held while reading was paused.
        case resumeReading
    }

    /// A request being received.
    private struct Receiving {
        var number: Int
        var head: Head
        var admitted: Result<IngestVerdict.Admitted, IngestRefusal>
        var body: ByteBuffer
        var reserved = 0
        var discarded = 0
        var receivedAt: NIODeadline
    }

    /// A request received whole, in the order of answers.
    private enum Slot {
        /// Waiting for its turn to be processed.
        case waiting(Request, reserved: Int)
        /// With the responder.
        case processing(number: Int, keepAlive: Bool, reserved: Int)
        /// Decided: written when every slot before it is.
        case ready(IngestResponse, keepAlive: Bool, reserved: Int)
    }

    private enum Phase: Equatable {
        /// Serving requests.
        case open
        /// No more requests are taken: the queued answers are written, then the connection closes.
        case quiescing
        /// Closed or closing: nothing more is done.
        case closed
    }

    /// The limits it decides with.
    package let configuration: Configuration
    private var phase = Phase.open
    private var receiving: Receiving?
    private var slots: [Slot] = []
    private var nextNumber = 0
    /// The first byte of the request being received arrived then (nil: none being received).
    private var requestStarted: NIODeadline?
    /// The last time anything was received or written.
    private var lastActivity: NIODeadline
    private var quiescedAt: NIODeadline?
    /// The timer as last armed.
    private var timer: NIODeadline?
    private var readingPaused = false

    /// A connection opened at `now`.
    package init(configuration: Configuration, now: NIODeadline) {
        self.configuration = configuration
        lastActivity = now
    }

    /// Whether reads may go on (false while the queue is full or the connection is closing).
    package var shouldRead: Bool { phase == .open && slots.count < configuration.maxQueued }

    /// Whether the connection is being served (not closing).
    package var isOpen: Bool { phase == .open }

    // MARK: Events

    /// The connection is active: the idle timer starts.
    package mutating func activated(now: NIODeadline) -> [Action] {
        lastActivity = now
        return rearm()
    }

    /// Bytes arrived (before they are decoded): a request's deadline runs from its first byte.
    package mutating func bytesArrived(now: NIODeadline) -> [Action] {
        guard phase == .open else { return [] }
        lastActivity = now
        if requestStarted == nil { requestStarted = now }
        return rearm()
    }

    /// A request head was decoded; `localPort` is the listener's port (for `Host`).
    package mutating func head(_ head: Head, localPort: Int?, now: NIODeadline) -> [Action] {
        guard phase == .open else { return [] }
        if requestStarted == nil { requestStarted = now }
        lastActivity = now
        let admitted: Result<IngestVerdict.Admitted, IngestRefusal>
        if let refusal = configuration.hostPolicy.refusal(host: head.host, origin: head.origin, port: localPort) {
            admitted = .failure(refusal)
        } else if let length = head.contentLength, length > configuration.maxBodyBytes {
            admitted = .failure(IngestRefusal(413, "too_large", "the body is \(length) bytes; the limit is \(configuration.maxBodyBytes)"))
        } else {
            admitted = IngestVerdict.admit(method: head.method, uri: head.uri, contentType: head.contentType,
                                           contentEncoding: head.contentEncoding, contentLength: head.contentLength)
        }
        receiving = Receiving(number: nextNumber, head: head, admitted: admitted, body: ByteBuffer(), receivedAt: now)
        nextNumber += 1
        return rearm()
    }

    /// A part of the body arrived; `reserve` takes bytes from the listener's budget (false: no
    /// room, nothing taken).
    package mutating func body(_ part: ByteBuffer, now: NIODeadline, reserve: (Int) -> Bool) -> [Action] {
        guard phase == .open, var current = receiving else { return [] }
        lastActivity = now
        var actions: [Action] = []
        let count = part.readableBytes
        if case .success = current.admitted {
            if !reserve(count) {
                // Every connection's bodies together stay under the budget: memory is bounded
                // whatever the number of clients sending 5 MiB at once.
                current.admitted = .failure(IngestRefusal(503, "busy", "the agent is receiving as many request bodies as it holds at once; retry shortly",
                                                          retryAfter: IngestVerdict.retryAfterBusy))
                current.discarded = current.body.readableBytes + count
                current.body = ByteBuffer()
                if current.reserved > 0 { actions.append(.release(current.reserved)) }
                current.reserved = 0
            } else if current.body.readableBytes + count > configuration.maxBodyBytes {
                actions.append(.release(current.reserved + count))
                current.reserved = 0
                current.admitted = .failure(IngestRefusal(413, "too_large", "the body is larger than \(configuration.maxBodyBytes) bytes"))
                current.discarded = current.body.readableBytes + count
                current.body = ByteBuffer()
            } else {
                current.reserved += count
                var part = part
                current.body.writeBuffer(&part)
            }
        } else {
            current.discarded += count
        }
        receiving = current
        if current.discarded > configuration.maxDiscardedBytes, case .failure(let refusal) = current.admitted {
            // Thrown away long enough: answer now and close.
            receiving = nil
            requestStarted = nil
            slots.append(.ready(refusal.response, keepAlive: false, reserved: 0))
            phase = .quiescing
            quiescedAt = now
            actions += advance(now: now)
        }
        return actions
    }

    /// The request's end arrived: it is decided (refused) or queued for processing.
    package mutating func end(now: NIODeadline) -> [Action] {
        guard phase == .open, let current = receiving else { return [] }
        receiving = nil
        requestStarted = nil
        lastActivity = now
        switch current.admitted {
        case .failure(let refusal):
            slots.append(.ready(refusal.response, keepAlive: current.head.keepAlive && current.discarded == 0, reserved: 0))
        case .success(let admitted):
            let request = Request(number: current.number, head: current.head, admitted: admitted, body: current.body,
                                  receivedAt: current.receivedAt)
            slots.append(.waiting(request, reserved: current.reserved))
        }
        return advance(now: now)
    }

    /// The responder answered request `number`.
    package mutating func responseReady(_ response: IngestResponse, number: Int, now: NIODeadline) -> [Action] {
        guard phase != .closed,
              let index = slots.firstIndex(where: { if case .processing(number, _, _) = $0 { true } else { false } }),
              case .processing(_, let keepAlive, let reserved) = slots[index] else { return [] }
        slots[index] = .ready(response, keepAlive: keepAlive, reserved: reserved)
        lastActivity = now
        return advance(now: now)
    }

    /// The timer armed by the last ``Action/scheduleTimer(at:)`` fired.
    package mutating func timerFired(now: NIODeadline) -> [Action] {
        timer = nil
        switch phase {
        case .closed:
            return []
        case .quiescing:
            if let quiescedAt, now >= quiescedAt + configuration.shutdownGrace { return close() }
            return rearm()
        case .open:
            if let requestStarted, now >= requestStarted + configuration.requestTimeout {
                // Slow-loris: the request did not arrive in time. Its answer follows those queued.
                var actions: [Action] = []
                if let current = receiving, current.reserved > 0 { actions.append(.release(current.reserved)) }
                receiving = nil
                self.requestStarted = nil
                let seconds = configuration.requestTimeout.nanoseconds / 1_000_000_000
                slots.append(.ready(.refusal(408, "request_timeout", "the request did not arrive within \(seconds) seconds"),
                                    keepAlive: false, reserved: 0))
                phase = .quiescing
                quiescedAt = now
                return actions + advance(now: now)
            }
            if isIdle, now >= lastActivity + configuration.idleTimeout { return close() }
            return rearm()
        }
    }

    /// The server stops: answer what is being processed and queued, then close.
    package mutating func quiesce(now: NIODeadline) -> [Action] {
        guard phase == .open else { return [] }
        phase = .quiescing
        quiescedAt = now
        var actions: [Action] = []
        if let current = receiving {
            // A request half received is not taken any more: answered retryable, after those before it.
            if current.reserved > 0 { actions.append(.release(current.reserved)) }
            receiving = nil
            requestStarted = nil
            slots.append(.ready(Self.shuttingDown, keepAlive: true, reserved: 0))
        }
        // (The last answer written closes the connection: ``writeReady(now:)``.)
        for index in slots.indices {
            if case .waiting(_, let reserved) = slots[index] {
                if reserved > 0 { actions.append(.release(reserved)) }
                slots[index] = .ready(Self.shuttingDown, keepAlive: true, reserved: 0)
            }
        }
        return actions + advance(now: now)
    }

    /// The bytes received are not HTTP/1.1 (the decoder failed): answered `400`, after the
    /// answers queued before it, and the connection closes. After the connection stopped being
    /// served (its last answer written, or closing), nothing: the decoder also fails when a
    /// connection closes in the middle of a request.
    package mutating func protocolError(now: NIODeadline) -> [Action] {
        guard phase == .open else { return [] }
        var actions: [Action] = []
        if let current = receiving, current.reserved > 0 { actions.append(.release(current.reserved)) }
        receiving = nil
        requestStarted = nil
        slots.append(.ready(.refusal(400, "invalid_http", "the request is not valid HTTP/1.1"), keepAlive: false, reserved: 0))
        phase = .quiescing
        quiescedAt = now
        return actions + advance(now: now)
    }

    /// The connection closed (by either end): give back every byte held.
    package mutating func closed() -> [Action] {
        let held = (receiving?.reserved ?? 0) + slots.reduce(0) { sum, slot in
            switch slot {
            case .waiting(_, let reserved), .processing(_, _, let reserved), .ready(_, _, let reserved): sum + reserved
            }
        }
        phase = .closed
        receiving = nil
        slots = []
        var actions: [Action] = held > 0 ? [.release(held)] : []
        if timer != nil {
            timer = nil
            actions.append(.cancelTimer)
        }
        return actions
    }

    // MARK: Decisions

    private static let shuttingDown = IngestResponse.refusal(503, "shutting_down", "the agent is stopping; retry later",
                                                             retryAfter: IngestVerdict.retryAfterBusy)

    /// Nothing being received, processed or written.
    private var isIdle: Bool { receiving == nil && requestStarted == nil && slots.isEmpty }

    /// Writes what is ready, starts the next request, and settles reading and the timer.
    private mutating func advance(now: NIODeadline) -> [Action] {
        let wasPaused = readingPaused
        var actions = writeReady(now: now)
        if phase != .closed, let index = slots.firstIndex(where: { if case .waiting = $0 { true } else { false } }),
           !slots.contains(where: { if case .processing = $0 { true } else { false } }),
           case .waiting(let request, let reserved) = slots[index] {
            slots[index] = .processing(number: request.number, keepAlive: request.head.keepAlive, reserved: reserved)
            actions.append(.process(request))
        }
        if phase == .quiescing, slots.isEmpty { return actions + close() }
        readingPaused = !shouldRead
        if wasPaused, !readingPaused { actions.append(.resumeReading) }
        return actions + rearm()
    }

    /// Writes the ready answers at the head of the queue, in order.
    private mutating func writeReady(now: NIODeadline) -> [Action] {
        var actions: [Action] = []
        while phase != .closed, case .ready(let response, var keepAlive, let reserved)? = slots.first {
            slots.removeFirst()
            if reserved > 0 { actions.append(.release(reserved)) }
            // Quiescing: the last answer closes the connection.
            if phase == .quiescing, slots.isEmpty, receiving == nil { keepAlive = false }
            lastActivity = now
            actions.append(.write(response, keepAlive: keepAlive))
            if !keepAlive {
                // Nothing after an answer that closes: the rest is dropped with the connection.
                actions += closed()
            }
        }
        return actions
    }

    private mutating func close() -> [Action] {
        var actions = closed()
        actions.append(.close)
        return actions
    }

    /// Arms the timer for the nearest deadline (request, idle or shutdown grace).
    private mutating func rearm() -> [Action] {
        let deadline: NIODeadline?
        switch phase {
        case .closed: deadline = nil
        case .quiescing: deadline = quiescedAt.map { $0 + configuration.shutdownGrace }
        case .open:
            if let requestStarted {
                deadline = requestStarted + configuration.requestTimeout
            } else if isIdle {
                deadline = lastActivity + configuration.idleTimeout
            } else {
                // Processing or writing: not the client's idle time.
                deadline = nil
            }
        }
        guard deadline != timer else { return [] }
        timer = deadline
        if let deadline { return [.scheduleTimer(at: deadline)] }
        return [.cancelTimer]
    }
}
