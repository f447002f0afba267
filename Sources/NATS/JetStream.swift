#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CNATS
import Synchronization

/// A JetStream context over a connection (nats.c `jsCtx`): stream management, asynchronous
/// publishing with acknowledgements, and a pull-consumer reader.
///
/// Publishing is asynchronous (`js_PublishMsgAsync`): ``publish(_:ackWait:)`` hands the messages
/// to nats.c and returns a ``PublishBatch`` at once; nats.c calls an acknowledgement handler on
/// its own threads for each PubAck (or error, or per-message timeout), which records the result in
/// the batch under a lock and resumes the task awaiting ``PublishBatch/acknowledgements()``.
/// At most ``Options/maxPending`` publishes are in flight per context: beyond that,
/// ``publish(_:ackWait:)`` waits (in slices of ``Options/stallWait``) for acknowledgements.
///
/// The blocking calls (stream management, ``publish(_:ackWait:)`` when the window is full,
/// ``fetchAll(stream:subject:timeout:)``) must run off the Swift concurrency pool.
///
/// The context keeps its ``NATSConnection`` alive; the nats.c context is destroyed in `deinit`
/// (after unclaimed pending publishes are released), when nothing else can use it.
public final class JetStreamContext: @unchecked Sendable {
    // @unchecked: `handle` is immutable, nats.c's jsCtx is thread-safe, and it is destroyed only
    // in deinit; `router` is Sendable.
    let handle: OpaquePointer
    /// The connection this context publishes on.
    public let connection: NATSConnection
    private let router: AckRouter
    private let token: UInt
    /// Whether an async publish was ever attempted: before that nats.c has no pending map, and
    /// `js_PublishAsyncGetPendingList` must not be called.
    private let hasPublished = Atomic<Bool>(false)
    /// The options the context was created with.
    public let options: Options

    /// JetStream context options.
    public struct Options: Sendable, Hashable {
        /// Timeout of JetStream API requests (stream lookup and creation).
        public var apiTimeout: Duration
        /// Most asynchronous publishes awaiting their PubAck at once (`MaxPending`).
        public var maxPending: Int
        /// How long one `js_PublishMsgAsync` call waits for room in the window before it
        /// returns and is retried (`StallWait`).
        public var stallWait: Duration
        /// Creates options.
        public init(apiTimeout: Duration = .seconds(5), maxPending: Int = 256, stallWait: Duration = .milliseconds(200)) {
            self.apiTimeout = apiTimeout
            self.maxPending = maxPending
            self.stallWait = stallWait
        }
    }

    /// Creates a JetStream context on `connection` (no server round trip).
    public init(connection: NATSConnection, options: Options = Options()) throws(NATSError) {
        self.connection = connection
        self.options = options
        let router = AckRouter()
        let token = AckRouter.register(router)
        var jsOpts = jsOptions()
        jsOptions_Init(&jsOpts)
        jsOpts.Wait = options.apiTimeout.milliseconds
        jsOpts.PublishAsync.MaxPending = Int64(max(1, options.maxPending))
        jsOpts.PublishAsync.StallWait = options.stallWait.milliseconds
        jsOpts.PublishAsync.AckHandler = jetStreamAckHandler
        jsOpts.PublishAsync.AckHandlerClosure = UnsafeMutableRawPointer(bitPattern: token)
        var context: OpaquePointer?
        let status = natsConnection_JetStream(&context, connection.handle, &jsOpts)
        guard status == NATS_OK, let context else {
            AckRouter.unregister(token)
            throw NATSError.status(status, "natsConnection_JetStream")
        }
        handle = context
        self.router = router
        self.token = token
    }

    deinit {
        // Late acknowledgements find no router and only free their message.
        AckRouter.unregister(token)
        router.failAll(NATSError.wrapper(NATS_CONNECTION_CLOSED, "the JetStream context was released", "publish"))
        var pending = natsMsgList()
        if hasPublished.load(ordering: .acquiring), js_PublishAsyncGetPendingList(&pending, handle) == NATS_OK {
            natsMsgList_Destroy(&pending)
        }
        jsCtx_Destroy(handle)
    }

