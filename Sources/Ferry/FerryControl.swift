#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import FerryProtocol
import FerryThreads
import ZeroMQ

/// Reads and changes the agent's state through its control socket: consent, tracking, features,
/// purge and erasure, delivery start, the consent audit log and status.
///
/// ```swift
/// let control = FerryControl()                       // $FERRY_RUNTIME_DIR, … like the agent
/// try await control.setConsent(.granted, for: "analytics")
/// let state = try await control.consentState()
/// print(state.trackingEnabled, state.consent["analytics"] ?? .undetermined)
/// let erased = try await control.forget(userID: "u-42")
/// print("erased \(erased.total) events")
/// ```
///
/// Every call opens a fresh REQ socket, sends one JSON request (`docs/PROTOCOL.md`, "Control"),
/// waits at most ``timeout`` for the reply and closes the socket, on a thread of its own (never the
/// Swift concurrency pool). A lost reply therefore never leaves a socket stuck. A missing or stale
/// control socket (an agent that crashed) is reported at once, without waiting. Errors are
/// ``FerryClientError`` with code ``FerryClientError/Code/agentNotRunning`` (no agent answered on
/// ``endpoint``) or ``FerryClientError/Code/refused`` (the agent said no; ``FerryClientError/valid``
/// lists the accepted values when the agent sent them).
///
/// The agent records the caller of every state-changing request (uid, pid and process name, from
/// the socket) in its consent audit log, with ``actor`` beside it when set.
public struct FerryControl: Sendable, Hashable {
    /// The agent's runtime directory (where its sockets are).
    public var runtimeDirectory: String
    /// How long to wait for each reply. Generous by default: a consent change that erases events
    /// answers once the erasure is on disk, and other clients' requests may be served first.
    public var timeout: Duration
    /// Free text (at most 200 bytes) recorded in the audit log beside the caller, e.g. `"settings-ui"`.
    public var actor: String?

    /// A control client for the agent in `runtimeDirectory` (the same default as the agent's:
    /// `$FERRY_RUNTIME_DIR`, `$XDG_RUNTIME_DIR/ferry` or `/tmp/ferry-<uid>`).
    public init(runtimeDirectory: String = FerryPaths.agentRuntimeDirectory(), timeout: Duration = .seconds(60), actor: String? = nil) {
        self.runtimeDirectory = runtimeDirectory
        self.timeout = timeout
        self.actor = actor
    }

    /// A control client for the agent a ``FerryClient`` with `configuration` sends to.
    public init(configuration: FerryClientConfiguration, timeout: Duration = .seconds(60), actor: String? = nil) {
        self.init(runtimeDirectory: configuration.runtimeDirectory, timeout: timeout, actor: actor)
    }

    /// The control endpoint, `ipc://<runtimeDirectory>/control`.
    public var endpoint: String { FerryPaths.controlEndpoint(runtimeDirectory) }

    // MARK: Consent

    /// The whole consent state (`consent_state`).
    ///
    /// ```swift
    /// let state = try await FerryControl().consentState()
    /// if state.isNoOp { print("no feature enabled: nothing is stored or sent") }
    /// ```
    public func consentState() async throws -> ConsentSnapshot {
        try await send(.consentState()).decode(ConsentUpdate.self).consent
    }

    /// Turns the runtime tracking toggle on or off (`set_tracking`). While off, new events are
    /// dropped; events already queued keep draining. It is AND-gated with the configured kill
    /// switch (`ConsentSnapshot.networkTracking`). Returns the new state.
    @discardableResult
    public func setTracking(_ enabled: Bool) async throws -> ConsentSnapshot {
        try await send(.setTracking(enabled)).decode(ConsentUpdate.self).consent
    }

    /// Sets the consent of one category, or of every category with `"all"` (`set_consent`).
    ///
    /// ```swift
    /// try await control.setConsent(.granted, for: "analytics")
    /// let update = try await control.setConsent(.denied, for: "all")
    /// print("purged \(update.purged?.total ?? 0) pending events")
    /// ```
    ///
    /// An unknown category is refused with the valid names in ``FerryClientError/valid``.
    /// Denying erases the category's pending events; the update says how many.
    @discardableResult
    public func setConsent(_ status: ConsentStatus, for category: String) async throws -> ConsentUpdate {
        try await send(.setConsent(status, for: category)).decode(ConsentUpdate.self)
    }

