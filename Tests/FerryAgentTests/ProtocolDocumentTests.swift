@testable import FerryFileSink
@testable import FerryAgent
import FerryIntegrationKit
@testable import FerryStorage
import FerryProtocol
import FerryTestKit
import Foundation
import Testing

/// docs/PROTOCOL.md names everything the code has: every ack status, reject reason, error code,
/// bus topic, control op and file sink key. The lists come from the code (the codecs' raw values,
/// `CaseIterable`, the control decoder, real output), so a case added without documenting it fails
/// here.
@Suite("PROTOCOL.md is complete")
struct ProtocolDocumentTests {
    static let document: String = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return (try? String(contentsOf: root.appendingPathComponent("docs/PROTOCOL.md"), encoding: .utf8)) ?? ""
    }()

    /// The text of the section under the heading `title` (up to the next heading of the same or a
    /// higher level).
    static func section(_ title: String) -> String {
        let lines = document.components(separatedBy: "\n")
        guard let start = lines.firstIndex(where: { $0.hasPrefix("#") && $0.hasSuffix(" " + title) }) else { return "" }
        let level = lines[start].prefix { $0 == "#" }.count
        let end = lines[(start + 1)...].firstIndex { line in
            let hashes = line.prefix { $0 == "#" }.count
            return hashes > 0 && hashes <= level && line.dropFirst(hashes).hasPrefix(" ")
        } ?? lines.endIndex
        return lines[start..<end].joined(separator: "\n")
    }

    /// Whether `text` has a table row `| code | name |`.
    static func hasRow(_ text: String, code: Int, name: String) -> Bool {
        text.range(of: #"(?m)^\|\s*\#(code)\s*\|\s*`?\#(NSRegularExpression.escapedPattern(for: name))`?\s*\|"#,
                   options: .regularExpression) != nil
    }

    @Test("the document is there and has the sections this test reads")
    func sections() {
        #expect(!Self.document.isEmpty)
        for title in ["Ack body", "Error body", "Event bus", "Control", "File sink lines"] {
            #expect(!Self.section(title).isEmpty, "no section \(title)")
        }
    }

    @Test("every ack status has its row: code and name")
    func statuses() {
        let statuses = (0...255).compactMap { EventStatus(rawValue: UInt8($0)) }
        #expect(statuses.count >= 5)
        for status in statuses {
            #expect(Self.hasRow(Self.section("Ack body"), code: Int(status.rawValue), name: status.description), "status \(status)")
        }
    }

    @Test("every reject reason has its row: code and name")
    func reasons() {
        let reasons = (0...255).compactMap { RejectReason(rawValue: UInt8($0)) }
        #expect(reasons.count >= 8)
        for reason in reasons {
            #expect(Self.hasRow(Self.section("Ack body"), code: Int(reason.rawValue), name: reason.description), "reason \(reason)")
        }
    }

    @Test("every error code has its row: code and name")
    func errorCodes() throws {
        // Decoded as the client decodes them: every code the codec knows.
        let codes = (0...Int(UInt16.max)).compactMap { raw -> ErrorCode? in
            try? ErrorReply(decoding: [UInt8(raw & 0xFF), UInt8(raw >> 8)]).code
        }
        #expect(codes.count >= 6)
        for code in codes {
            #expect(Self.hasRow(Self.section("Error body"), code: Int(code.rawValue), name: code.description), "error \(code)")
        }
    }

    @Test("every bus topic has its row in the topic table")
    func topics() {
        let bus = Self.section("Event bus")
        for topic in BusTopic.allCases {
            #expect(bus.range(of: #"(?m)^\| `\#(topic.rawValue)` \|"#, options: .regularExpression) != nil, "topic \(topic)")
        }
    }

    @Test("every bus topic is listed by ferry tail --help")
    func tailHelp() async throws {
        let help = try await runCLI(["tail", "--help"])
        #expect(help.status == .exited(0), "\(help)")
        let text = help.stdout.replacingOccurrences(of: "\n", with: " ")
        for topic in BusTopic.allCases {
            #expect(text.range(of: #"\b\#(topic.rawValue)\b"#, options: .regularExpression) != nil, "ferry tail --help lacks \(topic)")
        }
    }

    @Test("every control op the agent answers has its row, and the decoder knows each one")
    func controlOps() throws {
        let control = Self.section("Control")
        #expect(ControlRequest.ops.count >= 15)
        for op in ControlRequest.ops {
            #expect(control.range(of: #"(?m)^\| `\#(op)` \|"#, options: .regularExpression) != nil, "op \(op)")
            // The list is the decoder's: an op it lists is never refused as unknown.
            do {
                _ = try JSONDecoder().decode(ControlRequest.self, from: Data(#"{"op":"\#(op)"}"#.utf8))
            } catch let refusal as ControlRefusal {
                #expect(!refusal.message.contains("unknown op"), "\(op): \(refusal.message)")
            }
        }
        // And an op it does not list is refused, with the list as the valid values.
        #expect(throws: ControlRefusal.self) { try JSONDecoder().decode(ControlRequest.self, from: Data(#"{"op":"no_such_op"}"#.utf8)) }
    }

    @Test("every key of a file sink line is documented in \"File sink lines\"", arguments: FileSink.lineFormats)
    func fileSinkKeys(lineFormat: Int) async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        // An event with every optional field set, and an undecodable stored frame.
        let event = WireEvent(
            id: Events.ids.next(), timestamp: 1_700_000_000_000, sequence: 1, pid: 4242, type: .track, category: 2,
            flags: .localOnly, source: "app", name: "Signed Up", userID: "u-1", onceKey: "k-1",
            properties: Array(#"{"plan":"pro"}"#.utf8), session: Events.ids.next())
        let raw = WireEvent(id: Events.ids.next(), timestamp: 1, sequence: 2, pid: 1, type: .track, source: "app",
                            name: "Raw", properties: Array("[1]".utf8))
        let origin = EventOrigin(uid: 1000, gid: 1000, pid: 4242, comm: "app", exe: nil, unit: "app.service")
        var stored = FileSinkTests.stored([event, raw])
        stored[0].metadata = origin.metadata
        stored.append(StoredEvent(position: LogPosition(segment: 1, offset: 9000), size: 100, acceptedAt: 1, frame: Array(repeating: 7, count: 20)))
        let directory = scratch.appending("delivered")
        let sink = FileSink(directory: directory, lineFormat: lineFormat)
        _ = try await sink.recover(checkpoint: nil)
        let stamp = GDPRRecord().stamp.merging(["anonymous_id": "a-1", "consent_seq": "3"]) { $1 }
        _ = try await sink.deliver(DeliveryBatch(events: stored, consent: stamp))
        let lines = try sinkLines(directory)
        try #require(lines.count == 3)

        let documented = Self.section("File sink lines")
        var keys = Set<String>()
        for line in lines { keys.formUnion(line.keys) }
        for consent in lines.compactMap({ $0["consent"] as? [String: Any] }) { keys.formUnion(consent.keys) }
        for origin in lines.compactMap({ $0["origin"] as? [String: Any] }) { keys.formUnion(origin.keys) }
        #expect(keys.isSuperset(of: ["id", "session", "category", "user_id", "once_key", "local_only", "properties",
                                     "properties_raw", "origin", "consent", "consent_seq", "undecodable"]))
        for key in keys.sorted() {
            #expect(documented.contains("`\(key)`"), "file sink key \(key) (line format \(lineFormat))")
        }
    }
}