    private var apiOptions: jsOptions {
        var jsOpts = jsOptions()
        jsOptions_Init(&jsOpts)
        jsOpts.Wait = options.apiTimeout.milliseconds
        return jsOpts
    }

    // MARK: Streams

    /// The stream named `name`, or `nil` if there is none (blocking: one API request).
    public func streamInfo(_ name: String) throws(NATSError) -> StreamInfo? {
        var info: UnsafeMutablePointer<jsStreamInfo>?
        var jsOpts = apiOptions
        do {
            try jsCall("js_GetStreamInfo(\(name))") { js_GetStreamInfo(&info, handle, name, &jsOpts, $0) }
        } catch where error.isStreamNotFound || error.code == NATS_NOT_FOUND.rawValue {
            return nil
        }
        defer { jsStreamInfo_Destroy(info) }
        return info.map(StreamInfo.init)
    }

    /// Creates a stream (blocking: one API request). Creating a stream that exists with the same
    /// configuration succeeds; a different configuration is an error.
    @discardableResult
    public func addStream(_ configuration: StreamConfiguration) throws(NATSError) -> StreamInfo {
        var config = jsStreamConfig()
        jsStreamConfig_Init(&config)
        let name = strdup(configuration.name)
        let subjects = configuration.subjects.map { UnsafePointer<CChar>(strdup($0)) }
        defer {
            free(name)
            subjects.forEach { free(UnsafeMutablePointer(mutating: $0)) }
        }
        var info: UnsafeMutablePointer<jsStreamInfo>?
        var jsOpts = apiOptions
        try subjects.withUnsafeBufferPointer { (buffer) throws(NATSError) in
            config.Name = UnsafePointer(name)
            config.Subjects = UnsafeMutablePointer(mutating: buffer.baseAddress)
            config.SubjectsLen = Int32(buffer.count)
            config.Replicas = Int64(configuration.replicas)
            config.Storage = configuration.storage == .file ? js_FileStorage : js_MemoryStorage
            config.Duplicates = configuration.duplicateWindow.nanoseconds
            if let maxAge = configuration.maxAge { config.MaxAge = maxAge.nanoseconds }
            try jsCall("js_AddStream(\(configuration.name))") { js_AddStream(&info, handle, &config, &jsOpts, $0) }
        }
        defer { jsStreamInfo_Destroy(info) }
        guard let info else { throw NATSError.wrapper(NATS_ERR, "no stream information returned", "js_AddStream") }
        return StreamInfo(info)
    }

    /// Deletes a stream and its messages (blocking).
    public func deleteStream(_ name: String) throws(NATSError) {
        var jsOpts = apiOptions
        try jsCall("js_DeleteStream(\(name))") { js_DeleteStream(handle, name, &jsOpts, $0) }
    }

    /// Purges the messages of stream `name` whose subject matches `subject` (a filter; `nil`:
    /// every message), blocking: one API request, `$JS.API.STREAM.PURGE.<name>` with
    /// `{"filter": subject}`.
    public func purgeStream(_ name: String, subject: String?) throws(NATSError) {
        var jsOpts = apiOptions
        let filter = subject.map { strdup($0) }
        defer { filter.map { free($0) } }
        if let filter { jsOpts.Stream.Purge.Subject = UnsafePointer(filter) }
        try jsCall("js_PurgeStream(\(name))") { js_PurgeStream(handle, name, &jsOpts, $0) }
    }

    // MARK: Publishing

    /// Publishes `messages` asynchronously, in order, and returns the batch whose
    /// ``PublishBatch/acknowledgements()`` yields one result per message.
    ///
    /// Blocking when the in-flight window is full: it waits for acknowledgements (retrying each
    /// stalled publish) until `ackWait` has passed since the call began; messages that could not be
    /// handed over by then, or that nats.c refused, fail in the batch without being sent.
    /// Each sent message is acknowledged, or failed with a timeout, within `ackWait` of being sent.
    public func publish(_ messages: [JetStreamMessage], ackWait: Duration) -> PublishBatch {
        let batch = PublishBatch(count: messages.count)
        let deadline = ContinuousClock.now + ackWait
        for (index, message) in messages.enumerated() {
            do {
                try publishOne(message, batch: batch, index: index, ackWait: ackWait, deadline: deadline)
            } catch {
                batch.record(index, .failure(error))
            }
        }
        return batch
    }

