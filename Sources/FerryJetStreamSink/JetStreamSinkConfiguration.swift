import FerryAgent
import FerryStorage

/// Settings of the NATS JetStream sink (``JetStreamSink``). Every field has a default, so
/// `JetStreamSinkConfiguration()` publishes to a local `nats-server -js` on the default port.
///
/// In the agent's JSON file it is the `sink` object with `"type": "jetstream"`; see
/// `daemon/ferryd.jetstream.example.json` and `docs/JETSTREAM.md`.
public struct JetStreamSinkConfiguration: Sendable, Hashable {
    /// NATS server URLs (`nats://host:port`); give every cluster member you know.
    public var servers: [String]
    /// The subject of each event, with placeholders `{type}` (track, identify, …), `{category}`
    /// (the event's category number) and `{source}` (the emitting app). Each placeholder becomes
    /// one subject token: characters not allowed in a token (`.`, `*`, `>`, whitespace, control
    /// characters) become `_`, and an empty value becomes `_`.
    public var subjectTemplate: String
    /// The stream the events go to.
    public var stream: String
    /// Create the stream at start when it does not exist (with ``streamSubjects``, ``replicas``
    /// and ``duplicateWindowSeconds``). When false, a missing stream is a permanent error.
    public var createStream: Bool
    /// The subjects of a stream the sink creates; must cover every subject the template produces.
    public var streamSubjects: [String]
    /// Replicas of a stream the sink creates (1, or 3/5 in a cluster).
    public var replicas: Int
    /// The duplicate window of a stream the sink creates, in seconds: the server drops a message
    /// whose `Nats-Msg-Id` (the event id) it stored this recently. It must exceed the longest time
    /// between a first send and its re-send after a crash (the agent's restart plus its retry
    /// backoff), or a re-sent event is stored twice.
    public var duplicateWindowSeconds: Int
    /// Most publishes awaiting their PubAck at once.
    public var maxInFlight: Int
    /// How long a batch may wait for all its PubAcks before the delivery counts as failed (and
    /// is retried: events already stored are then acknowledged as duplicates).
    public var ackTimeoutMilliseconds: Int
    /// Timeout of one connection attempt.
    public var connectTimeoutMilliseconds: Int
    /// Pause between reconnection attempts (the sink reconnects forever).
    public var reconnectWaitMilliseconds: Int
    /// A NATS `.creds` file (user JWT and NKey seed), if the server requires one.
    public var credentialsFile: String?
    /// A file holding an authentication token (its surrounding whitespace is ignored), if the
    /// server requires one.
    public var tokenFile: String?
    /// The file-sink line format whose object each message body is (`lineFormat`, without its
    /// `line_format` key): 3, the default, with the consent stamp of docs/PROTOCOL.md ("Consent
    /// stamp"); 2 with the stamp before it (`ads_personalization`), for consumers not yet updated.
    public var lineFormat: Int = LineFormat.current
    /// Most events carried by one NATS message. 1 (the default): one message per event, keyed by
    /// the event id. Above 1: consecutive events with the same subject share a message (the lines
    /// of the file sink, one per event, joined by newlines, with header `Ferry-Events`), keyed by
    /// the first event's id and the count; the sink records each batch's cut durably before
    /// publishing, so a batch re-sent after a crash is the same messages (see `docs/JETSTREAM.md`,
    /// "Several events per message").
    public var eventsPerMessage: Int = 1
    /// Most body bytes of a message carrying several events (an event larger than this is sent
    /// alone). Keep it under the servers' `max_payload` (1 MiB by default) minus the headers.
    public var messageMaxBytes: Int = 512 * 1024
    /// The subject `ferry forget --user` publishes an erasure message to (`erasure.subject`;
    /// docs/JETSTREAM.md, "Erasure"); `nil`: none. It must be captured by a stream (the sink's
    /// ``streamSubjects`` when it creates the stream).
    public var erasureSubject: String?