    /// Sets persistence consent (`set_persistence`): whether the agent may keep a stable anonymous
    /// id across restarts. Returns the new state.
    @discardableResult
    public func setPersistenceConsent(_ status: ConsentStatus) async throws -> ConsentSnapshot {
        try await send(.setPersistence(status)).decode(ConsentUpdate.self).consent
    }

    /// Sets GDPR fields by their wire names (`set_gdpr`); fields not named keep their value.
    ///
    /// ```swift
    /// try await control.setGDPR(["subject_to_gdpr": .granted, "data_usage": .denied])
    /// ```
    ///
    /// Names are those of `GDPRRecord.fieldNames`; the agent refuses others. Data usage denied
    /// for a GDPR subject stops delivery and purges the queue (`ConsentUpdate.purged`).
    @discardableResult
    public func setGDPR(_ fields: [String: GDPRValue]) async throws -> ConsentUpdate {
        try await send(.setGDPR(fields)).decode(ConsentUpdate.self)
    }

    /// Sets GDPR fields; `nil` leaves a field unchanged.
    ///
    /// ```swift
    /// try await control.setGDPR(subjectToGDPR: .granted, dataUsage: .granted, adStorage: .denied)
    /// ```
    @discardableResult
    public func setGDPR(
        subjectToGDPR: GDPRValue? = nil, dataUsage: GDPRValue? = nil, adsPersonalization: GDPRValue? = nil,
        adStorage: GDPRValue? = nil
    ) async throws -> ConsentUpdate {
        var fields: [String: GDPRValue] = [:]
        fields["subject_to_gdpr"] = subjectToGDPR
        fields["data_usage"] = dataUsage
        fields["ads_personalization"] = adsPersonalization
        fields["ad_storage"] = adStorage
        return try await setGDPR(fields)
    }

    /// Enables feature categories (`enable_features`); `["all"]` enables every category. Returns
    /// the new state.
    ///
    /// ```swift
    /// try await control.enableFeatures(["analytics", "push"])
    /// ```
    @discardableResult
    public func enableFeatures(_ features: [String]) async throws -> ConsentSnapshot {
        try await send(.enableFeatures(features)).decode(ConsentUpdate.self).consent
    }

    /// Disables feature categories (`disable_features`); `["all"]` disables every category (no-op
    /// mode: nothing stored, nothing sent). The pending events of the disabled categories are
    /// erased (`ConsentUpdate.purged`).
    @discardableResult
    public func disableFeatures(_ features: [String]) async throws -> ConsentUpdate {
        try await send(.disableFeatures(features)).decode(ConsentUpdate.self)
    }

    // MARK: Erasure and delivery

    /// Erases pending events (`purge`): those of `category`, or every pending and held event when
    /// `category` is nil. The bytes are overwritten on disk, not only skipped.
    ///
    /// ```swift
    /// let report = try await control.purge(category: "advertising")
    /// print("\(report.queued) queued + \(report.held) held events erased")
    /// ```
    @discardableResult
    public func purge(category: String? = nil) async throws -> PurgeReport {
        try await send(.purge(category: category)).decode(PurgeReply.self).report
    }

    /// Erases every pending and held event carrying `userID` (`forget`), e.g. for a GDPR
    /// erasure request. `userID` must not be empty.
    @discardableResult
    public func forget(userID: String) async throws -> PurgeReport {
        try await send(.forget(userID: userID)).decode(PurgeReply.self).report
    }

    /// The upstream erasure requests `forget` recorded and where each stands per sink
    /// (`forget_status`; docs/CONSENT.md, "Erasure upstream"). Needs the `control` right.
    public func erasureStatus() async throws -> ErasureStatusReply {
        try await send(.forgetStatus()).decode(ErasureStatusReply.self)
    }

    /// Whether each sink received the events of `userID` (`recipients`; docs/CONSENT.md, "Which
    /// sinks"): the sinks marked `receives_erasure` are those ``forget(userID:)``
    /// asks. Needs the `control` right.
    public func recipients(userID: String) async throws -> RecipientsReply {
        try await send(.recipients(userID: userID)).decode(RecipientsReply.self)
    }

