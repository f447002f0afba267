import FerryTestKit
import Foundation
import Synchronization

/// A collector that answers like Segment's HTTP tracking API (`POST /v1/batch`), for
/// ``HTTPTestServer``: it checks the write key (HTTP Basic, the key as the user name and an empty
/// password), Segment's limits (32 KB per message, 500 KB per request, counted in bytes of the
/// JSON as received) and the shape of every message per type, and answers `200` with
/// `{"success":true}`, `401` for a missing or wrong key, or `400` with the reason. It never
/// looks at `Idempotency-Key`: like Segment it deduplicates nothing, so a test sees every repeat.
///
/// ```swift
/// let collector = SegmentCollector(writeKey: "wk-test")
/// let server = try await HTTPTestServer.start(handler: collector.handler)
/// // … deliver …
/// #expect(collector.accepted.map(\.messageID) == ids)
/// ```
public final class SegmentCollector: Sendable {
    /// One message of an accepted batch.
    public struct Message: Sendable {
        /// `messageId`.
        public var messageID: String
        /// `type`.
        public var type: String
        /// `userId`, if present.
        public var userID: String?
        /// `anonymousId`, if present.
        public var anonymousID: String?
        /// The message's JSON exactly as received.
        public var raw: [UInt8]

        /// ``raw`` parsed.
        public var json: [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(raw)) as? [String: Any]) ?? [:]
        }
    }

    /// Segment's documented per-message limit ("32 KB"), read strictly as 32,000 bytes.
    public static let maxMessageBytes = 32_000
    /// Segment's documented per-request limit for `/v1/batch` ("500 KB"), read strictly as 500,000 bytes.
    public static let maxBatchBytes = 500_000
    /// The six message types.
    public static let types: Set<String> = ["track", "identify", "page", "screen", "group", "alias"]

    private let state: Mutex<State>

    private struct State {
        var writeKey: String
        var accepted: [Message] = []
        var refusals: [(status: Int, reason: String)] = []
        var largestBody = 0
    }

    /// A collector accepting `writeKey`.
    public init(writeKey: String) {
        state = Mutex(State(writeKey: writeKey))
    }

    /// The write key it accepts from now on (a rotated key).
    public var writeKey: String {
        get { state.withLock { $0.writeKey } }
        set { state.withLock { $0.writeKey = newValue } }
    }

    /// Every message of every batch answered `200`, in arrival order (repeats included).
    public var accepted: [Message] { state.withLock { $0.accepted } }

    /// The status and reason of every refused request, in order.
    public var refusals: [(status: Int, reason: String)] { state.withLock { $0.refusals } }

    /// The largest request body seen (uncompressed bytes).
    public var largestBody: Int { state.withLock { $0.largestBody } }

    /// The handler to start an ``HTTPTestServer`` with.
    public var handler: HTTPTestServer.Handler {
        { [self] request in answer(request) }
    }

    /// The `Authorization` value for `key`: `Basic base64("<key>:")`.
    public static func authorization(writeKey key: String) -> String {
        "Basic " + Data((key + ":").utf8).base64EncodedString()
    }

    /// Decides the answer to `request` and records it.
    public func answer(_ request: HTTPTestServer.Request) -> HTTPTestServer.Response {
        state.withLock { $0.largestBody = max($0.largestBody, request.body.count) }
        guard request.header("Authorization") == Self.authorization(writeKey: writeKey) else {
            return refuse(401, "invalid write key")
        }
        guard request.method == "POST", request.path == "/v1/batch" else { return refuse(404, "no such endpoint") }
        guard request.header("Content-Type")?.lowercased().hasPrefix("application/json") == true else {
            return refuse(400, "Content-Type must be application/json")
        }
        if let error = request.decodingError { return refuse(400, "cannot decompress the body: \(error)") }
        do {
            let messages = try Self.validate(body: request.body)
            state.withLock { $0.accepted += messages }
            return .status(200, headers: ["Content-Type": "application/json"], body: #"{"success":true}"#)
        } catch let error as FerryTestKitError {
            return refuse(400, error.description)
        } catch {
            return refuse(400, "\(error)")
        }
    }

    private func refuse(_ status: Int, _ reason: String) -> HTTPTestServer.Response {
        state.withLock { $0.refusals.append((status, reason)) }
        return .status(status, headers: ["Content-Type": "application/json"],
                       body: #"{"success":false,"error":"\#(reason.replacingOccurrences(of: "\"", with: "'"))"}"#)
    }

    // MARK: Validation

    /// The messages of a valid `/v1/batch` body; throws ``FerryTestKitError`` naming the first
    /// rule broken.
    public static func validate(body: [UInt8]) throws -> [Message] {
        func fail(_ reason: String) -> FerryTestKitError { FerryTestKitError(reason) }
        guard body.count <= maxBatchBytes else { throw fail("the batch is \(body.count) bytes, over \(maxBatchBytes)") }
        guard let top = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else {
            throw fail("the body is not a JSON object")
        }
        let unknown = Set(top.keys).subtracting(["batch", "sentAt", "context", "integrations", "writeKey"])
        guard unknown.isEmpty else { throw fail("unknown batch keys \(unknown.sorted())") }
        if let sentAt = top["sentAt"] { guard isTimestamp(sentAt) else { throw fail("sentAt is not ISO 8601") } }
        if let context = top["context"] { guard context is [String: Any] else { throw fail("context is not an object") } }
        guard top["batch"] is [Any] else { throw fail("batch is not an array") }
        let spans = try RawJSON.arrayElements(RawJSON.member("batch", of: body))
        return try spans.enumerated().map { index, raw in
            guard raw.count <= maxMessageBytes else {
                throw fail("batch[\(index)] is \(raw.count) bytes, over \(maxMessageBytes)")
            }
            guard let message = try? JSONSerialization.jsonObject(with: Data(raw)) as? [String: Any] else {
                throw fail("batch[\(index)] is not an object")
            }
            do {
                return try validate(message: message, raw: raw)
            } catch let error as FerryTestKitError {
                throw fail("batch[\(index)]: \(error.description)")
            }
        }
    }

    /// Checks one message against Segment's spec for its type.
    static func validate(message: [String: Any], raw: [UInt8]) throws -> Message {
        func fail(_ reason: String) -> FerryTestKitError { FerryTestKitError(reason) }
        func string(_ key: String, required: Bool = false) throws -> String? {
            guard let value = message[key] else {
                if required { throw fail("\(key) is required") }
                return nil
            }
            guard let text = value as? String, !text.isEmpty else { throw fail("\(key) must be a non-empty string") }
            return text
        }
        func object(_ key: String) throws {
            if let value = message[key], !(value is [String: Any]) { throw fail("\(key) must be an object") }
        }
        let type = try string("type", required: true)!
        guard types.contains(type) else { throw fail("unknown type \(type)") }
        let messageID = try string("messageId", required: true)!
        let userID = try string("userId"), anonymousID = try string("anonymousId")
        guard userID != nil || anonymousID != nil else { throw fail("userId or anonymousId is required") }
        if let timestamp = message["timestamp"] { guard isTimestamp(timestamp) else { throw fail("timestamp is not ISO 8601") } }
        try object("context")
        try object("integrations")
        var allowed: Set<String> = ["type", "messageId", "userId", "anonymousId", "timestamp", "context", "integrations", "sentAt"]
        switch type {
        case "track":
            _ = try string("event", required: true)
            try object("properties")
            allowed.formUnion(["event", "properties"])
        case "page", "screen":
            _ = try string("name")
            _ = try string("category")
            try object("properties")
            allowed.formUnion(["name", "category", "properties"])
        case "identify":
            try object("traits")
            allowed.formUnion(["traits", "name"])
        case "group":
            _ = try string("groupId", required: true)
            try object("traits")
            allowed.formUnion(["groupId", "traits", "name"])
        default:  // alias
            _ = try string("previousId", required: true)
            guard userID != nil else { throw fail("an alias needs a userId") }
            allowed.formUnion(["previousId", "name"])
        }
        let unknown = Set(message.keys).subtracting(allowed)
        guard unknown.isEmpty else { throw fail("keys not in Segment's \(type) spec: \(unknown.sorted())") }
        return Message(messageID: messageID, type: type, userID: userID, anonymousID: anonymousID, raw: raw)
    }

    /// Whether `value` is an ISO 8601 date-time string (with or without fractional seconds).
    static func isTimestamp(_ value: Any) -> Bool {
        guard let text = value as? String else { return false }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if formatter.date(from: text) != nil { return true }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text) != nil
    }
}

