@testable import FerryFileSink
@testable import FerryAgent
import FerryTestKit
@testable import FerryStorage
import Foundation
import Testing

@Suite("Sink configuration: sinks list, old sink key, validation")
struct SinkConfigurationTests {
    typealias Sink = AgentConfiguration.SinkConfiguration

    @Test("the old single `sink` key is a one-element list named after its type, with delivery's batching and retry")
    func oldSinkKey() throws {
        let config = try ConfigurationTests.load(#"{"sink": {"type": "file", "maxFileBytes": 4096}}"#)
        #expect(config.sinks == [Sink(name: "file", settings: .file(directory: nil, maxFileBytes: 4096))])
        #expect(config.fileSinkDirectory == "/tmp/fa-base-data/delivered")
        // Without "type" (as files written before there were other types).
        #expect(try ConfigurationTests.load(#"{"sink": {"directory": "/tmp/x"}}"#).sinks.map(\.name) == ["file"])
    }

    @Test("no sink key: the default file sink, following the file's delivery defaults")
    func defaultSink() throws {
        let config = try ConfigurationTests.load(#"{"delivery": {"batchMaxEvents": 7, "retryInitialMilliseconds": 3, "retryMaxMilliseconds": 9}}"#)
        #expect(config.sinks.count == 1)
        #expect(config.sinks[0].name == "file")
        #expect(config.sinks[0].batch == .init(maxEvents: 7, maxBytes: 1 << 20, maxWaitMilliseconds: 200))
        #expect(config.sinks[0].retry == .init(initialMilliseconds: 3, maxMilliseconds: 9, maxElapsedMilliseconds: nil))
        #expect(config.sinks[0].circuit == .init(failureThreshold: 5, openMilliseconds: 30_000))
    }

    @Test("`sinks` sets every field of every sink; unset policies default to delivery's")
    func sinksList() throws {
        let config = try ConfigurationTests.load("""
        {
          "delivery": {"batchMaxEvents": 50, "retryInitialMilliseconds": 20, "retryMaxMilliseconds": 400},
          "sinks": [
            {"name": "archive", "type": "file", "directory": "/tmp/fa-a", "maxFileBytes": 9999,
             "batch": {"maxEvents": 10, "maxBytes": 2048, "maxWaitMilliseconds": 250},
             "retry": {"initialMilliseconds": 1, "maxMilliseconds": 2, "maxElapsedMilliseconds": 60000},
             "circuit": {"failureThreshold": 3, "openMilliseconds": 1500}},
            {"name": "copy_2", "type": "file", "directory": "/tmp/fa-b"}
          ]
        }
        """)
        #expect(config.sinks == [
            Sink(name: "archive", settings: .file(directory: "/tmp/fa-a", maxFileBytes: 9999),
                 batch: .init(maxEvents: 10, maxBytes: 2048, maxWaitMilliseconds: 250),
                 retry: .init(initialMilliseconds: 1, maxMilliseconds: 2, maxElapsedMilliseconds: 60_000),
                 circuit: .init(failureThreshold: 3, openMilliseconds: 1500)),
            Sink(name: "copy_2", settings: .file(directory: "/tmp/fa-b", maxFileBytes: Int64(64 << 20)),
                 batch: .init(maxEvents: 50, maxBytes: 1 << 20), retry: .init(initialMilliseconds: 20, maxMilliseconds: 400)),
        ])
        #expect(config.fileSinkDirectory == "/tmp/fa-a")
    }