    private func publishOne(
        _ message: JetStreamMessage, batch: PublishBatch, index: Int, ackWait: Duration, deadline: ContinuousClock.Instant
    ) throws(NATSError) {
        var msg: OpaquePointer?
        try message.body.withUnsafeBufferPointer { (payload) throws(NATSError) in
            try payload.withMemoryRebound(to: CChar.self) { (chars) throws(NATSError) in
                try natsCall("natsMsg_Create(\(message.subject))") {
                    natsMsg_Create(&msg, message.subject, nil, chars.baseAddress, Int32(chars.count))
                }
            }
        }
        // Destroys the message unless nats.c took ownership (it then cleared `msg`).
        defer { natsMsg_Destroy(msg) }
        guard let created = msg else { throw NATSError.wrapper(NATS_ERR, "no message created", "natsMsg_Create") }
        // The stored pairs, not `headers` (which builds an array of tuples each time).
        try message.forEachHeader { (key, value) throws(NATSError) in
            try natsCall("natsMsgHeader_Add(\(key))") { natsMsgHeader_Add(created, key, value) }
        }
        if let id = message.messageID {
            try natsCall("natsMsgHeader_Set(Nats-Msg-Id)") { natsMsgHeader_Set(created, "Nats-Msg-Id", id) }
        }
        var pubOpts = jsPubOptions()
        jsPubOptions_Init(&pubOpts)
        pubOpts.MaxWait = ackWait.milliseconds
        // Registered before the call: the acknowledgement may arrive before it returns.
        router.expect(created, batch: batch, index: index)
        hasPublished.store(true, ordering: .releasing)
        while true {
            let status = js_PublishMsgAsync(handle, &msg, &pubOpts)
            if status == NATS_OK { return }
            let error = NATSError.status(status, "js_PublishMsgAsync(\(message.subject))")
            // A stall (window full) is retried until the deadline; anything else fails the message.
            if status == NATS_TIMEOUT && ContinuousClock.now < deadline { continue }
            router.forget(created)
            throw error
        }
    }

    // MARK: Reading

    /// Reads every message currently in `stream` (optionally only those on `subject`) with an
    /// ephemeral pull consumer, in stream order. Blocking; throws a timeout if the messages the
    /// stream reported at the start have not all arrived within `timeout`. Meant for tests and
    /// tools, not for consuming at volume.
    public func fetchAll(stream: String, subject: String? = nil, timeout: Duration = .seconds(10)) throws(NATSError) -> [ReceivedMessage] {
        guard let info = try streamInfo(stream) else {
            throw NATSError(code: NATS_NOT_FOUND.rawValue, text: "stream \(stream) not found", operation: "fetchAll",
                            jetStreamCode: Int(JSStreamNotFoundErr.rawValue))
        }
        let filter = subject ?? (info.subjects.count == 1 ? info.subjects[0] : ">")
        let expected = subject == nil ? Int(info.messages) : Int(info.subjectMessages(filter, context: self))
        if expected == 0 { return [] }
        var sub: OpaquePointer?
        var jsOpts = apiOptions
        var subOpts = jsSubOptions()
        jsSubOptions_Init(&subOpts)
        let streamName = strdup(stream)
        defer { free(streamName) }
        subOpts.Stream = UnsafePointer(streamName)
        subOpts.Config.AckPolicy = js_AckNone
        subOpts.Config.DeliverPolicy = js_DeliverAll
        try jsCall("js_PullSubscribe(\(stream), \(filter))") { js_PullSubscribe(&sub, handle, filter, nil, &jsOpts, &subOpts, $0) }
        defer {
            natsSubscription_Unsubscribe(sub)
            natsSubscription_Destroy(sub)
        }
        var received: [ReceivedMessage] = []
        let deadline = ContinuousClock.now + timeout
        while received.count < expected {
            let left = deadline - ContinuousClock.now
            if left <= .zero {
                throw NATSError.wrapper(NATS_TIMEOUT, "read \(received.count) of \(expected) messages", "fetchAll(\(stream))")
            }
            var list = natsMsgList()
            var errorCode = jsErrCode(rawValue: 0)
            let status = natsSubscription_Fetch(&list, sub, Int32(min(256, expected - received.count)),
                                                min(left, .seconds(1)).milliseconds, &errorCode)
            defer { natsMsgList_Destroy(&list) }
            if status == NATS_TIMEOUT { continue }
            guard status == NATS_OK else { throw NATSError.status(status, "natsSubscription_Fetch", jetStreamCode: errorCode) }
            for i in 0..<Int(list.Count) {
                if let msg = list.Msgs[i] { received.append(ReceivedMessage(msg)) }
            }
        }
        return received
    }
}