    /// Starts delivery (`start`) on an agent configured to wait for it (`autoStart: false`).
    /// Starting an agent already delivering does nothing.
    public func start() async throws {
        _ = try await send(.start())
    }

    // MARK: Inspection

    /// The consent audit log (`consent_log`): the newest `limit` entries (all when nil), oldest
    /// first, and whether the whole hash chain verifies.
    ///
    /// ```swift
    /// let log = try await control.consentLog(limit: 20)
    /// guard log.verified else { fatalError("audit log tampered: \(log.problem ?? "?")") }
    /// for entry in log.entries { print(entry.seq, entry.change, entry.process ?? "?") }
    /// ```
    public func consentLog(limit: Int? = nil) async throws -> ConsentAuditLog {
        try await send(.consentLog(limit: limit)).decode(ConsentAuditLog.self)
    }

    /// The agent's status document (`status`) as JSON values: `pid`, `queue`, `delivery`,
    /// `counters`, … (see `docs/PROTOCOL.md`; fields may be added).
    ///
    /// ```swift
    /// let status = try await control.status()
    /// if case .object(let queue)? = status["queue"], case .int(let events)? = queue["events"] { print(events) }
    /// ```
    public func status() async throws -> [String: FerryValue] {
        try await send(.status()).decode([String: FerryValue].self)
    }

    /// The agent's metrics in the Prometheus text exposition (`metrics`), as `ferry metrics`
    /// prints them; read them with `MetricSamples` (module `FerryMetricSamples`).
    ///
    /// ```swift
    /// import FerryMetricSamples
    ///
    /// let samples = MetricSamples(parsing: Array(try await control.metrics().utf8))
    /// samples.value("ferry_events_accepted_total")
    /// ```
    public func metrics() async throws -> String {
        try await send(.metrics()).decode(MetricsReply.self).text
    }

    // MARK: Requests

    /// Sends `request` and returns the agent's reply, or throws ``FerryClientError`` (agent not
    /// running, refused, unreadable reply). The typed methods above are built on this; use it for
    /// ops they do not cover (`deadletter_replay`) or to keep the reply's exact JSON.
    ///
    /// ```swift
    /// let reply = try await control.send(.consentState())
    /// print(reply.text)                                   // {"ok":true,"consent":{…}}
    /// ```
    public func send(_ request: Request) async throws -> Reply {
        // A thread of its own: the reply may take up to the request timeout, and no other work of
        // the process should queue behind that wait.
        try await BlockingExecutor.runDetached(name: "ferry-control-request") { [self] in try sendBlocking(request) }
    }

    /// The blocking form of ``send(_:)``, for the package's synchronous command-line code; never
    /// call it on the concurrency pool.
    package func sendBlocking(_ request: Request) throws(FerryClientError) -> Reply {
        var request = request
        if let actor, request.actor == nil { request.actor = actor }
        return try sendBlocking(json: request.encoded())
    }

    /// Sends a request already encoded as a JSON object, as is (no ``actor`` added). Blocking.
    package func sendBlocking(json body: [UInt8]) throws(FerryClientError) -> Reply {
        try Reply(json: try exchange(body))
    }

    /// One REQ exchange on a fresh socket (linger 0): send, poll up to ``timeout``, receive, close.
    private func exchange(_ body: [UInt8]) throws(FerryClientError) -> [UInt8] {
        let path = runtimeDirectory + "/control"
        switch Self.probe(path) {
        case ENOENT?, ENOTDIR?:
            throw .agentNotRunning(endpoint: endpoint, detail: "no control socket at \(path)")
        case ECONNREFUSED?:
            throw .agentNotRunning(endpoint: endpoint, detail: "nothing listens on \(path): a stale socket")
        case let code?:
            throw .socket("cannot connect to \(path): \(String(cString: strerror(code)))")
        case nil:
            break
        }
        do {
            let context = try ZMQContext()
            defer { context.terminate() }
            let socket = try ZMQSocket(context: context, type: .req)
            defer { socket.close() }
            try socket.setOption(.linger, 0)
            try socket.connect(endpoint)
            guard try socket.send([body], dontWait: true) else {
                throw FerryClientError.agentNotRunning(endpoint: endpoint, detail: "cannot send to the control socket")
            }
            let ready = try ZMQPoller.poll([.socket(socket, .readable)], timeout: timeout)
            guard ready[0].contains(.readable), let reply = try socket.receive(dontWait: true), let frame = reply.first else {
                throw FerryClientError.agentNotRunning(endpoint: endpoint, detail: "no answer within \(timeout)")
            }
            return frame
        } catch let error as FerryClientError {
            throw error
        } catch {
            throw .socket("control request on \(endpoint): \(error)")
        }
    }

