import FerryIntegrationKit
import FerryTestKit
import Foundation
import NATS
import Synchronization

/// The JetStream sink (`"type": "jetstream"`) publishing to a real `nats-server -js`
/// (FerryIntegrationKit's ``NATSServerProcess``), one event per message or `eventsPerMessage`
/// events per message (the batch's cut recorded before publishing).
///
/// What the upstream holds is the stream `FERRY` (which drops a repeated `Nats-Msg-Id`), one
/// record per line of each message. The stream is the operator's (`createStream: false`): the
/// fixture creates it before `ferryd` starts. Faults: the server killed (`SIGKILL`) and started
/// again on the same ports and store (transient); the stream deleted (permanent: the sink may
/// not create it), created again to clear it.
///
/// Erasure (docs/JETSTREAM.md, "Erasure"): with the erasure keys the subjects carry the user
/// (`ferry.events.{user}.{type}`), so a forget purges the user's subjects, and the erasure message
/// goes to `ferry.erasures`, which the stream captures too (``delivered()`` reads only
/// `ferry.events.>`).
public struct JetStreamSinkFixture: SinkFixture {
    /// Events per message (`eventsPerMessage`): 1, or more to combine them.
    public let eventsPerMessage: Int
    public var name: String { eventsPerMessage == 1 ? "jetstream" : "jetstream-batched" }
    public var crashPoints: [String] {
        (eventsPerMessage > 1 ? ["jetstream.planned"] : []) + ["jetstream.acked", "jetstream.published"]
    }
    public let faults = [SinkFault("server-down", .retried), SinkFault("stream-missing", .deadLettered)]

    /// A fixture publishing `eventsPerMessage` events a message.
    public init(eventsPerMessage: Int = 1) {
        self.eventsPerMessage = eventsPerMessage
    }

    public var missingDependency: String? {
        NATSServerProcess.isAvailable ? nil : "needs nats-server (scripts/install-deps, or NATS_SERVER)"
    }

    public func makeUpstream(in directory: TemporaryDirectory) async throws -> any SinkUpstream {
        let server = try NATSServerProcess(in: directory)
        do {
            try await server.waitUntilReady()
            try await Upstream.stream(server, create: true)
        } catch {
            server.cleanup()
            throw error
        }
        return Upstream(server: server, eventsPerMessage: eventsPerMessage)
    }

    struct Upstream: SinkUpstream {
        let server: NATSServerProcess
        let eventsPerMessage: Int

        var sinkKeys: String {
            let servers = server.urls.map { "\"\($0)\"" }.joined(separator: ", ")
            return #""type": "jetstream", "servers": [\#(servers)], "eventsPerMessage": \#(eventsPerMessage), "#
                + #""createStream": false, "ackTimeoutMilliseconds": 2000, "connectTimeoutMilliseconds": 500, "reconnectWaitMilliseconds": 100"#
        }

        func delivered() async throws -> [DeliveredRecord] {
            guard try await server.streamInfo("FERRY") != nil else { return [] }
            var records: [DeliveredRecord] = []
            for message in try await server.streamMessages("FERRY") where message.subject.hasPrefix("ferry.events.") {
                for line in message.payload.split(separator: UInt8(ascii: "\n")) {
                    guard let object = try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any] else {
                        throw ContractViolation("jetstream: a message line is not a JSON object")
                    }
                    records.append(DeliveredRecord(name: object["name"] as? String ?? "", object: object))
                }
            }
            return records
        }

        /// Creates (or deletes) the stream `FERRY` as the sink would create it.
        static func stream(_ server: NATSServerProcess, create: Bool) async throws {
            let urls = server.urls
            try await runOffPool {
                let connection = try NATSConnection(options: .init(servers: urls, name: "contract-admin", retryOnFailedConnect: false))
                defer { connection.close() }
                let js = try JetStreamContext(connection: connection)
                if create {
                    _ = try js.addStream(StreamConfiguration(name: "FERRY", subjects: ["ferry.events.>", Self.erasureSubject]))
                } else {
                    try js.deleteStream("FERRY")
                }
            }
        }

        /// The subject erasure messages go to.
        static let erasureSubject = "ferry.erasures"

        var erasureKeys: String {
            #""subjectTemplate": "ferry.events.{user}.{type}", "erasure": {"subject": "\#(Self.erasureSubject)"}"#
        }

        var erasureDeletes: Bool { true }

        func erasures(of user: String) async throws -> Int {
            guard try await server.streamInfo("FERRY") != nil else { return 0 }
            return try await server.streamMessages("FERRY").count { message in
                guard message.subject == Self.erasureSubject,
                      let object = try? JSONSerialization.jsonObject(with: Data(message.payload)) as? [String: Any] else { return false }
                return object["type"] as? String == "erasure" && object["userId"] as? String == user
            }
        }

        func inject(_ fault: SinkFault) async throws {
            if fault.name == "stream-missing" {
                try await Self.stream(server, create: false)
            } else {
                server.kill9(node: 0)
            }
        }

        func clear(_ fault: SinkFault) async throws {
            if fault.name == "stream-missing" {
                try await Self.stream(server, create: true)
            } else {
                try server.start(node: 0)
                try await server.waitUntilReady()
            }
        }

        func shutdown() async {
            server.cleanup()
        }
    }
}
