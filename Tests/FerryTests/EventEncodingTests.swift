import Ferry
import FerryProtocol
import FerryTestKit
import Foundation
import Logging
import Synchronization
import Testing

/// The frames the helpers encode straight from their arguments (no `Event` in between), as a
/// fake agent receives them.
@Suite("FerryClient event encoding")
struct EventEncodingTests {
    /// Runs `emit` against a fake agent that acks everything, flushes, and returns the frames it
    /// received, in order.
    static func frames(_ emit: (FerryClient) -> Void) async throws -> [WireEvent] {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let received = Mutex<[[UInt8]]>([])
        let fake = try FakeIngestAgent(runtimeDirectory: dir.appending("rt")) { _, header, events in
            received.withLock { $0 += events }
            return FakeIngestAgent.ack(header, events)
        }
        defer { fake.stop() }
        var logger = Logger(label: "ferry-tests")
        logger.logLevel = .critical
        let client = try FerryClient(
            configuration: .init(source: "encoding", runtimeDirectory: dir.appending("rt"), anonymousID: "anon-config"),
            logger: logger)
        emit(client)
        try await client.flush(timeout: .seconds(20))
        await client.shutdown()
        return try received.withLock { frames in
            try frames.map { frame in
                let event = try WireEvent(decoding: frame)
                // The helpers' encoder and `WireEvent.encoded()` agree byte for byte.
                #expect(event.encoded() == frame)
                return event
            }
        }
    }

    static func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    @Test("properties and context are encoded with sorted keys and escaped; none means empty fields")
    func helpers() async throws {
        var built: [String: FerryValue] = ["total": 42.5, "gift": true]
        built["sku"] = "A-1"
        let empty: [String: FerryValue] = [:]
        let events = try await Self.frames { client in
            client.track("Order Completed", properties: ["total": 42.5, "sku": "A-1", "note": "a\"b\\c\n\u{1}é"],
                         userID: "u1", context: ["locale": "fr-FR", "app": ["build": 7, "beta": nil]])
            client.track("Built", properties: built)
            client.screen("Home")
            client.identify(userID: "u2", traits: ["plan": "pro"], context: empty)
            client.group("acme", traits: ["seats": 3, "tags": ["a", "b"]])
            client.alias(userID: "u3", previousID: "anon-7", context: ["ip": "10.0.0.1"])
            client.page("Pricing", properties: ["path": "/pricing"], anonymousID: "anon-call")
            client.track("Many", properties: ["k9": 9, "k8": 8, "k7": 7, "k6": 6, "k5": 5, "k4": 4, "k3": 3, "k2": 2,
                                              "k1": 1, "k0": 0])
        }
        try #require(events.count == 8)
        #expect(Self.text(events[0].properties) == #"{"note":"a\"b\\c\n\u0001é","sku":"A-1","total":42.5}"#)
        #expect(Self.text(events[0].context) == #"{"app":{"beta":null,"build":7},"locale":"fr-FR"}"#)
        #expect(events[0].name == "Order Completed" && events[0].userID == "u1" && events[0].type == .track)
        #expect(events[0].source == "encoding" && events[0].anonymousID == "anon-config")
        #expect(Self.text(events[1].properties) == #"{"gift":true,"sku":"A-1","total":42.5}"#)
        // No properties and no context: both fields empty, no context extension.
        #expect(events[2].properties.isEmpty && events[2].context.isEmpty && events[2].type == .screen)
        #expect(Self.text(events[3].properties) == #"{"plan":"pro"}"# && events[3].context.isEmpty)
        #expect(events[4].groupID == "acme" && Self.text(events[4].properties) == #"{"seats":3,"tags":["a","b"]}"#)
        #expect(events[5].previousID == "anon-7" && events[5].properties.isEmpty
            && Self.text(events[5].context) == #"{"ip":"10.0.0.1"}"#)
        #expect(events[6].anonymousID == "anon-call" && events[6].type == .page)
        #expect(Self.text(events[7].properties)
            == #"{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9}"#)
        #expect(events.map(\.sequence) == Array(1...8))
    }

    @Test("an Event keeps its encoded JSON, once-key, category and local-only flag")
    func events() async throws {
        let events = try await Self.frames { client in
            client.enqueue(Event(type: .track, name: "Bought", propertiesJSON: Array(#"{"x":1}"#.utf8), userID: "u",
                                 onceKey: "order-1", category: 2, localOnly: true, contextJSON: Array(#"{"y":2}"#.utf8)))
            client.enqueue(Event(name: "Sorted", properties: ["b": 1, "a": 2]))
        }
        try #require(events.count == 2)
        #expect(Self.text(events[0].properties) == #"{"x":1}"# && Self.text(events[0].context) == #"{"y":2}"#)
        #expect(events[0].onceKey == "order-1" && events[0].category == 2 && events[0].flags == .localOnly)
        #expect(Self.text(events[1].properties) == #"{"a":2,"b":1}"#)
    }
}

@Suite("FerryValue JSON")
struct FerryValueJSONTests {
    @Test("objects of up to 8 keys (found by scanning) and of more (sorted copy) come out in key order", arguments: 0...12)
    func sortedKeys(count: Int) {
        let keys = (0..<count).map { "key-\(($0 * 7) % 13)-\($0)" }
        var fields: [String: FerryValue] = [:]
        for (index, key) in keys.enumerated() { fields[key] = .int(Int64(index)) }
        var json: [UInt8] = []
        FerryValue.appendObject(fields, to: &json)
        let expected = "{" + keys.sorted().map { key in "\"\(key)\":\(keys.firstIndex(of: key)!)" }.joined(separator: ",") + "}"
        #expect(String(decoding: json, as: UTF8.self) == expected)
    }

    @Test("strings are escaped as JSON requires, in runs between the escapes")
    func escapes() {
        var json: [UInt8] = []
        FerryValue.string("plain").appendJSON(to: &json)
        FerryValue.string("\"q\" \\ \n\r\t\u{0}\u{1f} ü €").appendJSON(to: &json)
        FerryValue.string("").appendJSON(to: &json)
        FerryValue.string(String(repeating: "long text ", count: 10) + "\n").appendJSON(to: &json)
        #expect(String(decoding: json, as: UTF8.self)
            == #""plain""\"q\" \\ \n\r\t\u0000\u001f ü €""""# + "\"" + String(repeating: "long text ", count: 10) + #"\n""#)
    }
}