    /// Tries a plain connect(2) to the control socket: nil when something accepts (or it cannot
    /// tell), else the errno (`ENOENT`: no socket file; `ECONNREFUSED`: a file nobody listens on).
    /// libzmq would instead retry in the background until the reply timeout.
    private static func probe(_ path: String) -> CInt? {
        #if os(Linux)
        let fd = socket(AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_NONBLOCK.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        #else
        let fd = socket(AF_UNIX, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        if result == 0 { return nil }
        let code = errno
        // EAGAIN/EINPROGRESS: a listener whose backlog is full is still a listener.
        return code == ENOENT || code == ECONNREFUSED || code == EACCES || code == ENOTDIR ? code : nil
    }

    /// One control request: an operation and its fields (`docs/PROTOCOL.md`, "Control"); the
    /// protocol's own type, shared with the agent.
    public typealias Request = ControlRequest

    /// A successful reply (`"ok": true`), exactly as the agent sent it.
    public struct Reply: Sendable, Hashable {
        /// The reply's JSON text, as received.
        public let json: [UInt8]

        /// Checks `json` is an object with `"ok": true`; throws ``FerryClientError/Code/refused``
        /// with the agent's message and `valid` list otherwise.
        public init(json: [UInt8]) throws(FerryClientError) {
            let header: ControlReplyHeader
            do {
                header = try JSONDecoder().decode(ControlReplyHeader.self, from: Data(json))
            } catch {
                throw .badReply("not a JSON object with a boolean \"ok\": \(String(decoding: json.prefix(200), as: UTF8.self))")
            }
            guard header.ok else {
                guard let refusal = try? JSONDecoder().decode(ControlRefusal.self, from: Data(json)) else {
                    throw .badReply("a refusal without a readable \"error\": \(String(decoding: json.prefix(200), as: UTF8.self))")
                }
                if refusal.isAccessDenied { throw .accessDenied(refusal.message) }
                throw .refused(refusal.message, valid: refusal.valid)
            }
            self.json = json
        }

        /// The reply as text.
        public var text: String { String(decoding: json, as: UTF8.self) }

        /// Decodes the reply (or throws ``FerryClientError/Code/badReply`` naming what is missing).
        public func decode<T: Decodable>(_ type: T.Type) throws(FerryClientError) -> T {
            do {
                return try JSONDecoder().decode(type, from: Data(json))
            } catch {
                throw .badReply("cannot read the agent's reply as \(type): \(error)")
            }
        }
    }
}

/// One consent audit entry, as ``FerryControl/consentLog(limit:)`` returns it: the protocol's
/// `AuditEntry` (FerryProtocol), the type the agent writes its audit log with.
public typealias ConsentAuditEntry = AuditEntry

extension FerryValue: Decodable {
    /// Decodes any JSON value. Integral numbers that fit become ``int(_:)``, others ``double(_:)``.
    public init(from decoder: any Decoder) throws {
        if var array = try? decoder.unkeyedContainer() {
            var values: [FerryValue] = []
            while !array.isAtEnd { values.append(try array.decode(FerryValue.self)) }
            self = .array(values)
            return
        }
        if let object = try? decoder.container(keyedBy: AnyKey.self) {
            var fields: [String: FerryValue] = [:]
            for key in object.allKeys { fields[key.stringValue] = try object.decode(FerryValue.self, forKey: key) }
            self = .object(fields)
            return
        }
        let single = try decoder.singleValueContainer()
        if single.decodeNil() {
            self = .null
        } else if let value = try? single.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? single.decode(Int64.self) {
            self = .int(value)
        } else if let value = try? single.decode(Double.self) {
            self = .double(value)
        } else {
            self = .string(try single.decode(String.self))
        }
    }

    private struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }
}
