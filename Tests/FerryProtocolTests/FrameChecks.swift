// Shared by the corpus replay test (FuzzCorpusTests) and the libFuzzer target (Fuzz/FuzzFrames.swift):
// scripts/fuzz compiles this file together with Sources/FerryProtocol/*.swift into one module
// named FerryProtocol, where the import below is ignored with a warning.
import FerryProtocol

/// The wire decoders the agent and the client run on bytes from a peer, and the properties they
/// must keep on any input: decode or throw ``ProtocolError``, never crash, and what decodes
/// re-encodes to the same bytes.
///
/// An input's first byte picks the decoder (``Target``); the rest is the frame. A corpus file is
/// one such input.
enum FrameChecks {
    /// Which decoder an input is for.
    enum Target: UInt8, CaseIterable {
        /// `MessageHeader(decoding:)` and `MessageHeader.requestID(ofRaw:)`.
        case messageHeader = 0
        /// `EventHeader(_:)` and `WireEvent(decoding:)`.
        case event = 1
        /// `AckCodec.decode(_:)`.
        case ack = 2
        /// `ErrorReply(decoding:)`.
        case errorReply = 3
        /// `EventID(_:)` text parsing (ids arrive as text from the CLI and control requests).
        case eventIDText = 4
    }

    /// What happened to one input.
    enum Outcome: Equatable {
        /// The frame decoded (and passed the round-trip checks).
        case decoded
        /// The decoder threw a ``ProtocolError`` (or returned `nil`, for `EventID(_:)`).
        case refused
    }

    /// The input for `target` with `frame`.
    static func input(_ target: Target, _ frame: [UInt8]) -> [UInt8] { [target.rawValue] + frame }

    /// Runs the decoder the first byte of `input` picks over the rest. Returns the outcome, or a
    /// description of a broken property (a bug: the fuzzer stops on it, the test fails).
    static func run(_ input: [UInt8]) -> Result<Outcome, Violation> {
        guard let selector = input.first else { return .success(.refused) }
        let frame = Array(input.dropFirst())
        let target = Target(rawValue: selector % UInt8(Target.allCases.count))!
        switch target {
        case .messageHeader:
            _ = MessageHeader.requestID(ofRaw: frame)
            guard let header = try? MessageHeader(decoding: frame) else { return .success(.refused) }
            guard header.encoded() == frame else { return .failure(Violation("header re-encodes differently", frame)) }
            return .success(.decoded)
        case .event:
            let header: EventHeader
            do {
                header = try EventHeader(frame)
            } catch {
                // The full decoder must refuse what the header check refuses.
                if (try? WireEvent(decoding: frame)) != nil {
                    return .failure(Violation("WireEvent decodes a frame EventHeader refuses (\(error))", frame))
                }
                return .success(.refused)
            }
            // The agent stores what EventHeader accepts and the sink decodes it later with
            // WireEvent: both must agree, and the event must re-encode to the stored bytes.
            let event: WireEvent
            do {
                event = try WireEvent(decoding: frame)
            } catch {
                return .failure(Violation("EventHeader accepts a frame WireEvent refuses (\(error))", frame))
            }
            guard event.id == header.id, event.sequence == header.sequence, event.type == header.type else {
                return .failure(Violation("EventHeader and WireEvent disagree", frame))
            }
            guard event.session == header.session else { return .failure(Violation("EventHeader and WireEvent disagree on the session", frame)) }
            // Re-encoding gives the canonical form (the known fields first, in tag order, none
            // empty; the extended flag exactly when there are extensions): it must decode to the
            // same event, and a frame already in that form must come back byte for byte.
            let reencoded = event.encoded()
            guard (try? WireEvent(decoding: reencoded)) == event else {
                return .failure(Violation("event does not survive a round trip", frame))
            }
            let fields = header.extensions(in: frame)
            let known = fields.prefix { EventExtension.Tag.known.contains($0.tag) }
            let canonical = fields.dropFirst(known.count).allSatisfy { !EventExtension.Tag.known.contains($0.tag) }
                && known.map(\.tag) == known.map(\.tag).sorted()
                && known.allSatisfy { !$0.value.isEmpty }
                && header.flags.contains(.extended) == event.isExtended
            guard !canonical || reencoded == frame else { return .failure(Violation("event re-encodes differently", frame)) }
            return .success(.decoded)
        case .ack:
            guard let entries = try? AckCodec.decode(frame) else { return .success(.refused) }
            guard frame.count == 4 + entries.count * AckEntry.size else {
                return .failure(Violation("ack entry count does not match the frame size", frame))
            }
            // Unknown reasons decode as `malformed`, so compare what survives a round trip.
            guard (try? AckCodec.decode(AckCodec.encode(entries))) == entries else {
                return .failure(Violation("ack entries do not survive a round trip", frame))
            }
            return .success(.decoded)
        case .errorReply:
            guard let reply = try? ErrorReply(decoding: frame) else { return .success(.refused) }
            guard (try? ErrorReply(decoding: reply.encoded())) == reply else {
                return .failure(Violation("error reply does not survive a round trip", frame))
            }
            return .success(.decoded)
        case .eventIDText:
            let text = String(decoding: frame, as: UTF8.self)
            guard let id = EventID(text) else { return .success(.refused) }
            guard EventID(id.description) == id else { return .failure(Violation("event id text does not round-trip", frame)) }
            return .success(.decoded)
        }
    }

    /// A broken decoder property, with the frame that shows it.
    struct Violation: Error, CustomStringConvertible {
        var what: String
        var frame: [UInt8]
        init(_ what: String, _ frame: [UInt8]) {
            self.what = what
            self.frame = frame
        }
        var description: String {
            "\(what): frame of \(frame.count) bytes " + frame.prefix(96).map { String($0, radix: 16) }.joined(separator: " ")
        }
    }
}
