@testable import FerryAgent
import FerryProtocol
import FerryTestKit
import Foundation
import Testing

/// The consent audit log's bytes on disk: written from FerryProtocol's ``AuditEntry``, they must
/// stay exactly what earlier versions wrote (a `JSONSerialization` object with sorted keys per
/// line), and the hash chain must verify.
@Suite("Consent audit log bytes")
struct AuditLogBytesTests {
    /// The lines earlier versions wrote for these two entries (taken from the previous
    /// implementation: `JSONSerialization.data(withJSONObject:options: [.sortedKeys])` of the
    /// entry's dictionary; hashes computed independently with Python's hashlib).
    static let golden = #"""
        {"actor":"settings-ui\/ops \u0001\t\"ß😀\#u{2028}","at":1700000000000,"change":"consent.analytics","hash":"78f0e5e1b7b6209497f5620f8fe6ffbbebee0d4690c5ea5f66bd2dec78411c6f","new":"\"granted\"","old":"\"undetermined\"","pid":4242,"prev":"0000000000000000000000000000000000000000000000000000000000000000","process":"ferry","seq":1,"uid":1000}
        {"at":1700000001500,"change":"purge","hash":"19fc64b87ddfdbef571ef545c43e503965c489124d08dcde955e8c4c1bc518ff","new":"{\"category\":\"*\"}","old":"null","pid":1,"prev":"78f0e5e1b7b6209497f5620f8fe6ffbbebee0d4690c5ea5f66bd2dec78411c6f","process":"ferryd","seq":2,"uid":0}

        """#

    @Test("appended entries are the same bytes as before, and the chain verifies against the recorded head")
    func bytesAndChain() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let log = AuditLog(path: dir.appending("audit.log"))
        let first = AuditEntry(seq: 1, at: UInt64(1_700_000_000_000),
                               who: ConsentActor(uid: 1000, pid: 4242, process: "ferry", actor: "settings-ui/ops \u{1}\t\"ß😀\u{2028}"),
                               change: "consent.analytics", old: #""undetermined""#, new: #""granted""#, prev: AuditEntry.genesis)
        let second = AuditEntry(seq: 2, at: UInt64(1_700_000_001_500), who: ConsentActor(uid: 0, pid: 1, process: "ferryd"),
                                change: "purge", old: "null", new: #"{"category":"*"}"#, prev: first.hash)
        try log.append(first)
        try log.append(second)
        let bytes = try #require(FileManager.default.contents(atPath: log.path))
        #expect(String(decoding: bytes, as: UTF8.self) == Self.golden)

        let verification = try log.verify(expectedHead: (2, second.hash))
        #expect(verification.problem == nil)
        #expect(verification.entries == [first, second])
        #expect(verification.head == second.hash)
    }

    @Test("an edited, a reordered and a cut log are each caught")
    func tampering() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.appending("audit.log")
        let lines = Self.golden.split(separator: "\n").map(String.init)
        let head = (seq: 2, hash: "19fc64b87ddfdbef571ef545c43e503965c489124d08dcde955e8c4c1bc518ff")

        try (lines[0].replacingOccurrences(of: #"\"granted\""#, with: #"\"denied\""#) + "\n" + lines[1] + "\n")
            .write(toFile: path, atomically: false, encoding: .utf8)
        #expect(try AuditLog(path: path).verify(expectedHead: head).problem == "line 1 was modified (its hash does not match its content)")

        try (lines[1] + "\n" + lines[0] + "\n").write(toFile: path, atomically: false, encoding: .utf8)
        #expect(try AuditLog(path: path).verify(expectedHead: head).problem == "line 1 has sequence number 2")

        try (lines[0] + "\n").write(toFile: path, atomically: false, encoding: .utf8)
        #expect(try AuditLog(path: path).verify(expectedHead: head).problem
            == "the audit log ends at entry 1 but the state records 2 (lines cut off)")

        try (lines[0] + "\nnot json\n").write(toFile: path, atomically: false, encoding: .utf8)
        #expect(try AuditLog(path: path).verify().problem == "line 2 is not an audit entry")
    }
}
