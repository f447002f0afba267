@testable import FerryAgent
@testable import FerryJetStreamSink
import FerryTestKit
import Foundation
import Testing

/// Issue 39: a credentials file that cannot be read stops ferryd at start, named, like an HTTP
/// sink's token (before, the sink connected, logged `connected=false` and retried for ever).
@Suite("JetStream sink: files checked at start")
struct JetStreamCredentialsTests {
    @Test("an unreadable credentialsFile or tokenFile is a configuration error at recover, naming the key and the path")
    func unreadable() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let creds = scratch.appending("nats.creds"), token = scratch.appending("nats.token")
        let configuration = JetStreamSinkConfiguration(servers: ["nats://127.0.0.1:9"], credentialsFile: creds, tokenFile: token)
        #expect(configuration.checkFiles() == [
            "sink (jetstream): cannot read credentialsFile \(creds)", "sink (jetstream): cannot read tokenFile \(token)",
        ])
        let sink = JetStreamSink(configuration: configuration, logger: quietLogger)
        let error = await #expect(throws: AgentError.self) { _ = try await sink.recover(checkpoint: nil) }
        #expect(error?.code == .configuration && error?.message.contains("credentialsFile \(creds)") == true)
        try await sink.shutdown()
        try writeBytes(Array("-----BEGIN NATS USER JWT-----\n".utf8), to: creds)
        try writeBytes(Array("t\n".utf8), to: token)
        #expect(configuration.checkFiles().isEmpty)
        #expect(configuration.summary.contains("servers=nats://127.0.0.1:9") && configuration.summary.contains("credentialsFile=\(creds)"))
    }
}
