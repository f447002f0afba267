#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryIntegrationKit
import FerryTestKit
import Foundation
import Synchronization

/// The HTTP sink (`"type": "http"`) posting gzip'd batches to FerryIntegrationKit's
/// ``HTTPTestServer`` on loopback: in `envelope` format to a collector that keeps every event of
/// each `2xx` request, in `segment` format to its ``SegmentCollector`` (write key, Segment's
/// limits and shapes).
///
/// What the upstream holds is deduplicated by event id (`id`, Segment's `messageId`), as
/// HTTP-SINK.md asks of collectors; every request must carry an `Idempotency-Key`, and requests
/// repeating one (a retry, a re-send after a crash) must repeat its event ids.
///
/// Faults: `503` and `429` with `Retry-After`, the port refusing connections (transient); `413`
/// above 3 events a request (the sink splits the batch); `400`, `401`, `403`, `404` and `413` for
/// every request (permanent: dead letters).
///
/// Erasure (docs/HTTP-SINK.md, "Erasure"): `envelope` POSTs its erasure message to the same
/// server's `/v1/erasure`; `segment` creates a regulation at a stand-in of Segment's Public API
/// (``SegmentPublicAPI``, started with the upstream), which answers `503` while a transient fault
/// lasts.
public struct HTTPSinkFixture: SinkFixture {
    /// The body format.
    public enum Format: String, Sendable {
        /// Ferry's own envelope.
        case envelope
        /// Segment's `/v1/batch`.
        case segment
    }

    /// The body format this fixture configures.
    public let format: Format
    public var name: String { "http-\(format.rawValue)" }
    public let crashPoints: [String] = []
    public let faults: [SinkFault] = [
        SinkFault("503-retry-after", .retried), SinkFault("429-retry-after", .retried), SinkFault("connection-refused", .retried),
        SinkFault("413-above-3-events", .absorbed),
        SinkFault("400", .deadLettered), SinkFault("401", .deadLettered), SinkFault("403", .deadLettered),
        SinkFault("404", .deadLettered), SinkFault("413", .deadLettered),
    ]

    /// A fixture for `format`.
    public init(format: Format) {
        self.format = format
    }

    public func makeUpstream(in directory: TemporaryDirectory) async throws -> any SinkUpstream {
        let api: SegmentPublicAPI? = format == .segment ? try await SegmentPublicAPI.start(token: "sp_contract") : nil
        let upstream = Upstream(format: format, writeKey: "wk_contract_" + UUID().uuidString, api: api)
        do {
            let keyPath = directory.appending("write.key")
            try writeText(upstream.writeKey + "\n", to: keyPath)
            let server = try await HTTPTestServer.start(handler: upstream.handler)
            upstream.state.withLock { $0.server = server }
            let credential = format == .segment ? #""writeKeyFile": "\#(keyPath)""# : #""tokenFile": "\#(keyPath)""#
            upstream.keys = #""type": "http", "url": "\#(server.url())", "format": "\#(format.rawValue)", "gzip": true, "#
                + #""requestTimeoutMilliseconds": 5000, \#(credential)"#
            if let api {
                let tokenPath = directory.appending("api.token")
                try writeText("sp_contract\n", to: tokenPath)
                chmod(tokenPath, 0o600)
                upstream.erasure = #""erasure": {"apiURL": "\#(api.url)", "tokenFile": "\#(tokenPath)"}"#
            } else {
                upstream.erasure = #""erasure": {"url": "\#(server.url(Upstream.erasurePath))"}"#
            }
            return upstream
        } catch {
            await upstream.shutdown()
            throw error
        }
    }

    final class Upstream: SinkUpstream {
        struct State {
            var server: HTTPTestServer?
            var fault: SinkFault?
            /// Every request received, whatever the answer.
            var received: [HTTPTestServer.Request] = []
            /// Envelope: each request answered `2xx`.
            var acknowledged: [HTTPTestServer.Request] = []
        }

        /// Where `envelope` erasure messages are POSTed.
        static let erasurePath = "/v1/erasure"

        let format: Format
        let writeKey: String
        let collector: SegmentCollector
        /// Segment's Public API stand-in (`segment` only).
        let api: SegmentPublicAPI?
        let state = Mutex(State())
        private let sinkKeysText = Mutex("")
        private let erasureKeysText = Mutex("")

