#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Crypto
import FerryProtocol
import FerryStorage
import Foundation

/// The persisted part of the consent state (`<data>/consent/state.json`).
struct PersistedConsent: Codable, Hashable, Sendable {
    var version = 1
    var trackingEnabled: Bool
    var enabledFeatures: [String]
    var consent: [String: ConsentStatus]
    var persistence: ConsentStatus
    var gdpr: GDPRRecord
    /// Kept only while persistence consent is granted.
    var anonymousID: String?
    /// The audit entry this state reflects (0 = none) and its hash.
    var auditSeq: Int
    var auditHead: String

    private enum CodingKeys: String, CodingKey {
        case version, trackingEnabled = "tracking_enabled", enabledFeatures = "enabled_features", consent
        case persistence, gdpr, anonymousID = "anonymous_id", auditSeq = "audit_seq", auditHead = "audit_head"
    }
}

/// Who asked for a change, for the audit log.
public struct ConsentActor: Sendable, Hashable {
    /// The caller's uid, from the kernel (`SO_PEERCRED`) when known.
    public var uid: UInt32?
    /// The caller's pid, from the kernel when known.
    public var pid: Int32?
    /// The caller's process name (`/proc/<pid>/comm`).
    public var process: String?
    /// Free text the caller supplied (`actor` in the request), untrusted.
    public var actor: String?

    /// Creates an actor.
    public init(uid: UInt32? = nil, pid: Int32? = nil, process: String? = nil, actor: String? = nil) {
        self.uid = uid
        self.pid = pid
        self.process = process
        self.actor = actor
    }

    /// The agent itself (start-up, hold expiry).
    public static let agent = ConsentActor(uid: getuid(), pid: getpid(), process: "ferryd", actor: nil)
}

extension AuditEntry {
    /// The next entry of the audit chain: a change by `who` at `at` (wall-clock ms), chained to
    /// `prev`; its hash is computed.
    init(seq: Int, at: UInt64, who: ConsentActor, change: String, old: String, new: String, prev: String) {
        self.init(seq: seq, at: Int64(at), uid: who.uid.map { Int($0) }, pid: who.pid.map { Int($0) },
                  process: who.process, actor: who.actor, change: change, old: old, new: new, prev: prev, hash: "")
        hash = expectedHash
    }

