import FerryAgent
import FerryProtocol
import FerryStorage
import FerryThreads
import Foundation
import Logging
import NATS
import Synchronization

/// Delivers events to a NATS JetStream stream.
///
/// Each event is published asynchronously to the subject rendered from
/// ``JetStreamSinkConfiguration/subjectTemplate``, with:
/// - `Nats-Msg-Id`: the event id, so the stream drops a re-sent event within its duplicate window;
/// - `Ferry-Batch`: the batch's idempotency key;
/// - the body: the event as the same JSON object the file sink writes (one line of it, without
///   `line_format`): with its `origin` (the sender as the kernel told the agent) and the batch's
///   `consent` stamp.
///
/// ``deliver(_:)`` returns only when every event of the batch has a PubAck from the stream (a
/// PubAck flagged duplicate counts: the stream already holds the event). Any failure or timeout
/// is a retryable ``SinkError``; re-sending the batch is safe because of `Nats-Msg-Id`. A stream
/// that does not exist while ``JetStreamSinkConfiguration/createStream`` is false is a permanent
/// error. Delivery is therefore at-least-once from the agent and effectively once in the stream,
/// as long as re-sends happen within the stream's duplicate window (see `docs/JETSTREAM.md`).
///
/// The connection is made on the first delivery and reconnects forever; a server that is down
/// only delays delivery (the durable log keeps the events). An attempt that fails while the
/// connection is reconnecting closes it, so nothing it published is sent after it failed; the
/// next attempt connects anew.
public final class JetStreamSink: Sink {
    public let name: String
    /// The configuration the sink runs with.
    public let configuration: JetStreamSinkConfiguration
    let template: Result<SubjectTemplate, SubjectTemplate.Invalid>
    let logger: Logger
    /// Where the cut of each batch into messages is recorded before it is published (with
    /// ``JetStreamSinkConfiguration/eventsPerMessage`` above 1); `nil` without a data directory.
    private let planJournal: MessagePlanJournal?
    private let state = Mutex<State>(State())

    /// nats.c calls that may block (connecting, stream requests, a full publish window) run on
    /// the sink's own thread, shared with its delivery loop and with no other sink.
    let io: BlockingExecutor

    private struct State {
        var js: JetStreamContext?
        var streamReady = false
        var shutDown = false
        /// The plan last recorded in ``planJournal``; `nil` until read from it.
        var recordedPlan: [MessagePlan.Message]?
    }

    /// Creates the sink; nothing connects until the first delivery. `dataDirectory` (the agent's)
    /// holds the record of each batch's message plan that several events per message need.
    public convenience init(name: String = "jetstream", configuration: JetStreamSinkConfiguration, dataDirectory: String? = nil,
                            logger: Logger) {
        self.init(name: name, configuration: configuration, dataDirectory: dataDirectory, logger: logger,
                  io: BlockingExecutor(name: "ferry-sink-" + name))
    }

    /// Creates the sink with `io` (its delivery loop's thread) for nats.c's blocking calls.
    package init(name: String, configuration: JetStreamSinkConfiguration, dataDirectory: String?, logger: Logger,
                 io: BlockingExecutor) {
        self.io = io
        self.name = name
        self.configuration = configuration
        self.logger = logger
        planJournal = dataDirectory.map { MessagePlanJournal(dataDirectory: $0, sink: name) }
        do throws(SubjectTemplate.Invalid) {
            template = .success(try SubjectTemplate(configuration.subjectTemplate))
        } catch {
            template = .failure(error)
        }
    }

    public func recover(checkpoint: [UInt8]?) async throws -> [UInt8]? {
        // Files that cannot be read stop ferryd at start, named (no reconnecting for ever).
        let configuration = self.configuration
        let problems = await io.run { configuration.checkFiles() }
        if !problems.isEmpty { throw AgentError(code: .configuration, message: problems.joined(separator: "\n")) }
        // The stream is the state; nothing to restore or cut back locally.
        return nil
    }