/// What a stream is made of.
public struct StreamConfiguration: Sendable, Hashable {
    /// Where messages are kept.
    public enum Storage: Sendable, Hashable {
        /// On disk (survives a server restart).
        case file
        /// In memory.
        case memory
    }
    /// The stream's name.
    public var name: String
    /// The subjects it captures (wildcards allowed).
    public var subjects: [String]
    /// Copies kept in a cluster (1, 3 or 5).
    public var replicas: Int
    /// How long the server remembers `Nats-Msg-Id`s to drop duplicates.
    public var duplicateWindow: Duration
    /// Storage kind.
    public var storage: Storage
    /// Oldest message kept, or `nil` for no age limit.
    public var maxAge: Duration?

    /// Creates a configuration.
    public init(name: String, subjects: [String], replicas: Int = 1, duplicateWindow: Duration = .seconds(120),
                storage: Storage = .file, maxAge: Duration? = nil) {
        self.name = name
        self.subjects = subjects
        self.replicas = replicas
        self.duplicateWindow = duplicateWindow
        self.storage = storage
        self.maxAge = maxAge
    }
}

/// A snapshot of a stream's configuration and state.
public struct StreamInfo: Sendable, Hashable {
    /// The stream's name.
    public var name: String
    /// The subjects it captures.
    public var subjects: [String]
    /// Its replica count.
    public var replicas: Int
    /// Its duplicate window.
    public var duplicateWindow: Duration
    /// Messages stored.
    public var messages: UInt64
    /// Sequence of the first stored message.
    public var firstSequence: UInt64
    /// Sequence of the last stored message.
    public var lastSequence: UInt64

    init(_ info: UnsafeMutablePointer<jsStreamInfo>) {
        let config = info.pointee.Config.pointee
        name = String(cString: config.Name)
        subjects = (0..<Int(config.SubjectsLen)).compactMap { config.Subjects[$0].map { String(cString: $0) } }
        replicas = Int(config.Replicas)
        duplicateWindow = .nanoseconds(config.Duplicates)
        messages = info.pointee.State.Msgs
        firstSequence = info.pointee.State.FirstSeq
        lastSequence = info.pointee.State.LastSeq
    }

    /// Messages on subjects matching `filter` (one API request).
    func subjectMessages(_ filter: String, context: JetStreamContext) -> UInt64 {
        var info: UnsafeMutablePointer<jsStreamInfo>?
        var jsOpts = jsOptions()
        jsOptions_Init(&jsOpts)
        jsOpts.Wait = context.options.apiTimeout.milliseconds
        return filter.withCString { cFilter in
            jsOpts.Stream.Info.SubjectsFilter = cFilter
            guard js_GetStreamInfo(&info, context.handle, name, &jsOpts, nil) == NATS_OK, let info else { return 0 }
            defer { jsStreamInfo_Destroy(info) }
            guard let list = info.pointee.State.Subjects else { return 0 }
            return (0..<Int(list.pointee.Count)).reduce(0) { $0 + list.pointee.List[$1].Msgs }
        }
    }
}

