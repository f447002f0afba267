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
/// only delays delivery (the durable log keeps the events).
public final class JetStreamSink: Sink {
    public let name: String
    /// The configuration the sink runs with.
    public let configuration: JetStreamSinkConfiguration
    private let template: Result<SubjectTemplate, SubjectTemplate.Invalid>
    private let logger: Logger
    private let state = Mutex<State>(State())

    /// nats.c calls that may block (connecting, stream requests, a full publish window) run on
    /// the sink's own thread, shared with its delivery loop and with no other sink.
    private let io: BlockingExecutor

    private struct State {
        var js: JetStreamContext?
        var streamReady = false
        var shutDown = false
    }

    /// Creates the sink; nothing connects until the first delivery.
    public convenience init(name: String = "jetstream", configuration: JetStreamSinkConfiguration, logger: Logger) {
        self.init(name: name, configuration: configuration, logger: logger,
                  io: BlockingExecutor(name: "ferry-sink-" + name))
    }

    /// Creates the sink with `io` (its delivery loop's thread) for nats.c's blocking calls.
    package init(name: String, configuration: JetStreamSinkConfiguration, logger: Logger, io: BlockingExecutor) {
        self.io = io
        self.name = name
        self.configuration = configuration
        self.logger = logger
        do throws(SubjectTemplate.Invalid) {
            template = .success(try SubjectTemplate(configuration.subjectTemplate))
        } catch {
            template = .failure(error)
        }
    }

    public func recover(checkpoint: [UInt8]?) async throws -> [UInt8]? {
        // The stream is the state; nothing to restore or cut back locally.
        nil
    }

    public func deliver(_ batch: DeliveryBatch) async throws -> [UInt8]? {
        let template: SubjectTemplate
        switch self.template {
        case .success(let parsed): template = parsed
        case .failure(let error): throw SinkError(.permanent, "jetstream: subjectTemplate: \(error.message)")
        }
        if batch.events.isEmpty { return nil }
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
        var failures: [NATSError] = []
        var duplicates = 0
        for pending in pendings {
            // nats.c fails each message after ackWait; the margin covers a closed connection.
            for result in await pending.acknowledgements(timeout: ackWait + .seconds(1)) {
                switch result {
                case .success(let ack): if ack.duplicate { duplicates += 1 }
                case .failure(let error): failures.append(error)
                }
            }
        }
        if let first = failures.first {
            if failures.contains(where: \.isNoResponders) {
                // The stream may have been deleted: look it up again before the next attempt.
                state.withLock { $0.streamReady = false }
            }
            throw SinkError(.retry(after: nil),
                            "jetstream: \(failures.count) of \(batch.events.count) events not acknowledged: \(first)\(Self.connectionNote(js))")
        }
        if duplicates > 0 {
            logger.debug("jetstream: events already in the stream", metadata: ["duplicates": "\(duplicates)", "batch": "\(batch.idempotencyKey)"])
        }
        return nil
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
    private func ready() async throws -> JetStreamContext {
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
                         lineFormat: Int = FileSink.currentLineFormat) -> [JetStreamMessage] {
        let consent = FileSink.consentJSON(batch.consent, lineFormat: lineFormat)
        let disclosure = batch.disclosure ?? .all
        // One template message: its header list is shared by every message made here.
        let shared = JetStreamMessage(subject: "", payload: [], headers: [("Ferry-Batch", batch.idempotencyKey)])
        // The last subject rendered, for the next event of the same type, category and source
        // (most of a batch): rendering joins the template's tokens anew each time.
        var last: (type: EventType, category: UInt8, source: [UInt8], subject: String)?
        return batch.events[range ?? batch.events.indices].map { stored in
            // The object of the file sink's line for the event (without the newline), in a buffer
            // reserved once: about twice the stored size with the origin and the stamp.
            var body: [UInt8] = []
            body.reserveCapacity(stored.size * 2 + (consent?.count ?? 0) + 64)
            var json = JSONWriter(appendingTo: &body)
            json.storedEventMembers(stored, consent: consent, disclosure: disclosure)
            json.finish(into: &body)
            let subject: String
            // The header alone (validated as `decoded()` validates it): no whole decode per event.
            if let header = try? EventHeader(stored.frame, checkingFields: false) {
                let sourceRange = WireEvent.fixedHeaderSize..<(WireEvent.fixedHeaderSize + header.sourceLength)
                if let last, last.type == header.type, last.category == header.category,
                   stored.frame[sourceRange].elementsEqual(last.source) {
                    subject = last.subject
                } else {
                    let source = Array(stored.frame[sourceRange])
                    subject = template.render(type: header.type.description, category: header.category,
                                              source: String(decoding: source, as: UTF8.self))
                    last = (header.type, header.category, source, subject)
                }
            } else {
                subject = template.render(type: "undecodable", category: 0, source: "")
            }
            var message = shared
            message.subject = subject
            message.payload = body
            message.messageID = stored.decodedID.description
            return message
        }
    }

    /// Says so when the connection is down, since nats.c then reports only timeouts.
    private static func connectionNote(_ js: JetStreamContext) -> String {
        js.connection.isConnected ? "" : " (not connected to NATS; reconnecting in the background)"
    }
}