    public func deliver(_ batch: DeliveryBatch) async throws -> [UInt8]? {
        let template: SubjectTemplate
        switch self.template {
        case .success(let parsed): template = parsed
        case .failure(let error): throw SinkError(.permanent, "jetstream: subjectTemplate: \(error.message)")
        }
        if batch.events.isEmpty { return nil }
        if configuration.eventsPerMessage > 1 {
            guard let planJournal else {
                throw SinkError(.permanent, "jetstream: eventsPerMessage above 1 needs the agent's data directory (to record each batch's messages)")
            }
            return try await deliverCombined(batch, js: try await ready(), template: template, journal: planJournal)
        }
        let js = try await ready()
        let ackWait = Duration.milliseconds(configuration.ackTimeoutMilliseconds)
        let lineFormat = configuration.lineFormat
        // Built and published a chunk at a time on the sink's thread, so the server stores the
        // first messages while the next ones are encoded (encoding the whole batch first left
        // it idle for that time), in log order.
        let pendings = await io.run {
            stride(from: 0, to: batch.events.count, by: Self.chunkSize).map { start in
                let chunk = start..<min(start + Self.chunkSize, batch.events.count)
                return js.publish(Self.messages(for: batch, in: chunk, template: template,
                                                lineFormat: lineFormat), ackWait: ackWait)
            }
        }
        try await awaitAcknowledgements(pendings, of: batch, js: js, ackWait: ackWait)
        return nil
    }

    /// Delivers `batch` several events to a message: cuts it into messages
    /// (``MessagePlan/make(ids:subjects:sizes:limits:recorded:)``, following the plan recorded for
    /// an earlier attempt while it matches), records the cut durably, then publishes.
    private func deliverCombined(_ batch: DeliveryBatch, js: JetStreamContext, template: SubjectTemplate,
                                 journal planJournal: MessagePlanJournal) async throws -> [UInt8]? {
        let ackWait = Duration.milliseconds(configuration.ackTimeoutMilliseconds)
        let lineFormat = configuration.lineFormat
        let limits = MessagePlan.Limits(eventsPerMessage: configuration.eventsPerMessage, maxBytes: configuration.messageMaxBytes)
        let (plan, pendings) = try await io.run { () throws -> (MessagePlan, [PublishBatch]) in
            let encoded = Encoded(batch, in: batch.events.indices, template: template, lineFormat: lineFormat)
            let recorded = self.recordedPlan(planJournal)
            let plan = MessagePlan.make(ids: batch.events.map { $0.decodedID }, subjects: encoded.subjects,
                                        sizes: encoded.sizes, limits: limits, recorded: recorded)
            // A plan of one-event messages needs no record: each is keyed by its event's id.
            if plan.combinesEvents, plan.messages != recorded {
                do {
                    try planJournal.save(plan.messages)
                } catch {
                    throw SinkError(.retry(after: nil), "jetstream: cannot record the batch's messages in \(planJournal.path): \(error)")
                }
                self.state.withLock { $0.recordedPlan = plan.messages }
            }
            try Self.reach("jetstream.planned")
            let messages = Self.messages(for: batch, plan: plan, encoded: encoded)
            let pendings = stride(from: 0, to: messages.count, by: Self.chunkSize).map { start in
                js.publish(Array(messages[start..<min(start + Self.chunkSize, messages.count)]), ackWait: ackWait)
            }
            return (plan, pendings)
        }
        if plan.reused > 0 {
            logger.info("jetstream: re-sending a batch as recorded before a restart", metadata: [
                "batch": "\(batch.idempotencyKey)", "messages_as_recorded": "\(plan.reused)", "messages": "\(plan.messages.count)",
            ])
        }
        try await awaitAcknowledgements(pendings, of: batch, js: js, ackWait: ackWait)
        return nil
    }

    /// The plan recorded for the last batch, read from `journal` the first time. A damaged record
    /// is logged and read as none: delivery goes on (a batch re-sent after a crash may then be
    /// cut differently, and some of its events stored twice).
    private func recordedPlan(_ journal: MessagePlanJournal) -> [MessagePlan.Message] {
        if let cached = state.withLock({ $0.recordedPlan }) { return cached }
        let loaded: [MessagePlan.Message]
        do {
            loaded = try journal.load()
        } catch {
            logger.warning("jetstream: ignoring the recorded message plan", metadata: ["path": "\(journal.path)", "error": "\(error)"])
            loaded = []
        }
        state.withLock { $0.recordedPlan = loaded }
        return loaded
    }