    /// The hash this entry must carry: the SHA-256 (lower-case hex) of its ``hashedText``. Nothing
    /// secret goes through it; swift-crypto's SHA-256, as everywhere in Ferry.
    var expectedHash: String {
        let digits: StaticString = "0123456789abcdef"
        var text: [UInt8] = []
        text.reserveCapacity(64)
        for byte in SHA256.hash(data: hashedText) {
            text.append(digits.utf8Start[Int(byte >> 4)])
            text.append(digits.utf8Start[Int(byte & 0xF)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The entry's line in the audit log, newline included: the JSON object with its keys sorted,
    /// byte for byte as the agent has always written it (see ``FerryAgent/json(_:)``).
    var line: [UInt8] { FerryAgent.json(self) + [UInt8(ascii: "\n")] }
}

/// The consent audit log: an append-only file of JSON lines (`<data>/consent/audit.log`), each
/// carrying the SHA-256 of the previous one, so editing, removing or reordering a line breaks the
/// chain. The state file records the head, so cutting lines off the end is detected too. (It is
/// tamper-evident, not tamper-proof: someone who can rewrite both files can forge a new chain.)
struct AuditLog {
    let path: String

    /// The outcome of checking the chain.
    struct Verification: Sendable {
        var entries: [AuditEntry]
        /// The first problem found, or `nil` if the chain is intact.
        var problem: String?
        var head: String { entries.last?.hash ?? AuditEntry.genesis }
    }

    /// Reads and checks every line. `expectedHead` is the (seq, hash) recorded in the state file.
    func verify(expectedHead: (seq: Int, hash: String)? = nil) throws -> Verification {
        guard let bytes = try FileIO.readFile(path) else {
            if let head = expectedHead, head.seq > 0 {
                return Verification(entries: [], problem: "the audit log is missing but the state records \(head.seq) entries")
            }
            return Verification(entries: [], problem: nil)
        }
        var entries: [AuditEntry] = []
        var problem: String?
        var prev = AuditEntry.genesis
        for (number, line) in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true).enumerated() {
            guard let entry = try? JSONDecoder().decode(AuditEntry.self, from: Data(line)) else {
                problem = problem ?? "line \(number + 1) is not an audit entry"
                continue
            }
            if problem == nil {
                if entry.seq != number + 1 {
                    problem = "line \(number + 1) has sequence number \(entry.seq)"
                } else if entry.prev != prev {
                    problem = "line \(number + 1) does not chain to line \(number) (lines removed or reordered)"
                } else if entry.hash != entry.expectedHash {
                    problem = "line \(number + 1) was modified (its hash does not match its content)"
                }
            }
            prev = entry.hash
            entries.append(entry)
        }
        if problem == nil, let head = expectedHead, head.seq > entries.count {
            problem = "the audit log ends at entry \(entries.count) but the state records \(head.seq) (lines cut off)"
        } else if problem == nil, let head = expectedHead, head.seq > 0, head.seq <= entries.count,
                  entries[head.seq - 1].hash != head.hash {
            problem = "entry \(head.seq) does not match the head recorded in the state"
        }
        return Verification(entries: entries, problem: problem)
    }

    /// Appends an entry and `fdatasync`s it.
    func append(_ entry: AuditEntry) throws {
        try FileIO.appendDurably(entry.line, to: path)
    }

    /// Appends `entry` unless the log already ends with it (a change finished again after a
    /// crash appends its entry once). A torn last line (no newline: a write cut by a power
    /// failure) is cut off first. Returns whether it appended.
    @discardableResult
    func appendOnce(_ entry: AuditEntry) throws -> Bool {
        let line = entry.line
        let fd = try FileIO.open(path, O_RDWR | O_CREAT)
        defer { close(fd) }
        var size = try FileIO.fileSize(fd, path: path)
        // Only the tail matters: the last line, and at most one torn partial line after it.
        let window = min(size, Int64(2 * line.count + 4096))
        let tail = try FileIO.pread(fd, count: Int(window), at: size - window, path: path)
        if let last = tail.lastIndex(of: UInt8(ascii: "\n")) {
            let torn = tail.count - (last + 1)
            if torn > 0 {
                size -= Int64(torn)
                try FileIO.ftruncate(fd, size, path: path)
            }
            if tail[..<(last + 1)].suffix(line.count).elementsEqual(line) {
                if torn > 0 { try FileIO.fdatasync(fd, path: path) }
                return false
            }
        } else if window == size && size > 0 {
            // No complete line at all: the first entry's write was torn.
            size = 0
            try FileIO.ftruncate(fd, 0, path: path)
        }
        try line.withUnsafeBytes { try FileIO.pwriteAll(fd, $0, at: size, path: path) }
        try FileIO.fdatasync(fd, path: path)
        return true
    }
}

/// Reads and writes `state.json` atomically (temp file, fsync, rename, fsync of the directory).
struct ConsentStateFile {
    let path: String

    func load() throws -> PersistedConsent? {
        guard let bytes = try FileIO.readFile(path) else { return nil }
        do {
            return try JSONDecoder().decode(PersistedConsent.self, from: Data(bytes))
        } catch {
            throw AgentError(code: .corrupt, message: "consent state \(path) is unreadable: \(error)")
        }
    }

    func save(_ state: PersistedConsent) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        try FileIO.writeAtomically(Array(try encoder.encode(state)), to: path)
    }
}

/// The process name of `pid` (`/proc/<pid>/comm`), if readable.
func processName(of pid: Int32) -> String? {
    // procfs files report size 0: read them as a stream.
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8) else { return nil }
    let name = text.trimmingCharacters(in: .whitespacesAndNewlines)
    return name.isEmpty ? nil : name
}
