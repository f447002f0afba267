@testable import FerryFileSink
import FerryAgent
import FerryHTTPIngest
import FerryProtocol
import Foundation
import Testing

/// `daemon/ferryd.example.json` is the real defaults; the consent opt-in flow lives in its own
/// example; the loader reports every wrong key at once.
@Suite("Example configurations")
struct ExampleConfigurationTests {
    static let daemon = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path + "/daemon/"

    @Test("ferryd.example.json is exactly what the agent uses without a file, per user and for the host")
    func exampleIsTheDefaults() throws {
        for var base in [AgentConfiguration(runtimeDirectory: "/run/x", dataDirectory: "/var/lib/x"), AgentConfiguration(mode: .system)] {
            // Without a file, ferryd delivers to its registry's default sink.
            base.sinks = SinkRegistry.builtIn.defaultSinks(delivery: base.delivery)
            let loaded = try AgentConfiguration.load(fromFile: Self.daemon + "ferryd.example.json", base: base,
                                                     sinkKinds: .builtIn, ingestPathKinds: IngestPathRegistry([.http]))
            #expect(loaded == base, "\(base.mode)")
        }
        // And it spells out every section, so it documents every default (a section left out
        // would also be "equal").
        let object = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: Self.daemon + "ferryd.example.json"))) as? [String: Any]
        let keys = Set((object ?? [:]).keys)
        #expect(keys.isSuperset(of: ["comment", "logLevel", "maxEventBytes", "log", "dedup", "delivery", "http", "sinks", "consent"]))
    }

    @Test("the consent opt-in example holds undetermined events and says so")
    func consentOptIn() throws {
        let path = Self.daemon + "ferryd.consent-optin.example.json"
        let loaded = try AgentConfiguration.load(fromFile: path, sinkKinds: .builtIn)
        #expect(loaded.consent.defaultConsent == .undetermined)
        #expect(loaded.consent.undetermined.policy == .hold)
        let object = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any]
        #expect((object?["comment"] as? String)?.contains("events wait on disk") == true)
    }

    @Test("every wrong key is reported, each with its key path")
    func everyError() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-errors-\(getpid()).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data(#"{"maxEventBytes": "x", "dedup": {"maxEntries": 1.5, "nope": 1}, "logLevel": "loud"}"#.utf8)
            .write(to: URL(fileURLWithPath: path))
        do {
            _ = try AgentConfiguration.load(fromFile: path, sinkKinds: .builtIn)
            Issue.record("loaded a bad file")
        } catch let error as AgentError {
            let lines = error.message.split(separator: "\n").map(String.init)
            #expect(lines == [
                "\(path): dedup.maxEntries: expected an integer",
                "\(path): dedup.nope: unknown key; valid keys here: lossGraceSeconds, maxAgeSeconds, maxEntries, maxSessions, sessionIdleSeconds",
                "\(path): logLevel: expected one of: trace, debug, info, notice, warning, error, critical",
                "\(path): maxEventBytes: expected an integer",
            ])
        }
    }
}