    /// A fault-test point (``CrashPoints``); a failure asked for there fails the attempt.
    private static func reach(_ point: StaticString) throws {
        do {
            try CrashPoints.reach(point)
        } catch {
            throw SinkError(.retry(after: nil), "jetstream: \(error)")
        }
    }

    /// Waits for the PubAck of every message published for `batch`; throws a retryable
    /// ``SinkError`` unless each one came (a duplicate counts).
    private func awaitAcknowledgements(_ pendings: [PublishBatch], of batch: DeliveryBatch,
                                       js: JetStreamContext, ackWait: Duration) async throws {
        var failures: [NATSError] = []
        var duplicates = 0
        var messages = 0
        for pending in pendings {
            // nats.c fails each message after ackWait; the margin covers a closed connection.
            for result in await pending.acknowledgements(timeout: ackWait + .seconds(1)) {
                messages += 1
                switch result {
                case .success(let ack):
                    if ack.duplicate { duplicates += 1 }
                    // Once per acknowledged message. The acknowledgements are read a chunk (up to
                    // `chunkSize` messages) at a time, so the n-th is reached when its whole chunk is
                    // acknowledged; the batch's later chunks may still be in flight.
                    try Self.reach("jetstream.acked")
                case .failure(let error): failures.append(error)
                }
            }
        }
        if let first = failures.first {
            if failures.contains(where: \.isNoResponders) {
                // The stream may have been deleted: look it up again before the next attempt.
                state.withLock { $0.streamReady = false }
            }
            let note = await dropIfReconnecting(js)
                ? " (not connected to NATS; the connection is closed with the publishes it kept, the next attempt connects anew)" : ""
            throw SinkError(.retry(after: nil),
                            "jetstream: \(failures.count) of \(messages) messages (\(batch.events.count) events) not acknowledged: \(first)\(note)")
        }
        if duplicates > 0 {
            logger.debug("jetstream: messages already in the stream", metadata: ["duplicates": "\(duplicates)", "batch": "\(batch.idempotencyKey)"])
        }
        try Self.reach("jetstream.published")
    }

    /// Closes `js`'s connection after a failed attempt if it is not connected, and forgets it
    /// (the next attempt connects anew). While nats.c reconnects it keeps the publishes made
    /// meanwhile and sends them once it is back — after the attempt failed, and so perhaps after
    /// a revocation that the next attempt honours (docs/DELIVERY.md, "Routes and consent per
    /// sink"). nats.c has no call that empties that buffer, and no size that turns it off
    /// (`natsOptions_SetReconnectBufSize` with 0 is its 8 MB default); closing the connection
    /// discards it. What was sent before the close was sent within the attempt.
    /// Returns whether it was closed.
    private func dropIfReconnecting(_ js: JetStreamContext) async -> Bool {
        guard !js.connection.isConnected else { return false }
        state.withLock { state in
            guard state.js === js else { return }
            state.js = nil
            state.streamReady = false
        }
        await io.run { js.connection.close() }
        return true
    }

    public func shutdown() async throws {
        let js = state.withLock { state -> JetStreamContext? in
            state.shutDown = true
            defer { state.js = nil }
            return state.js
        }
        if let js { await io.run { js.connection.close() } }
    }

    /// The JetStream context, connected (or reconnecting) with the stream checked; creates them
    /// on first use.
    func ready() async throws -> JetStreamContext {
        let (existing, streamReady, shutDown) = state.withLock { ($0.js, $0.streamReady, $0.shutDown) }
        if shutDown { throw SinkError(.retry(after: nil), "jetstream: the sink is shut down") }
        if let existing, streamReady { return existing }
        let configuration = self.configuration, logger = self.logger
        // The connection is kept even when the stream check fails: it keeps reconnecting in
        // the background, and the next attempt only repeats the check.
        let js: JetStreamContext
        if let existing {
            js = existing
        } else {
            js = try await io.run { try Self.connect(configuration, logger: logger) }
            state.withLock { $0.js = js }
        }
        try await io.run { try Self.checkStream(js, configuration, logger: logger) }
        state.withLock { $0.streamReady = true }
        return js
    }

