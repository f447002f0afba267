@testable import FerryFileSink
@testable import FerryAgent
import FerryAgentTestKit
import FerryTestKit
import FerryProtocol
import FerryStorage
import Foundation
import Synchronization
import Testing

/// A sink type defined outside the agent's modules, the way a third party adds one: a settings
/// type that builds its sink, and a ``SinkKind`` that reads its keys from the configuration file.
struct MemorySinkSettings: SinkSettings {
    static let type = "memory"
    /// The name of the ``MemoryStore`` the sink delivers into (a name keeps the settings `Hashable`).
    var store = ""

    func validate(name: String) throws {
        guard !store.isEmpty else { throw AgentError(code: .configuration, message: "sink \"\(name)\": store must not be empty") }
    }

    func makeSink(_ context: SinkContext) -> any Sink {
        MemorySink(name: context.name, store: MemoryStore.named(store))
    }
}

extension SinkKind {
    static let memory = SinkKind(MemorySinkSettings.self) { object, fields, keyPath in
        let settings = FieldBox(MemorySinkSettings())
        try fields.apply(object, ["store": .string { settings.value.store = $0 }], at: keyPath)
        return settings.value
    }
}

/// The events a ``MemorySink`` received, by store name.
final class MemoryStore: Sendable {
    let ids = Mutex<[EventID]>([])
    private static let all = Mutex<[String: MemoryStore]>([:])

    static func named(_ name: String) -> MemoryStore {
        all.withLock { all in
            if let store = all[name] { return store }
            let store = MemoryStore()
            all[name] = store
            return store
        }
    }
}

final class MemorySink: Sink {
    let name: String
    let store: MemoryStore

    init(name: String, store: MemoryStore) {
        self.name = name
        self.store = store
    }

    func recover(checkpoint: [UInt8]?) async throws -> [UInt8]? { nil }

    func deliver(_ batch: DeliveryBatch) async throws -> [UInt8]? {
        store.ids.withLock { $0 += batch.events.map(\.decodedID) }
        return nil
    }

    func shutdown() async throws {}
}

@Suite("Sink registry: sink types by name, including one defined outside the agent")
struct SinkRegistryTests {
    static func write(_ json: String, in scratch: ScratchDirectory) throws -> String {
        let path = scratch.appending("ferryd.json")
        try writeText(json, to: path)
        return path
    }

    @Test("an unknown type fails with the list of the registered ones")
    func unknownType() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = try Self.write(#"{"sinks": [{"name": "m", "type": "memory", "store": "x"}]}"#, in: scratch)
        let builtIn = #expect(throws: AgentError.self) { try AgentConfiguration.load(fromFile: path, sinkKinds: .builtIn) }
        #expect(builtIn?.message.contains("sinks[0].type: expected one of: file") == true, "\(builtIn?.message ?? "")")
        let other = try Self.write(#"{"sinks": [{"name": "m", "type": "nope"}]}"#, in: scratch)
        let registered = #expect(throws: AgentError.self) {
            try AgentConfiguration.load(fromFile: other, sinkKinds: .builtIn.registering(.memory))
        }
        #expect(registered?.message.contains("expected one of: file, memory") == true, "\(registered?.message ?? "")")
    }

    @Test("a registered type reads its own keys; an unknown key lists its keys and the shared ones")
    func keys() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let kinds = SinkRegistry.builtIn.registering(.memory)
        let good = try Self.write(#"{"sinks": [{"name": "m", "type": "memory", "store": "s", "batch": {"maxEvents": 7}}]}"#, in: scratch)
        let config = try AgentConfiguration.load(fromFile: good, sinkKinds: kinds)
        #expect(config.sinks.first?.settings(as: MemorySinkSettings.self) == MemorySinkSettings(store: "s"))
        #expect(config.sinks.first?.type == "memory")
        #expect(config.sinks.first?.batch.maxEvents == 7)
        let typo = try Self.write(#"{"sinks": [{"name": "m", "type": "memory", "stor": "s"}]}"#, in: scratch)
        let error = #expect(throws: AgentError.self) { try AgentConfiguration.load(fromFile: typo, sinkKinds: kinds) }
        #expect(error?.message.contains("sinks[0].stor: unknown key; valid keys here: batch, circuit, disclose, name, requiresConsent, retry, route, store, type") == true,
                "\(error?.message ?? "")")
        let empty = try Self.write(#"{"sinks": [{"name": "m", "type": "memory"}]}"#, in: scratch)
        let invalid = #expect(throws: AgentError.self) { try AgentConfiguration.load(fromFile: empty, sinkKinds: kinds) }
        #expect(invalid?.message.contains("store must not be empty") == true, "\(invalid?.message ?? "")")
    }

    @Test("an agent delivers to a sink type defined in the test target, beside the file sink")
    func thirdPartySinkDelivers() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let store = "delivers-\(UUID().uuidString)"
        var configuration = agentConfiguration(scratch)
        configuration.sinks = [
            .init(name: "mem", settings: MemorySinkSettings(store: store)),
            .init(name: "file", settings: .file(directory: scratch.appending("out"))),
        ]
        let running = try await InProcessAgent(configuration)
        let frames = Events.frames(20)
        let replies = try await exchange(runtimeDirectory: configuration.runtimeDirectory, [[eventsHeader(1)] + frames])
        #expect(replies == [.ack(requestID: 1, entries: frames.map { AckEntry(id: Events.id(of: $0), status: .accepted) })])
        try await waitUntil("the memory sink to receive all 20 events") {
            MemoryStore.named(store).ids.withLock { $0.count } >= 20
        }
        #expect(MemoryStore.named(store).ids.withLock { $0 } == idsOf(frames))
        try await waitUntil("the file sink to receive all 20 events") { try sinkLines(scratch.appending("out")).count == 20 }
        try await running.stop()
    }
}