    @Test("bad sink entries are refused with a message naming the place and the problem", arguments: [
        (#"{"sinks": [{"name": "a", "type": "file", "directory": "/tmp/1"}, {"name": "a", "type": "file", "directory": "/tmp/2"}]}"#,
         "sinks[1].name", "already the name of sinks[0]"),
        (#"{"sinks": [{"name": "../up", "type": "file"}]}"#, "sinks[0].name", "invalid"),
        (#"{"sinks": [{"name": "", "type": "file"}]}"#, "sinks[0].name", "invalid"),
        (#"{"sinks": [{"type": "file"}]}"#, "sinks[0].name", "missing"),
        (#"{"sinks": [{"name": "a"}]}"#, "sinks[0].type", "missing; expected one of: file"),
        (#"{"sinks": [{"name": "a", "type": "kafka"}]}"#, "sinks[0].type", "expected one of: file"),
        (#"{"sinks": [{"name": "a", "type": "file", "url": "x"}]}"#, "sinks[0].url", "unknown key"),
        (#"{"sinks": [{"name": "a", "type": "file", "batch": {"maxEvents": "ten"}}]}"#, "sinks[0].batch.maxEvents", "expected an integer"),
        (#"{"sinks": [{"name": "a", "type": "file", "retry": {"maxElapsed": 5}}]}"#, "sinks[0].retry.maxElapsed", "unknown key"),
        (#"{"sinks": []}"#, "sinks", "at least one sink"),
        (#"{"sinks": {"name": "a"}}"#, "sinks", "expected an array"),
        (#"{"sinks": [3]}"#, "sinks[0]", "expected an object"),
        (#"{"sink": {"type": "file"}, "sinks": [{"name": "a", "type": "file"}]}"#, "sink", "not both"),
        (#"{"sinks": [{"name": "a", "type": "file", "disclose": {"origin": "no"}}]}"#, "sinks[0].disclose.origin", "expected true or false"),
        (#"{"sinks": [{"name": "a", "type": "file", "disclose": {"pid": false}}]}"#, "sinks[0].disclose.pid", "unknown key; valid keys here: anonymousId, dropContext, origin, process"),
        (#"{"sinks": [{"name": "a", "type": "file", "disclose": {"dropContext": "ip"}}]}"#, "sinks[0].disclose.dropContext", "expected an array of strings"),
        (#"{"sinks": [{"name": "a", "type": "file", "disclose": true}]}"#, "sinks[0].disclose", "expected an object"),
    ])
    func badEntries(json: String, place: String, problem: String) throws {
        let error = try ConfigurationTests.error(json)
        #expect(error.code == .configuration)
        #expect(error.message.contains(place + ":"), "message: \(error.message)")
        #expect(error.message.contains(problem), "message: \(error.message)")
    }

    @Test("values out of range are refused by validation, naming the sink", arguments: [
        (#"{"batch": {"maxEvents": 0}}"#, "batch.maxEvents must be positive"),
        (#"{"batch": {"maxBytes": 0}}"#, "batch.maxBytes must be positive"),
        (#"{"batch": {"maxWaitMilliseconds": -1}}"#, "batch.maxWaitMilliseconds must not be negative"),
        (#"{"retry": {"initialMilliseconds": 100, "maxMilliseconds": 10}}"#, "retry.maxMilliseconds (10) must be at least retry.initialMilliseconds (100)"),
        (#"{"retry": {"maxElapsedMilliseconds": 0}}"#, "retry.maxElapsedMilliseconds must be positive"),
        (#"{"circuit": {"failureThreshold": 0}}"#, "circuit.failureThreshold must be positive"),
        (#"{"circuit": {"openMilliseconds": -5}}"#, "circuit.openMilliseconds must not be negative"),
        (#"{"disclose": {"dropContext": ["device.id"]}}"#, #"disclose.dropContext: "device.id" has a '.'"#),
        (#"{"disclose": {"dropContext": ["ip", "ip"]}}"#, #"disclose.dropContext: "ip" is listed twice"#),
        (#"{"disclose": {"dropContext": [""]}}"#, "disclose.dropContext: a key must not be empty"),
        (#"{"maxFileBytes": 0}"#, "maxFileBytes must be positive"),
    ])
    func outOfRange(fields: String, problem: String) throws {
        let entry = #"{"name": "up", "type": "file", "directory": "/tmp/fa-up", "# + fields.dropFirst()
        let error = try ConfigurationTests.error(#"{"sinks": [\#(entry)]}"#)
        #expect(error.code == .configuration)
        #expect(error.message.contains("sink \"up\": " + problem), "message: \(error.message)")
        #expect(error.message.contains("ferryd.json"), "the message names the file: \(error.message)")
    }

    @Test("disclose: each choice left out takes the type's default (everything for a file sink); the keys given win")
    func disclose() throws {
        let config = try ConfigurationTests.load("""
        {"sinks": [
          {"name": "a", "type": "file", "directory": "/tmp/fa-d1"},
          {"name": "b", "type": "file", "directory": "/tmp/fa-d2", "disclose": {"origin": false, "dropContext": ["ip", "device"]}}
        ]}
        """)
        #expect(config.sinks[0].disclose == .init() && config.sinks[0].disclosure == .all)
        #expect(config.sinks[1].disclose == .init(origin: false, process: nil, dropContext: ["ip", "device"]))
        #expect(config.sinks[1].disclosure == Disclosure(origin: false, process: true, dropContext: ["device", "ip"]))
    }

    @Test("two file sinks writing to one directory are refused")
    func sharedDirectory() throws {
        let error = try ConfigurationTests.error(#"{"sinks": [{"name": "a", "type": "file"}, {"name": "b", "type": "file"}]}"#)
        #expect(error.message.contains(#"sinks "a" and "b" both write to /tmp/fa-base-data/delivered"#), "message: \(error.message)")
    }

    @Test("sink names: letters, digits, - and _, at most 64", arguments: [
        ("file", true), ("http-main_2", true), (String(repeating: "x", count: 64), true),
        ("", false), ("a/b", false), ("a.b", false), ("..", false), ("é", false), (String(repeating: "x", count: 65), false),
    ])
    func names(name: String, valid: Bool) {
        #expect(Sink.isValidName(name) == valid)
    }
}
