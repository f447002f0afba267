// Shared by the corpus replay test (ControlCorpusTests) and the libFuzzer target
// (Fuzz/FuzzControl.swift): scripts/fuzz compiles this file together with
// Sources/FerryProtocol/*.swift into one module named FerryProtocol, where the import below is
// ignored with a warning.
import FerryProtocol
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The control protocol's JSON decoders — the agent's for requests (bytes from any local
/// process), the client's for replies — and the properties they must keep on any input: decode
/// or throw, never crash; a request that decodes round-trips through its wire form and through
/// `Codable`, and its wire form is stable.
enum ControlChecks {
    /// What happened to one input as a request.
    enum Outcome: Equatable {
        /// It decoded as a request (and passed the round-trip checks).
        case request
        /// The agent would refuse it (``ControlRefusal``).
        case refused
    }

    /// Runs every decoder over `input`. Returns the request outcome, or a description of a
    /// broken property (a bug: the fuzzer stops on it, the test fails).
    static func run(_ input: [UInt8]) -> Result<Outcome, ControlChecks.Violation> {
        // The client's reply decoders: any outcome but a crash is fine; what decodes re-encodes
        // to an equal value.
        let data = Data(input)
        if let violation = replyViolation(ControlRefusal.self, data) ?? replyViolation(StatusReply.self, data)
            ?? replyViolation(ConsentUpdate.self, data) ?? replyViolation(ConsentAuditLog.self, data)
            ?? replyViolation(PurgeReply.self, data) ?? replyViolation(DeadLetterReplayReply.self, data) {
            return .failure(Violation(violation, input))
        }
        _ = try? JSONDecoder().decode(ControlReplyHeader.self, from: data)

        let request: ControlRequest
        do {
            request = try ControlRequest.decode(json: input)
        } catch {
            guard !error.message.isEmpty else { return .failure(Violation("refusal without a message", input)) }
            return .success(.refused)
        }
        let wire = request.encoded()
        guard let again = try? ControlRequest.decode(json: wire) else {
            return .failure(Violation("the wire form of a decoded request is refused: \(String(decoding: wire, as: UTF8.self))", input))
        }
        guard again == request else {
            return .failure(Violation("request does not survive encoded() → decode: \(request) vs \(again)", input))
        }
        guard again.encoded() == wire else { return .failure(Violation("the wire form is not stable", input)) }
        guard let coded = try? JSONDecoder().decode(ControlRequest.self, from: JSONEncoder().encode(request)), coded == request else {
            return .failure(Violation("request does not survive JSONEncoder → JSONDecoder", input))
        }
        return .success(.request)
    }

    /// Decodes `data` as `type`; if it decodes and re-encodes, the re-encoded value must decode
    /// to an equal value. Returns what went wrong, or nil.
    private static func replyViolation<T: Codable & Equatable>(_ type: T.Type, _ data: Data) -> String? {
        guard let value = try? JSONDecoder().decode(type, from: data),
              let encoded = try? JSONEncoder().encode(value) else { return nil }
        guard let again = try? JSONDecoder().decode(type, from: encoded) else {
            return "\(type) re-encodes to JSON it cannot decode: \(String(decoding: encoded, as: UTF8.self))"
        }
        return again == value ? nil : "\(type) does not survive a round trip: \(value) vs \(again)"
    }

    /// A broken decoder property, with the input that shows it.
    struct Violation: Error, CustomStringConvertible {
        var what: String
        var input: [UInt8]
        init(_ what: String, _ input: [UInt8]) {
            self.what = what
            self.input = input
        }
        var description: String {
            "\(what): input of \(input.count) bytes: \(String(decoding: input.prefix(200), as: UTF8.self))"
        }
    }
}
