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
        /// The JSON reader (``JSONTape``, the `context` field's check): its entry points agree,
        /// every string decodes to UTF-8, and what it reads, written out again, reads the same.
        case json = 5
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
        case .json:
            return json(frame)
        }
    }

    /// The JSON reader's properties on `bytes`.
    static func json(_ bytes: [UInt8]) -> Result<Outcome, Violation> {
        // Callers hand the reader valid UTF-8 only.
        guard bytes.withUnsafeBytes({ UTF8Validation.isValid($0) }) else { return .success(.refused) }
        let tape = try? JSONTape.parse(bytes)
        var tooDeep: [Range<Int>] = []
        let deepTape = try? JSONTape.parse(bytes, tooDeep: &tooDeep)
        let lent: [JSONNode]? = bytes.withUnsafeBytes { raw in JSONTape.withNodes(raw) { $0.map(Array.init) } }
        let object = bytes.withUnsafeBytes { JSONTape.isObject($0) }
        var newlines = false
        let objectWithNewlines = bytes.withUnsafeBytes { JSONTape.isObject($0, newlines: &newlines) }
        guard let tape else {
            guard lent == nil, !object, !objectWithNewlines else { return .failure(Violation("the reader's entry points disagree on a refusal", bytes)) }
            // Read past the depth limit, a refused document is either not JSON or too deep.
            if let deepTape, tooDeep.isEmpty || deepTape.nodes.isEmpty {
                return .failure(Violation("read past the depth limit, a refused document has nothing too deep", bytes))
            }
            return .success(.refused)
        }
        guard let lent, deepTape?.nodes.count == tape.nodes.count, tooDeep.isEmpty, same(lent, tape.nodes) else {
            return .failure(Violation("the reader's entry points disagree on an accepted document", bytes))
        }
        guard object == (tape.nodes[0].kind == .object), objectWithNewlines == object else {
            return .failure(Violation("isObject disagrees with the tape", bytes))
        }
        if object && newlines != (bytes.contains(0x0A) || bytes.contains(0x0D)) {
            return .failure(Violation("isObject reports newlines wrongly", bytes))
        }
        // Written out again (strings decoded and escaped anew, the rest as written), it reads the same.
        var written: [UInt8] = []
        var valid = true
        bytes.withUnsafeBytes { raw in
            for node in tape.nodes where node.kind == .string {
                valid = valid && JSONTape.decodedString(node, in: raw).withUnsafeBytes { UTF8Validation.isValid($0) }
            }
            var index = 0
            write(tape.nodes, &index, raw, into: &written)
        }
        guard valid else { return .failure(Violation("a string decodes to text that is not UTF-8", bytes)) }
        guard let again = try? JSONTape.parse(written), again.nodes.count == tape.nodes.count,
              zip(again.nodes, tape.nodes).allSatisfy({ $0.kind == $1.kind && $0.count == $1.count && $0.next == $1.next }) else {
            return .failure(Violation("the document written out again reads differently: \(String(decoding: written, as: UTF8.self))", bytes))
        }
        let sameValues = written.withUnsafeBytes { second in
            bytes.withUnsafeBytes { first in
                zip(again.nodes, tape.nodes).allSatisfy { node in
                    switch node.0.kind {
                    case .string: JSONTape.decodedString(node.0, in: second) == JSONTape.decodedString(node.1, in: first)
                    case .number: JSONTape.double(node.0, in: second).bitPattern == JSONTape.double(node.1, in: first).bitPattern
                    default: true
                    }
                }
            }
        }
        guard sameValues else { return .failure(Violation("the document written out again holds other values", bytes)) }
        return .success(.decoded)
    }

    private static func same(_ a: [JSONNode], _ b: [JSONNode]) -> Bool {
        a.count == b.count && zip(a, b).allSatisfy {
            $0.kind == $1.kind && $0.start == $1.start && $0.end == $1.end && $0.next == $1.next && $0.count == $1.count
                && $0.escaped == $1.escaped && $0.candidate == $1.candidate
        }
    }

    /// The value at `index` as compact JSON: strings decoded and escaped again, numbers as written.
    private static func write(_ nodes: [JSONNode], _ index: inout Int, _ bytes: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        let node = nodes[index]
        index += 1
        switch node.kind {
        case .object, .array:
            out.append(UInt8(ascii: node.kind == .object ? "{" : "["))
            for position in 0..<Int(node.count) {
                if position > 0 { out.append(UInt8(ascii: ",")) }
                if node.kind == .object {
                    write(nodes, &index, bytes, into: &out)
                    out.append(UInt8(ascii: ":"))
                }
                write(nodes, &index, bytes, into: &out)
            }
            out.append(UInt8(ascii: node.kind == .object ? "}" : "]"))
        case .string:
            JSONTape.decodedString(node, in: bytes).withUnsafeBytes { JSONText.appendString(utf8: $0, to: &out) }
        default:
            out.append(contentsOf: bytes[JSONTape.rawRange(node)])
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