    private static func connect(_ configuration: JetStreamSinkConfiguration, logger: Logger) throws -> JetStreamContext {
        var token: String?
        if let tokenFile = configuration.tokenFile {
            guard let bytes = try? FileIO.readFile(tokenFile, followSymlinks: true) else {
                throw SinkError(.retry(after: nil), "jetstream: cannot read tokenFile \(tokenFile)")
            }
            token = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let options = NATSConnection.Options(
            servers: configuration.servers, name: "ferryd",
            reconnectWait: .milliseconds(configuration.reconnectWaitMilliseconds),
            maxReconnectAttempts: nil,
            connectTimeout: .milliseconds(configuration.connectTimeoutMilliseconds),
            retryOnFailedConnect: true, token: token, credentialsFile: configuration.credentialsFile)
        do {
            let connection = try NATSConnection(options: options)
            logger.info("jetstream: connection made", metadata: [
                "servers": "\(configuration.servers.joined(separator: ","))", "connected": "\(connection.isConnected)",
            ])
            return try JetStreamContext(connection: connection, options: .init(
                apiTimeout: .milliseconds(configuration.ackTimeoutMilliseconds), maxPending: configuration.maxInFlight))
        } catch {
            throw SinkError(.retry(after: nil), "jetstream: cannot connect: \(error)")
        }
    }

    private static func checkStream(_ js: JetStreamContext, _ configuration: JetStreamSinkConfiguration, logger: Logger) throws {
        do {
            if let info = try js.streamInfo(configuration.stream) {
                if info.duplicateWindow < .seconds(configuration.duplicateWindowSeconds) {
                    logger.warning("jetstream: the stream's duplicate window is shorter than configured", metadata: [
                        "stream": "\(info.name)", "duplicate_window_s": "\(info.duplicateWindow.components.seconds)",
                        "configured_s": "\(configuration.duplicateWindowSeconds)",
                    ])
                }
                return
            }
            guard configuration.createStream else {
                throw SinkError(.permanent, "jetstream: stream \(configuration.stream) does not exist and createStream is false")
            }
            let info = try js.addStream(StreamConfiguration(
                name: configuration.stream, subjects: configuration.streamSubjects, replicas: configuration.replicas,
                duplicateWindow: .seconds(configuration.duplicateWindowSeconds), storage: .file))
            logger.info("jetstream: stream created", metadata: [
                "stream": "\(info.name)", "subjects": "\(info.subjects.joined(separator: ","))", "replicas": "\(info.replicas)",
            ])
        } catch let error as NATSError {
            throw SinkError(.retry(after: nil), "jetstream: stream \(configuration.stream): \(error)\(Self.connectionNote(js))")
        }
    }

    /// Events encoded and handed to nats.c at a time (half the default in-flight window).
    static let chunkSize = 128

    /// One message per event of `range` (default: all): subject, `Nats-Msg-Id`, `Ferry-Batch`,
    /// and the event's JSON object (with its origin and the batch's consent stamp) as the body.
    ///
    /// Two headers only: nats.c keeps headers in a hash map per message (a copy of every key and
    /// value, then encoded again on publish), which made the consent and origin headers the
    /// largest per-event cost of the sink; the body carries them once.
    static func messages(for batch: DeliveryBatch, in range: Range<Int>? = nil, template: SubjectTemplate,
                         lineFormat: Int = LineFormat.current) -> [JetStreamMessage] {
        let range = range ?? batch.events.indices
        let encoded = Encoded(batch, in: range, template: template, lineFormat: lineFormat)
        // One template message: its header list is shared by every message made here.
        let shared = JetStreamMessage(subject: "", payload: [], headers: [("Ferry-Batch", batch.idempotencyKey)])
        return (0..<range.count).map { index in
            var message = shared
            message.subject = encoded.subjects[index]
            message.body = encoded.bodies(index..<(index + 1))
            message.messageID = batch.events[range.lowerBound + index].decodedID.description
            return message
        }
    }

    /// The messages of `plan` for the events `encoded` holds: each the bodies of its events
    /// joined by newlines (a piece of the encoded buffer, not a copy), on their common subject,
    /// with `Nats-Msg-Id` the plan's id for it, `Ferry-Batch`, and `Ferry-Events` (the count)
    /// when it carries more than one event.
    static func messages(for batch: DeliveryBatch, plan: MessagePlan, encoded: Encoded) -> [JetStreamMessage] {
        let batchHeader = ("Ferry-Batch", batch.idempotencyKey)
        let single = JetStreamMessage(subject: "", payload: [], headers: [batchHeader])
        return zip(plan.messages, plan.ranges).map { planned, range in
            var message = planned.count == 1
                ? single : JetStreamMessage(subject: "", payload: [], headers: [batchHeader, ("Ferry-Events", String(planned.count))])
            message.subject = encoded.subjects[range.lowerBound]
            message.body = encoded.bodies(range)
            message.messageID = planned.messageID
            return message
        }
    }

    /// The subject and body of each event of a range of a batch, in one buffer: each body is the
    /// event's JSON object with its origin and the batch's consent stamp (the file sink's line
    /// for it, without `line_format`), followed by a newline, so that the bodies of consecutive
    /// events joined by newlines are one piece of the buffer.
    struct Encoded {
        /// The bodies, each followed by a newline.
        var bytes: [UInt8] = []
        /// Where each body's newline ends, in `bytes`.
        var ends: [Int] = []
        /// Each event's subject.
        var subjects: [String] = []

        /// The events of `range` of `batch` (indices of the result count from 0).
        init(_ batch: DeliveryBatch, in range: Range<Int>, template: SubjectTemplate, lineFormat: Int = LineFormat.current) {
            let consent = LineFormat.consentJSON(batch.consent, lineFormat: lineFormat)
            let events = batch.events[range]
            // About twice the stored size with the origin and the stamp.
            var bytes: [UInt8] = [], ends: [Int] = [], subjects: [String] = []
            bytes.reserveCapacity(events.reduce(0) { $0 + 2 * $1.size + (consent?.count ?? 0) + 64 })
            ends.reserveCapacity(events.count)
            subjects.reserveCapacity(events.count)
            // The last subject rendered, for the next event of the same type, category and source
            // (most of a batch): rendering joins the template's tokens anew each time.
            var last: (type: EventType, category: UInt8, source: [UInt8], subject: String)?
            var index = events.startIndex
            JSONWriter.appendLines(for: events, consent: consent, lineFormat: nil, disclosure: batch.disclosure ?? .all,
                                   to: &bytes) { header, end in
                defer { index += 1 }
                ends.append(end)
                // The header the encoder read (validated as `decoded()` validates it).
                guard let header else {
                    subjects.append(template.render(type: "undecodable", category: 0, source: ""))
                    return
                }
                let frame = events[index].frame
                let sourceRange = WireEvent.fixedHeaderSize..<(WireEvent.fixedHeaderSize + header.sourceLength)
                if !template.carriesUser, let last, last.type == header.type, last.category == header.category,
                   Self.same(frame, sourceRange, last.source) {
                    subjects.append(last.subject)
                } else {
                    let source = Array(frame[sourceRange])
                    let subject = template.render(type: header.type.description, category: header.category,
                                                  source: String(decoding: source, as: UTF8.self),
                                                  user: template.carriesUser ? header.userID(in: frame) : "")
                    subjects.append(subject)
                    last = (header.type, header.category, source, subject)
                }
            }
            (self.bytes, self.ends, self.subjects) = (bytes, ends, subjects)
        }

        /// Whether `frame[range]` holds the bytes of `bytes` (one comparison, not a generic
        /// element by element walk).
        private static func same(_ frame: [UInt8], _ range: Range<Int>, _ bytes: [UInt8]) -> Bool {
            guard range.count == bytes.count else { return false }
            if bytes.isEmpty { return true }
            return frame.withUnsafeBytes { frame in
                bytes.withUnsafeBytes { memcmp(frame.baseAddress! + range.lowerBound, $0.baseAddress!, bytes.count) == 0 }
            }
        }

        /// How many events.
        var count: Int { ends.count }

        /// The bodies of the events of `range` joined by newlines (no newline after the last).
        func bodies(_ range: Range<Int>) -> ArraySlice<UInt8> {
            let start = range.lowerBound == 0 ? 0 : ends[range.lowerBound - 1]
            return bytes[start..<(ends[range.upperBound - 1] - 1)]
        }

        /// The size of each event's body.
        var sizes: [Int] {
            var start = 0
            return ends.map { end in
                defer { start = end }
                return end - 1 - start
            }
        }
    }

    /// Says so when the connection is down, since nats.c then reports only timeouts.
    private static func connectionNote(_ js: JetStreamContext) -> String {
        js.connection.isConnected ? "" : " (not connected to NATS; reconnecting in the background)"
    }
}