/// A message to publish to JetStream.
public struct JetStreamMessage: Sendable, Hashable {
    /// The subject.
    public var subject: String
    /// The body.
    public var payload: [UInt8] {
        get { Array(body) }
        set { body = newValue[...] }
    }
    /// The body, possibly a piece of a larger buffer shared by several messages (nats.c copies
    /// it when the message is published).
    public var body: ArraySlice<UInt8>
    /// Headers, in order (a key may repeat).
    public var headers: [(String, String)] {
        get { headerPairs.map { ($0.key, $0.value) } }
        set { headerPairs = newValue.map { HeaderPair(key: $0.0, value: $0.1) } }
    }
    /// `Nats-Msg-Id`: the stream drops a message whose id it saw within its duplicate window
    /// (and acknowledges it with ``PubAck/duplicate`` set).
    public var messageID: String?
    private var headerPairs: [HeaderPair]

    private struct HeaderPair: Sendable, Hashable {
        var key: String
        var value: String
    }

    /// Calls `body` with each header in order.
    func forEachHeader(_ body: (String, String) throws(NATSError) -> Void) throws(NATSError) {
        for pair in headerPairs { try body(pair.key, pair.value) }
    }

    /// Creates a message.
    public init(subject: String, payload: [UInt8], headers: [(String, String)] = [], messageID: String? = nil) {
        self.init(subject: subject, body: payload[...], headers: headers, messageID: messageID)
    }

    /// Creates a message whose body is `body`.
    public init(subject: String, body: ArraySlice<UInt8>, headers: [(String, String)] = [], messageID: String? = nil) {
        self.subject = subject
        self.body = body
        self.messageID = messageID
        headerPairs = headers.map { HeaderPair(key: $0.0, value: $0.1) }
    }
}

/// A stream's acknowledgement of one published message.
public struct PubAck: Sendable, Hashable {
    /// The stream that stored it.
    public var stream: String
    /// Its sequence in the stream (for a duplicate: the sequence of the original).
    public var sequence: UInt64
    /// The stream had already stored a message with this `Nats-Msg-Id` within its duplicate
    /// window, so it did not store it again.
    public var duplicate: Bool
    /// The JetStream domain, if any.
    public var domain: String?

    /// Creates an acknowledgement.
    public init(stream: String, sequence: UInt64, duplicate: Bool, domain: String? = nil) {
        self.stream = stream
        self.sequence = sequence
        self.duplicate = duplicate
        self.domain = domain
    }
}

/// A message read from a stream.
public struct ReceivedMessage: Sendable, Hashable {
    /// Its subject.
    public var subject: String
    /// Its body.
    public var payload: [UInt8]
    /// Its headers (the first value of each key).
    public var headers: [String: String]
    /// Its stream sequence, when the message carried JetStream metadata.
    public var sequence: UInt64?

    /// The `Nats-Msg-Id` header.
    public var messageID: String? { headers["Nats-Msg-Id"] }

    init(_ msg: OpaquePointer) {
        subject = String(cString: natsMsg_GetSubject(msg))
        let length = Int(natsMsg_GetDataLength(msg))
        if length > 0, let data = natsMsg_GetData(msg) {
            payload = data.withMemoryRebound(to: UInt8.self, capacity: length) { Array(UnsafeBufferPointer(start: $0, count: length)) }
        } else {
            payload = []
        }
        var headers: [String: String] = [:]
        var keys: UnsafeMutablePointer<UnsafePointer<CChar>?>?
        var count: Int32 = 0
        if natsMsgHeader_Keys(msg, &keys, &count) == NATS_OK, let keys {
            for i in 0..<Int(count) {
                guard let key = keys[i] else { continue }
                var value: UnsafePointer<CChar>?
                if natsMsgHeader_Get(msg, key, &value) == NATS_OK, let value {
                    headers[String(cString: key)] = String(cString: value)
                }
            }
            free(keys)  // the array only; the strings belong to the message
        }
        self.headers = headers
        var meta: UnsafeMutablePointer<jsMsgMetaData>?
        if natsMsg_GetMetaData(&meta, msg) == NATS_OK, let meta {
            sequence = meta.pointee.Sequence.Stream
            jsMsgMetaData_Destroy(meta)
        } else {
            sequence = nil
        }
    }
}

extension Duration {
    /// Whole nanoseconds, as JetStream configuration wants.
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