    /// The values ``eventsPerMessage`` may take.
    public static let eventsPerMessageRange = 1...10_000
    /// The values ``messageMaxBytes`` may take.
    public static let messageMaxBytesRange = 1024...(64 << 20)

    /// The line formats a message body can take.
    public static let lineFormats = 2...LineFormat.current

    /// The default subject template.
    public static let defaultSubjectTemplate = "ferry.events.{category}.{type}"

    /// Creates a configuration; every argument has a default.
    public init(
        servers: [String] = ["nats://127.0.0.1:4222"],
        subjectTemplate: String = JetStreamSinkConfiguration.defaultSubjectTemplate,
        stream: String = "FERRY",
        createStream: Bool = true,
        streamSubjects: [String] = ["ferry.events.>"],
        replicas: Int = 1,
        duplicateWindowSeconds: Int = 120,
        maxInFlight: Int = 256,
        ackTimeoutMilliseconds: Int = 5_000,
        connectTimeoutMilliseconds: Int = 2_000,
        reconnectWaitMilliseconds: Int = 250,
        credentialsFile: String? = nil,
        tokenFile: String? = nil
    ) {
        self.servers = servers
        self.subjectTemplate = subjectTemplate
        self.stream = stream
        self.createStream = createStream
        self.streamSubjects = streamSubjects
        self.replicas = replicas
        self.duplicateWindowSeconds = duplicateWindowSeconds
        self.maxInFlight = maxInFlight
        self.ackTimeoutMilliseconds = ackTimeoutMilliseconds
        self.connectTimeoutMilliseconds = connectTimeoutMilliseconds
        self.reconnectWaitMilliseconds = reconnectWaitMilliseconds
        self.credentialsFile = credentialsFile
        self.tokenFile = tokenFile
    }

    /// Checks the values; throws ``AgentError`` with code `configuration` listing every problem
    /// of ``problems()``, one a line.
    public func validate() throws {
        let problems = problems()
        guard problems.isEmpty else {
            throw AgentError(code: .configuration, message: problems.map { "sink (jetstream): " + $0 }.joined(separator: "\n"))
        }
    }

    /// Every problem of the values, one message each (not only the first: `ferryd validate`
    /// lists them all); empty when the values are fine.
    public func problems() -> [String] {
        var problems: [String] = []
        if servers.isEmpty { problems.append("servers must list at least one URL") }
        for server in servers where server.isEmpty || server.contains(where: \.isWhitespace) {
            problems.append("server URL \"\(server)\" is empty or contains whitespace")
        }
        var template: SubjectTemplate?
        do {
            template = try SubjectTemplate(subjectTemplate)
        } catch {
            problems.append("subjectTemplate: \(error.message)")
        }
        if stream.isEmpty || !stream.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") }) {
            problems.append("stream name \"\(stream)\" must be letters, digits, '_' or '-'")
        }
        if ![1, 3, 5].contains(replicas) { problems.append("replicas must be 1, 3 or 5") }
        if duplicateWindowSeconds < 1 { problems.append("duplicateWindowSeconds must be at least 1") }
        if maxInFlight < 1 { problems.append("maxInFlight must be at least 1") }
        if !Self.lineFormats.contains(lineFormat) {
            problems.append("lineFormat must be \(Self.lineFormats.map(String.init).joined(separator: " or ")), not \(lineFormat)")
        }
        if !Self.eventsPerMessageRange.contains(eventsPerMessage) {
            problems.append("eventsPerMessage must be \(Self.eventsPerMessageRange.lowerBound)-\(Self.eventsPerMessageRange.upperBound), not \(eventsPerMessage)")
        }
        if !Self.messageMaxBytesRange.contains(messageMaxBytes) {
            problems.append("messageMaxBytes must be \(Self.messageMaxBytesRange.lowerBound)-\(Self.messageMaxBytesRange.upperBound), not \(messageMaxBytes)")
        }
        if ackTimeoutMilliseconds < 1 || connectTimeoutMilliseconds < 1 || reconnectWaitMilliseconds < 1 {
            problems.append("timeouts must be positive")
        }
        if credentialsFile == "" || tokenFile == "" { problems.append("credentialsFile and tokenFile must not be empty strings") }
        if let erasureSubject {
            if (try? SubjectTemplate(erasureSubject))?.carriesUser != false || erasureSubject.contains("{")
                || !SubjectTemplate.isValidFilter(erasureSubject) || erasureSubject.contains("*") || erasureSubject.contains(">") {
                problems.append("erasure.subject \"\(erasureSubject)\" is not a valid subject (no wildcards, no placeholders)")
            } else if createStream, !streamSubjects.contains(where: { (try? SubjectTemplate(erasureSubject))?.isCovered(by: $0) == true }) {
                problems.append("streamSubjects (\(streamSubjects.joined(separator: ", "))) do not capture erasure.subject \"\(erasureSubject)\"")
            }
        }
        if createStream {
            if streamSubjects.isEmpty { problems.append("streamSubjects must not be empty when createStream is true") }
            let invalid = streamSubjects.filter { !SubjectTemplate.isValidFilter($0) }
            for subject in invalid { problems.append("stream subject \"\(subject)\" is not a valid subject filter") }
            // Every subject the template can render must land in the stream (judged when the
            // template and the filters are valid).
            if let template, !streamSubjects.isEmpty, invalid.isEmpty, !streamSubjects.contains(where: template.isCovered(by:)) {
                problems.append("streamSubjects (\(streamSubjects.joined(separator: ", "))) do not capture every subject of subjectTemplate \"\(subjectTemplate)\" (such as \(template.sampleSubject))")
            }
        }
        return problems
    }
}

