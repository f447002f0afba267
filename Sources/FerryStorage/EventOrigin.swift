import FerryProtocol

/// Who sent an event, as the agent read it from the kernel — never as the client claimed it
/// (journald's `_UID`, `_GID`, `_PID`, `_COMM`, `_EXE`, `_SYSTEMD_UNIT`).
///
/// Stored in the record's ``RecordMetadata`` (tags 1–6). A field the kernel could no longer tell
/// (the sender exited or its pid was reused before intake, `exe` unreadable without privileges,
/// no systemd unit) is `nil` and written as JSON `null`, never guessed.
public struct EventOrigin: Sendable, Hashable {
    /// The sender's effective uid, from `SO_PEERCRED` of its connection.
    public var uid: UInt32?
    /// The sender's effective gid, from `SO_PEERCRED`.
    public var gid: UInt32?
    /// The sender's pid, from `SO_PEERCRED`.
    public var pid: UInt32?
    /// `/proc/<pid>/comm`.
    public var comm: String?
    /// The target of `/proc/<pid>/exe`.
    public var exe: String?
    /// The systemd unit of the process, from `/proc/<pid>/cgroup`.
    public var unit: String?

    /// Creates an origin.
    public init(uid: UInt32? = nil, gid: UInt32? = nil, pid: UInt32? = nil, comm: String? = nil, exe: String? = nil,
                unit: String? = nil) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.comm = comm
        self.exe = exe
        self.unit = unit
    }

    /// The metadata tags of the origin fields.
    public enum Tag {
        public static let uid: UInt8 = 1
        public static let gid: UInt8 = 2
        public static let pid: UInt8 = 3
        public static let comm: UInt8 = 4
        public static let exe: UInt8 = 5
        public static let unit: UInt8 = 6
    }

    /// The origin recorded in `metadata`; `nil` when it has none (data format 1, or an event the
    /// agent made itself).
    public init?(metadata: RecordMetadata) {
        func number(_ tag: UInt8) -> UInt32? {
            guard let value = metadata[tag], value.count == 4 else { return nil }
            return readLE(value, at: 0, as: UInt32.self)
        }
        func text(_ tag: UInt8) -> String? { metadata[tag].map { String(decoding: $0, as: UTF8.self) } }
        guard metadata.fields.contains(where: { (Tag.uid...Tag.unit).contains($0.tag) }) else { return nil }
        self.init(uid: number(Tag.uid), gid: number(Tag.gid), pid: number(Tag.pid), comm: text(Tag.comm),
                  exe: text(Tag.exe), unit: text(Tag.unit))
    }

    /// The origin as metadata fields (absent fields are left out; text is cut at 4096 bytes).
    public var metadata: RecordMetadata {
        var fields: [RecordMetadata.Field] = []
        func number(_ tag: UInt8, _ value: UInt32?) {
            guard let value else { return }
            var bytes: [UInt8] = []
            appendLE(value, to: &bytes)
            fields.append(.init(tag: tag, value: bytes))
        }
        func text(_ tag: UInt8, _ value: String?) {
            guard let value else { return }
            fields.append(.init(tag: tag, value: Array(value.utf8.prefix(4096))))
        }
        number(Tag.uid, uid)
        number(Tag.gid, gid)
        number(Tag.pid, pid)
        text(Tag.comm, comm)
        text(Tag.exe, exe)
        text(Tag.unit, unit)
        return RecordMetadata(fields: fields)
    }
}

extension JSONWriter {
    /// `{"uid":…,"gid":…,"pid":…,"comm":…,"exe":…,"unit":…}`, `null` for unknown fields.
    package static func originObject(_ origin: EventOrigin) -> [UInt8] {
        var json = JSONWriter()
        func number(_ name: StaticString, _ value: UInt32?) {
            if let value { json.field(name, UInt64(value)) } else { json.rawField(name, Array("null".utf8)) }
        }
        func text(_ name: StaticString, _ value: String?) {
            if let value { json.field(name, value) } else { json.rawField(name, Array("null".utf8)) }
        }
        number("uid", origin.uid)
        number("gid", origin.gid)
        number("pid", origin.pid)
        text("comm", origin.comm)
        text("exe", origin.exe)
        text("unit", origin.unit)
        return json.finish()
    }
}