        init(format: Format, writeKey: String, api: SegmentPublicAPI?) {
            self.format = format
            self.writeKey = writeKey
            self.api = api
            collector = SegmentCollector(writeKey: writeKey)
        }

        var erasure: String {
            get { erasureKeysText.withLock { $0 } }
            set { erasureKeysText.withLock { $0 = newValue } }
        }

        var erasureKeys: String { erasure }
        var erasureDeletes: Bool { false }

        func erasures(of user: String) async throws -> Int {
            if let api {
                return api.requests().count { request in
                    request["status"] as? Int == 200 && (request["body"] as? [String: Any])?["subjectIds"] as? [String] == [user]
                }
            }
            return state.withLock { $0.acknowledged }.count { request in
                request.path == Self.erasurePath && request.json?["type"] as? String == "erasure" && request.json?["userId"] as? String == user
            }
        }

        var keys: String {
            get { sinkKeysText.withLock { $0 } }
            set { sinkKeysText.withLock { $0 = newValue } }
        }

        var sinkKeys: String { keys }

        var handler: HTTPTestServer.Handler {
            { [self] request in answer(request) }
        }

        private func answer(_ request: HTTPTestServer.Request) -> HTTPTestServer.Response {
            state.withLock { $0.received.append(request) }
            switch state.withLock({ $0.fault?.name }) {
            case "503-retry-after": return .status(503, headers: ["Retry-After": "0"], body: "unavailable")
            case "429-retry-after": return .status(429, headers: ["Retry-After": "0"], body: "slow down")
            case "413-above-3-events" where request.batchEvents.count > 3: return .status(413, body: "too large")
            case let status? where Int(status) != nil: return .status(Int(status)!, body: "refused for good")
            default: break
            }
            if format == .segment { return collector.answer(request) }
            // Envelope erasure messages are kept with the batches; delivered() reads only batches.
            state.withLock { $0.acknowledged.append(request) }
            return .ok
        }

        func delivered() async throws -> [DeliveredRecord] {
            // A retried or re-sent request repeats its key with the same events, whatever the
            // first answer was (a 503, a lost answer, a crash).
            var idsByKey: [String: [String]] = [:]
            for request in state.withLock({ $0.received }) {
                guard let key = request.header("Idempotency-Key") else {
                    throw ContractViolation("\(format): a request without Idempotency-Key: \(request)")
                }
                if let earlier = idsByKey[key], earlier != request.batchEventIDs {
                    throw ContractViolation("\(format): Idempotency-Key \(key) sent with other event ids: \(earlier) then \(request.batchEventIDs)")
                }
                idsByKey[key] = request.batchEventIDs
            }
            var seen = Set<String>()
            var records: [DeliveredRecord] = []
            switch format {
            case .segment:
                for message in collector.accepted where seen.insert(message.messageID).inserted {
                    let object = message.json
                    records.append(DeliveredRecord(name: object["event"] as? String ?? "", object: object))
                }
            case .envelope:
                for request in state.withLock({ $0.acknowledged }) where request.path != Self.erasurePath {
                    for event in request.batchEvents {
                        guard let id = event["id"] as? String, seen.insert(id).inserted else { continue }
                        records.append(DeliveredRecord(name: event["name"] as? String ?? "", object: event))
                    }
                }
            }
            return records
        }

        func inject(_ fault: SinkFault) async throws {
            state.withLock { $0.fault = fault }
            // Segment's Public API fails with the collector while a transient fault lasts.
            if fault.outcome == .retried { try api?.script(Array(repeating: 503, count: 1000)) }
            if fault.name == "connection-refused", let server = state.withLock({ $0.server }) {
                await server.shutdown()
            }
        }

        func clear(_ fault: SinkFault) async throws {
            let server = state.withLock { state -> HTTPTestServer? in
                state.fault = nil
                return state.server
            }
            if fault.outcome == .retried { try api?.script([]) }
            if fault.name == "connection-refused", let server {
                let again = try await HTTPTestServer.start(port: server.port, handler: handler)
                state.withLock { $0.server = again }
            }
        }

        func shutdown() async {
            if let server = state.withLock({ $0.server }) { await server.shutdown() }
            api?.stop()
        }
    }
}
