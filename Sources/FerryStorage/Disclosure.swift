import FerryProtocol

/// What a sink's body tells the other side about the host and the emitting process, besides the
/// event as the app sent it, its ids, its timestamps and the consent stamp (which every body
/// carries). The configuration key `disclose` of every sink (docs/DELIVERY.md, "What leaves the
/// host").
public struct Disclosure: Sendable, Hashable, CustomStringConvertible {
    /// Whether the event's origin `{uid, gid, pid, comm, exe, unit}` (the sender as the kernel
    /// told the agent) is sent.
    public var origin: Bool
    /// Whether the emitting process's `pid`, its per-client sequence number `seq` and its client
    /// `session` are sent.
    public var process: Bool
    /// Top-level keys of the event's own `context` object removed before sending (sorted, each
    /// once), as Segment's destination filters drop fields.
    public var dropContext: [String]
    /// Whether an event with neither a user id nor an anonymous id goes out with the agent's own
    /// anonymous id (the consent stamp's `anonymous_id`) as its anonymous id, where the upstream
    /// needs one of the two (HTTP `segment`). On by default.
    public var anonymousID: Bool

    /// Everything: what the bodies of Ferry's own infrastructure (file sink, JetStream, HTTP
    /// `envelope`) carry by default.
    public static let all = Disclosure(origin: true, process: true)
    /// Nothing about the host or the process: the default of a body that goes to a third party
    /// (HTTP `segment`).
    public static let minimal = Disclosure(origin: false, process: false)

    /// Creates a disclosure; `dropContext` is sorted and made unique.
    public init(origin: Bool, process: Bool, dropContext: [String] = [], anonymousID: Bool = true) {
        self.origin = origin
        self.process = process
        self.dropContext = Array(Set(dropContext)).sorted()
        self.anonymousID = anonymousID
    }

    /// `origin=yes process=no dropContext=[ip, device]`, as `ferryd validate` prints it (and
    /// `anonymousId=no` when that is off).
    public var description: String {
        "origin=\(origin ? "yes" : "no") process=\(process ? "yes" : "no") dropContext=[\(dropContext.joined(separator: ", "))]"
            + (anonymousID ? "" : " anonymousId=no")
    }

    /// `context` (a JSON object) without the top-level members named in ``dropContext`` (every
    /// member of a repeated name); unchanged when it has none of them, is not an object, or
    /// nothing is to be dropped. The members kept are copied as written, in their order.
    package func filteredContext(_ context: [UInt8]) -> [UInt8] {
        guard !dropContext.isEmpty, !context.isEmpty else { return context }
        return context.withUnsafeBytes { bytes -> [UInt8] in
            JSONTape.withNodes(bytes) { nodes -> [UInt8] in
                guard let nodes, nodes[0].kind == .object else { return context }
                var out: [UInt8] = [UInt8(ascii: "{")]
                var dropped = false
                var child = 1
                for _ in 0..<Int(nodes[0].count) {
                    let key = nodes[child], value = nodes[child + 1]
                    if dropContext.contains(where: { JSONTape.nameEquals(key, $0, in: bytes) }) {
                        dropped = true
                    } else {
                        if out.count > 1 { out.append(UInt8(ascii: ",")) }
                        out.append(contentsOf: bytes[JSONTape.rawRange(key).lowerBound..<JSONTape.rawRange(value).upperBound])
                    }
                    child = Int(value.next)
                }
                out.append(UInt8(ascii: "}"))
                return dropped ? out : context
            }
        }
    }
}
