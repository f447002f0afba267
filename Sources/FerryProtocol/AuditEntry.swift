/// One entry of the consent audit log: who changed what, when, chained by SHA-256 to the previous
/// entry. The agent writes it as one line of `<data>/consent/audit.log` and serves it in the
/// `consent_log` reply (``ConsentAuditLog``); the client reads it from there.
///
/// On the wire and on disk it is a JSON object with `seq`, `at`, `change`, `old`, `new`, `prev`,
/// `hash` and, when known, `uid`, `pid`, `process` and `actor`.
public struct AuditEntry: Sendable, Hashable, Codable {
    /// Position in the log, from 1.
    public var seq: Int
    /// When, in Unix milliseconds (agent clock).
    public var at: Int64
    /// The caller's uid (from the socket), when known.
    public var uid: Int?
    /// The caller's pid, when known.
    public var pid: Int?
    /// The caller's process name, when known.
    public var process: String?
    /// The `actor` text the caller supplied, if any (untrusted).
    public var actor: String?
    /// What changed: `tracking`, `consent.<category>`, `consent` (all categories), `features`,
    /// `gdpr`, `persistence`, `purge`, `forget`, `start`.
    public var change: String
    /// The value before the change, as JSON text (`"\"granted\""`, `"true"`, …).
    public var old: String
    /// The value after the change, as JSON text.
    public var new: String
    /// The previous entry's hash (hex; 64 zeros for the first).
    public var prev: String
    /// This entry's SHA-256 (hex) over its fields and ``prev``.
    public var hash: String

    /// Creates an entry with the given hash (as read from a log or a reply).
    public init(
        seq: Int, at: Int64, uid: Int? = nil, pid: Int? = nil, process: String? = nil, actor: String? = nil,
        change: String, old: String, new: String, prev: String, hash: String
    ) {
        self.seq = seq
        self.at = at
        self.uid = uid
        self.pid = pid
        self.process = process
        self.actor = actor
        self.change = change
        self.old = old
        self.new = new
        self.prev = prev
        self.hash = hash
    }

    /// The `prev` of the first entry: 64 zeros.
    package static let genesis = String(repeating: "0", count: 64)

    /// What this entry's hash is computed over: its fields joined by U+001F, absent fields as
    /// empty text (the agent hashes it with SHA-256 and verifies the chain: FerryAgent's
    /// `AuditLog`).
    package var hashedText: [UInt8] {
        let fields = [
            String(seq), String(at), uid.map { String($0) } ?? "", pid.map { String($0) } ?? "",
            process ?? "", actor ?? "", change, old, new, prev,
        ]
        return Array(fields.joined(separator: "\u{1F}").utf8)
    }

    private enum CodingKeys: String, CodingKey {
        case seq, at, uid, pid, process, actor, change, old, new, prev, hash
    }

    /// Decodes an entry as the agent has always read audit lines: `seq`, `at`, `change`, `old`,
    /// `new`, `prev` and `hash` are required; a negative `at` reads as 0; `uid` and `pid` are
    /// taken modulo 2³² (as the agent's unsigned and signed 32-bit ids); an optional field of the
    /// wrong type reads as absent.
    public init(from decoder: any Decoder) throws {
        let object = try decoder.container(keyedBy: CodingKeys.self)
        seq = try object.decode(Int.self, forKey: .seq)
        at = max(0, try object.decode(Int64.self, forKey: .at))
        uid = (try? object.decodeIfPresent(Int.self, forKey: .uid)).map { Int(UInt32(truncatingIfNeeded: $0)) }
        pid = (try? object.decodeIfPresent(Int.self, forKey: .pid)).map { Int(Int32(truncatingIfNeeded: $0)) }
        process = try? object.decodeIfPresent(String.self, forKey: .process)
        actor = try? object.decodeIfPresent(String.self, forKey: .actor)
        change = try object.decode(String.self, forKey: .change)
        old = try object.decode(String.self, forKey: .old)
        new = try object.decode(String.self, forKey: .new)
        prev = try object.decode(String.self, forKey: .prev)
        hash = try object.decode(String.self, forKey: .hash)
    }

    /// Encodes the entry; absent optional fields are left out.
    public func encode(to encoder: any Encoder) throws {
        var object = encoder.container(keyedBy: CodingKeys.self)
        try object.encode(seq, forKey: .seq)
        try object.encode(at, forKey: .at)
        try object.encodeIfPresent(uid, forKey: .uid)
        try object.encodeIfPresent(pid, forKey: .pid)
        try object.encodeIfPresent(process, forKey: .process)
        try object.encodeIfPresent(actor, forKey: .actor)
        try object.encode(change, forKey: .change)
        try object.encode(old, forKey: .old)
        try object.encode(new, forKey: .new)
        try object.encode(prev, forKey: .prev)
        try object.encode(hash, forKey: .hash)
    }
}
