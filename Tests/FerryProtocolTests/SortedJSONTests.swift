import Foundation
@testable import FerryProtocol
import Testing

/// The fast writer of control replies must write exactly what `JSONSerialization` writes with
/// `.sortedKeys` (the bytes of every earlier version), or decline so the slow path does.
@Suite("Sorted JSON of control replies")
struct SortedJSONTests {
    /// Keys over the characters `JSONSerialization` orders in ways plain byte order does not:
    /// punctuation, digit runs compared as numbers, prefixes.
    private static func randomKey(_ generator: inout some RandomNumberGenerator) -> String {
        let pieces = ["a", "b", "z", "ab", "_", "-", ".", "1", "2", "9", "10", "11", "20", "100", "e", "s"]
        let count = Int.random(in: 1...5, using: &generator)
        let key = (0..<count).map { _ in pieces.randomElement(using: &generator)! }.joined()
        // Digit runs starting with 0 cannot arise from these pieces except via "10"+"0…": none here.
        return key
    }

    @Test("random objects of simple keys: the same bytes as JSONSerialization, and not declined")
    func randomKeysMatchFoundation() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<300 {
            var object: [String: [String: Int]] = [:]
            for _ in 0..<Int.random(in: 1...12, using: &generator) {
                var inner: [String: Int] = [:]
                for _ in 0..<Int.random(in: 0...6, using: &generator) {
                    inner[Self.randomKey(&generator)] = Int.random(in: -1_000_000...1_000_000, using: &generator)
                }
                object[Self.randomKey(&generator)] = inner
            }
            let encoded = Array(try JSONEncoder().encode(object))
            let fast = try #require(SortedJSON.reordered(encoded), "declined \(String(decoding: encoded, as: UTF8.self))")
            #expect(fast == SortedJSON.foundationSorted(encoded), "\(String(decoding: encoded, as: UTF8.self))")
        }
    }

    private struct Reply: Encodable {
        var ok = true
        var dataDirectory = "/var/lib/ferry/data"
        var sinks: [[String: String?]] = [["name": "http-main", "last_error": "HTTP 503 from https://collect.example/v1/b"],
                                          ["name": "file.local", "last_error": nil]]
        var counters = ["events_accepted": 12, "events_rejected_malformed": 0, "batches_committed": 3]
        var empty: [String: Int] = [:]
        var list: [Int] = []
        var flags = [true, false]
        var quoted = "a \"quoted\" \\ back/slash\nnew line\ttab\r\u{8}\u{c}"

        enum CodingKeys: String, CodingKey {
            case ok, dataDirectory = "data_directory", sinks, counters, empty, list, flags, quoted
        }
    }

    @Test("a reply with paths, nulls, nesting, empty containers and escapes takes the fast path")
    func replyShapes() throws {
        let encoded = Array(try JSONEncoder().encode(Reply()))
        let fast = try #require(SortedJSON.reordered(encoded))
        #expect(fast == SortedJSON.foundationSorted(encoded))
        #expect(controlReplyJSON(Reply()) == fast)
    }

    @Test("what the fast path cannot vouch for goes through JSONSerialization",
          arguments: [
              #"{"Upper":1,"lower":2}"#, #"{"a01":1,"a1":2}"#, #"{"x":1.5,"y":2}"#, #"{"x":1e3}"#,
              #"{"k":"caf\u00e9"}"#, #"{"k":"é"}"#, #"{"k y":1}"#, #"{"":1}"#,
          ])
    func declined(json: String) throws {
        #expect(SortedJSON.reordered(Array(json.utf8)) == nil)
    }

    @Test("malformed input is declined, not half-written", arguments: [#"{"a":1"#, #"{"a":}"#, #"[1,]"#, #"{"a":1}x"#, ""])
    func malformed(json: String) {
        #expect(SortedJSON.reordered(Array(json.utf8)) == nil)
    }

    @Test("declined replies still come out sorted as JSONSerialization sorts them")
    func slowPath() throws {
        let reply = ["Zeta": 1.5, "alpha": 2, "Beta": 3]
        let encoded = Array(try JSONEncoder().encode(reply))
        #expect(controlReplyJSON(reply) == SortedJSON.foundationSorted(encoded))
        #expect(String(decoding: controlReplyJSON(reply), as: UTF8.self) == #"{"alpha":2,"Beta":3,"Zeta":1.5}"#)
    }
}
