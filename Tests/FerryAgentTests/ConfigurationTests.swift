@testable import FerryFileSink
@testable import FerryAgent
import FerryTestKit
@testable import FerryStorage
import FerryProtocol
import Foundation
import Testing

@Suite("Agent configuration file")
struct ConfigurationTests {
    /// Writes `json` to a file and loads it.
    static func load(_ json: String) throws -> AgentConfiguration {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.appending("ferryd.json")
        try writeBytes(Array(json.utf8), to: path)
        // The agent core's sink types (the file sink); files naming every type ferryd links are
        // loaded in FerrySinkContractTests, the one test target that links every sink.
        return try AgentConfiguration.load(fromFile: path, base: AgentConfiguration(runtimeDirectory: "/tmp/fa-base", dataDirectory: "/tmp/fa-base-data"),
                                           sinkKinds: .builtIn)
    }

    /// The configuration error `json` produces.
    static func error(_ json: String) throws -> AgentError {
        do {
            let config = try load(json)
            throw TestFailure("expected an error, loaded \(config)")
        } catch let error as AgentError {
            return error
        }
    }

    @Test("a valid file sets every field it names and keeps the defaults for the rest")
    func validFile() throws {
        let config = try Self.load("""
        {
          "runtimeDirectory": "/tmp/fa-run",
          "dataDirectory": "/var/tmp/ferry-data",
          "maxEventBytes": 4096,
          "log": {"segmentMaxBytes": 8192, "retentionMaxBytes": 65536, "fullPolicy": "drop-oldest"},
          "dedup": {"maxEntries": 10, "maxAgeSeconds": 60},
          "delivery": {"batchMaxEvents": 5, "batchMaxBytes": 1000, "retryInitialMilliseconds": 15, "retryMaxMilliseconds": 2500},
          "sink": {"type": "file", "directory": "/tmp/fa-out", "maxFileBytes": 12345}
        }
        """)
        #expect(config.runtimeDirectory == "/tmp/fa-run")
        #expect(config.dataDirectory == "/var/tmp/ferry-data")
        #expect(config.maxEventBytes == 4096)
        #expect(config.log == LogConfiguration(segmentMaxBytes: 8192, retentionMaxBytes: 65536, fullPolicy: .dropOldest))
        #expect(config.dedup == AgentConfiguration.Dedup(maxEntries: 10, maxAgeSeconds: 60))
        #expect(config.delivery == AgentConfiguration.Delivery(batchMaxEvents: 5, batchMaxBytes: 1000,
                                                               retryInitialMilliseconds: 15, retryMaxMilliseconds: 2500))
        // The single "sink" key is a one-element list named after its type, with delivery's defaults.
        #expect(config.sinks == [AgentConfiguration.SinkConfiguration(
            name: "file", settings: .file(directory: "/tmp/fa-out", maxFileBytes: 12345),
            batch: .init(maxEvents: 5, maxBytes: 1000), retry: .init(initialMilliseconds: 15, maxMilliseconds: 2500))])
        #expect(config.fileSinkDirectory == "/tmp/fa-out")
    }

    @Test("an empty object gives the base configuration; a partial object changes only its fields")
    func partialFile() throws {
        // A file that names no sink gets the registry's default sink (the file sink `file`).
        let base = AgentConfiguration(runtimeDirectory: "/tmp/fa-base", dataDirectory: "/tmp/fa-base-data", sinks: [.defaultFile()])
        #expect(try Self.load("{}") == base)
        let config = try Self.load(#"{"log": {"fullPolicy": "reject"}, "dedup": {"maxEntries": 7}}"#)
        var expected = base
        expected.dedup.maxEntries = 7
        #expect(config == expected)
        #expect(config.fileSinkDirectory == "/tmp/fa-base-data/delivered")
    }

    @Test("an unknown key is an error naming the key and the valid keys", arguments: [
        (#"{"maxEventByte": 10}"#, "maxEventByte"),
        (#"{"log": {"segmentMaxByte": 10}}"#, "log.segmentMaxByte"),
        (#"{"sink": {"type": "file", "dir": "/x"}}"#, "sink.dir"),
    ])
    func unknownKey(json: String, key: String) throws {
        let error = try Self.error(json)
        #expect(error.code == .configuration)
        #expect(error.message.contains(key), "message: \(error.message)")
        #expect(error.message.contains("unknown key"), "message: \(error.message)")
        #expect(error.message.contains("ferryd.json"), "the message names the file: \(error.message)")
    }

    @Test("the unknown-key message lists the valid keys at that level")
    func unknownKeyListsValidKeys() throws {
        let error = try Self.error(#"{"log": {"segmentMaxByte": 10}}"#)
        #expect(error.message.contains("fullPolicy, retentionMaxBytes, segmentMaxBytes"), "message: \(error.message)")
    }

    @Test("a value of the wrong type is an error naming the key and the expected type", arguments: [
        (#"{"maxEventBytes": "big"}"#, "maxEventBytes", "integer"),
        (#"{"maxEventBytes": 1.5}"#, "maxEventBytes", "integer"),
        (#"{"maxEventBytes": true}"#, "maxEventBytes", "integer"),
        (#"{"runtimeDirectory": 5}"#, "runtimeDirectory", "string"),
        (#"{"log": 3}"#, "log", "object"),
        (#"{"dedup": {"maxEntries": [1]}}"#, "dedup.maxEntries", "integer"),
        (#"{"sink": {"maxFileBytes": null}}"#, "sink.maxFileBytes", "integer"),
    ])
    func wrongType(json: String, key: String, expected: String) throws {
        let error = try Self.error(json)
        #expect(error.code == .configuration)
        #expect(error.message.contains(key + ":"), "message: \(error.message)")
        #expect(error.message.contains("expected a") && error.message.contains(expected), "message: \(error.message)")
    }

    @Test("integer fields accept 0 and 1 (JSON numbers, not booleans)", arguments: [0, 1, 2, 250])
    func smallIntegers(value: Int) throws {
        let config = try Self.load(#"{"delivery": {"retryInitialMilliseconds": \#(value), "retryMaxMilliseconds": \#(value)}}"#)
        #expect(config.delivery.retryInitialMilliseconds == value)
        #expect(config.delivery.retryMaxMilliseconds == value)
    }

    @Test("an invalid fullPolicy lists the valid values", arguments: [#""drop""#, #""REJECT""#, "1"])
    func invalidFullPolicy(value: String) throws {
        let error = try Self.error(#"{"log": {"fullPolicy": \#(value)}}"#)
        #expect(error.code == .configuration)
        #expect(error.message.contains("log.fullPolicy"), "message: \(error.message)")
        #expect(error.message.contains("reject") && error.message.contains("drop-oldest"), "message: \(error.message)")
    }

    @Test("malformed JSON, a non-object root and a missing file are clear errors")
    func badFiles() throws {
        #expect(try Self.error(#"{"log": "#).message.contains("not valid JSON"))
        #expect(try Self.error("[1, 2]").message.contains("must hold a JSON object"))
        let error = #expect(throws: AgentError.self) {
            try AgentConfiguration.load(fromFile: "/nonexistent/ferry-\(UUID().uuidString).json")
        }
        #expect(error?.code == .configuration)
        #expect(error?.message.contains("does not exist") == true)
    }

    @Test("loading validates: retention below twice the segment size is refused")
    func loadValidates() throws {
        let error = try Self.error(#"{"log": {"segmentMaxBytes": 8192, "retentionMaxBytes": 16383}}"#)
        #expect(error.code == .configuration)
        #expect(error.message.contains("retentionMaxBytes"), "message: \(error.message)")
        #expect(try Self.load(#"{"log": {"segmentMaxBytes": 8192, "retentionMaxBytes": 16384}}"#).log.retentionMaxBytes == 16384)
    }

    @Test("validate() rejects inconsistent values")
    func validate() throws {
        let good = AgentConfiguration(runtimeDirectory: "/tmp/fa-x", dataDirectory: "/tmp/fa-x-data", sinks: [.defaultFile()])
        try good.validate()
        var cases: [(String, AgentConfiguration)] = []
        var c = good
        c.log = LogConfiguration(segmentMaxBytes: 1 << 20, retentionMaxBytes: (2 << 20) - 1)
        cases.append(("retention < 2 * segment", c))
        c = good
        c.log.segmentMaxBytes = 1000
        cases.append(("tiny segment", c))
        c = good
        c.maxEventBytes = 10
        cases.append(("maxEventBytes below the fixed header", c))
        c = good
        c.maxEventBytes = LogRecord.maxBodySize
        cases.append(("maxEventBytes above a record", c))
        c = good
        c.dedup.maxEntries = 0
        cases.append(("no dedup entries", c))
        c = good
        c.dedup.maxAgeSeconds = -1
        cases.append(("negative dedup age", c))
        c = good
        c.delivery.batchMaxEvents = 0
        cases.append(("empty batches", c))
        c = good
        c.dataDirectory = ""
        cases.append(("empty data directory", c))
        c = good
        c.runtimeDirectory = "/tmp/" + String(repeating: "r", count: 120)
        cases.append(("runtime directory too long for a socket path", c))
        for (what, config) in cases {
            let error = #expect(throws: AgentError.self, "\(what)") { try config.validate() }
            #expect(error?.code == .configuration, "\(what)")
        }
    }
}