extension JetStreamSinkConfiguration: SinkSettings {
    public static let type = "jetstream"

    public func validate(name: String) throws {
        try validate()
    }

    /// `credentialsFile` and `tokenFile`, read as the connection reads them at start: one that
    /// cannot be read stops `ferryd` there, naming it (as an HTTP sink's token does), instead of a
    /// connection that retries "not connected" for ever.
    public func checkFiles() -> [String] {
        var problems: [String] = []
        for (key, path) in [("credentialsFile", credentialsFile), ("tokenFile", tokenFile)] {
            guard let path else { continue }
            if (try? FileIO.readFile(path, followSymlinks: true)) == nil {
                problems.append("sink (jetstream): cannot read \(key) \(path)")
            }
        }
        return problems
    }

    /// `servers=… stream=… subjectTemplate=…`, where the credentials come from.
    public var summary: String {
        var parts = ["servers=\(servers.joined(separator: ","))", "stream=\(stream)", "subjectTemplate=\(subjectTemplate)",
                     "eventsPerMessage=\(eventsPerMessage)"]
        if let credentialsFile { parts.append("credentialsFile=\(credentialsFile)") }
        if let tokenFile { parts.append("tokenFile=\(tokenFile)") }
        return parts.joined(separator: " ")
    }

    public func makeSink(_ context: SinkContext) -> any Sink {
        JetStreamSink(name: context.name, configuration: self, dataDirectory: context.dataDirectory, logger: context.logger,
                      io: context.io)
    }
}

extension SinkSettings where Self == JetStreamSinkConfiguration {
    /// Publishes each event to a NATS JetStream stream (see `docs/JETSTREAM.md`).
    public static func jetstream(_ configuration: JetStreamSinkConfiguration) -> JetStreamSinkConfiguration { configuration }
}

extension SinkKind {
    /// The NATS JetStream sink, `"type": "jetstream"` (see `docs/JETSTREAM.md` for its keys).
    public static let jetstream = SinkKind(JetStreamSinkConfiguration.self) { object, fields, keyPath in
        let box = FieldBox(JetStreamSinkConfiguration())
        try fields.apply(object, JetStreamSinkConfiguration.fields(box), at: keyPath)
        return box.value
    }
}