/// Finds the bytes of JSON values as received (so sizes are the sender's, not a re-encoding's).
/// The input is known to be valid JSON.
enum RawJSON {
    /// The value of top-level member `key` of the object `bytes`.
    static func member(_ key: String, of bytes: [UInt8]) throws -> ArraySlice<UInt8> {
        var index = skipSpace(bytes, 0)
        guard index < bytes.count, bytes[index] == UInt8(ascii: "{") else { throw FerryTestKitError("not an object") }
        index += 1
        while true {
            index = skipSpace(bytes, index)
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { break }
            let keyEnd = skipValue(bytes, index)
            let name = try? JSONSerialization.jsonObject(with: Data(bytes[index..<keyEnd]), options: .fragmentsAllowed) as? String
            index = skipSpace(bytes, keyEnd) + 1  // the colon
            let valueStart = skipSpace(bytes, index)
            let valueEnd = skipValue(bytes, valueStart)
            if name == key { return bytes[valueStart..<valueEnd] }
            index = skipSpace(bytes, valueEnd)
            guard index < bytes.count, bytes[index] == UInt8(ascii: ",") else { break }
            index += 1
        }
        throw FerryTestKitError("no member \(key)")
    }

    /// The elements of the array `bytes`.
    static func arrayElements(_ bytes: ArraySlice<UInt8>) throws -> [[UInt8]] {
        let array = Array(bytes)
        var index = skipSpace(array, 0)
        guard index < array.count, array[index] == UInt8(ascii: "[") else { throw FerryTestKitError("not an array") }
        index = skipSpace(array, index + 1)
        var elements: [[UInt8]] = []
        while index < array.count, array[index] != UInt8(ascii: "]") {
            let end = skipValue(array, index)
            elements.append(Array(array[index..<end]))
            index = skipSpace(array, end)
            if index < array.count, array[index] == UInt8(ascii: ",") { index = skipSpace(array, index + 1) }
        }
        return elements
    }

    private static func skipSpace(_ bytes: [UInt8], _ start: Int) -> Int {
        var index = start
        while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        return index
    }

    /// The index just after the value starting at `start`.
    private static func skipValue(_ bytes: [UInt8], _ start: Int) -> Int {
        var index = start, depth = 0, inString = false
        while index < bytes.count {
            let byte = bytes[index]
            if inString {
                if byte == UInt8(ascii: "\\") { index += 1 } else if byte == UInt8(ascii: "\"") {
                    inString = false
                    if depth == 0 { return index + 1 }
                }
            } else {
                switch byte {
                case UInt8(ascii: "\""): inString = true
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    if depth == 0 { return index }
                    depth -= 1
                    if depth == 0 { return index + 1 }
                case UInt8(ascii: ","), 0x20, 0x09, 0x0A, 0x0D:
                    if depth == 0 { return index }
                default: break
                }
            }
            index += 1
        }
        return index
    }
}
