#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryPeer
import FerryProtocol
import FerryThreads
import Logging
import Synchronization

/// The agent's access policy, resolved against the user and group databases, and the checks the
/// socket threads make against the kernel's credentials of each connection.
///
/// Name lookups (NSS: files, LDAP, …) may block, so they never run on a socket thread: the policy
/// is resolved into sets of uids and gids at start, on reload and every ``refreshInterval`` by a
/// thread of its own; a check is then two set lookups under an uncontended lock. Group membership
/// is the group database's (primary group from the connection, supplementary groups from the
/// database's member lists), so a user added to a group is let in within ``refreshInterval`` or at
/// the next reload.
final class AccessControl: Sendable {
    /// What a peer wants to do.
    enum Scope: String, Sendable, CaseIterable {
        case ingest, control, events
    }

    /// A rule as sets of ids.
    struct Resolved: Sendable, Hashable {
        var everyone: Bool
        var uids: Set<UInt32>
        var gids: Set<UInt32>
        /// Users listed as members of an allowed group (supplementary membership).
        var memberUIDs: Set<UInt32>
        /// The rule as configured, for refusal messages.
        var text: String

        func allows(uid: UInt32, gid: UInt32) -> Bool {
            everyone || uids.contains(uid) || gids.contains(gid) || memberUIDs.contains(uid)
        }
    }

    /// How often group membership is looked up again.
    static let refreshInterval: Duration = .seconds(60)

    private let policy: Mutex<AccessPolicy>
    private let resolved: Mutex<[Scope: Resolved]>
    private let logger: Logger
    private let inbox = ThreadInbox<Void>()
    private let thread = Mutex<DedicatedThread?>(nil)
    /// Root and the agent's own user are always allowed.
    private let alwaysAllowed: Set<UInt32> = [0, getuid()]

    /// Resolves `policy` (on the caller's thread: call it off the socket threads).
    init(policy: AccessPolicy, logger: Logger) {
        self.policy = Mutex(policy)
        self.logger = logger
        resolved = Mutex(Self.resolve(policy, logger: logger))
    }

    /// Replaces the policy (a configuration reload) and resolves it.
    func update(_ newPolicy: AccessPolicy) {
        policy.withLock { $0 = newPolicy }
        refresh()
    }

    /// Looks up the names again (group membership may have changed).
    func refresh() {
        let current = policy.withLock { $0 }
        let fresh = Self.resolve(current, logger: logger)
        resolved.withLock { $0 = fresh }
    }

    /// Starts the thread that refreshes the resolution every ``refreshInterval``.
    func startRefreshing() {
        let dedicated = DedicatedThread(name: "ferry-access") { [self] in
            while inbox.takeAll(timeout: Self.refreshInterval) != nil { refresh() }
        }
        thread.withLock { $0 = dedicated }
    }

    /// Stops the refresh thread.
    func stop() async {
        inbox.close()
        if let thread = thread.withLock({ $0 }) { await thread.joinAsync() }
    }

    /// Whether `peer` may use `scope`. A peer without credentials (not an IPC connection) is
    /// allowed only where every user is.
    func allows(_ scope: Scope, _ peer: PeerCredentials?) -> Bool {
        let rule = resolved.withLock { $0[scope] }
        guard let rule else { return false }
        if rule.everyone { return true }
        guard let peer else { return false }
        return alwaysAllowed.contains(peer.uid) || rule.allows(uid: peer.uid, gid: peer.gid)
    }

    /// Why `peer` may not use `scope`, for the refusal it gets.
    func refusal(_ scope: Scope, _ peer: PeerCredentials?) -> String {
        let rule = resolved.withLock { $0[scope]?.text } ?? "nobody"
        // A pid the kernel did not give (a TCP peer's) is left out, not shown as 0.
        let who = peer.map { peer in
            "uid \(peer.uid) (gid \(peer.gid)" + (peer.knownPID.map { ", pid \($0))" } ?? ")")
        } ?? "a peer without kernel credentials"
        let what = switch scope {
        case .ingest: "send events"
        case .control: "make this request"
        case .events: "subscribe to the event bus"
        }
        return "access denied: \(who) may not \(what); the agent's \"access.\(scope.rawValue)\" policy allows \(rule) (root and the agent's user always)"
    }

    /// What `peer` may do, for the `whoami` control op.
    func rights(of peer: PeerCredentials?) -> [Scope: Bool] {
        Dictionary(uniqueKeysWithValues: Scope.allCases.map { ($0, allows($0, peer)) })
    }

    /// Who the bus socket file is opened to.
    enum BusAccess: Equatable {
        case everyone
        case group(gid_t)
        case owner
    }

    /// The bus promises no reply, so the kernel guards it: the `events` socket file's group and
    /// mode. That can express every user, one group, or root and the agent's user; a policy
    /// naming more is a configuration error.
    static func busGroup(_ rule: AccessPolicy.Rule) throws -> BusAccess {
        if rule.isEveryone { return .everyone }
        try checkBusRule(rule)
        guard let group = rule.groups.first else { return .owner }
        guard let gid = UInt32(group) ?? groupEntry(named: group)?.gid else {
            throw AgentError(code: .configuration, message: "access.events names group \"\(group)\", which does not exist "
                + "(scripts/install creates \(AccessPolicy.adminGroup))")
        }
        return .group(gid)
    }

    /// Refuses an `access.events` rule the socket file cannot express: more than one group, or a
    /// user other than root and the agent's own. Looks nothing up but the agent's uid, so
    /// `ferryd validate --system` refuses what the start would.
    static func checkBusRule(_ rule: AccessPolicy.Rule) throws {
        if rule.isEveryone { return }
        let others = rule.users.filter { $0 != "root" && $0 != "0" && UInt32($0) != getuid() && userID(named: $0) != getuid() }
        guard others.isEmpty, rule.groups.count <= 1 else {
            throw AgentError(code: .configuration, message: "access.events can name every user (\"*\"), or one group: "
                + "the bus is guarded by its socket file's group, which is one group (got \(rule))")
        }
    }

    // MARK: Resolution

    private static func resolve(_ policy: AccessPolicy, logger: Logger) -> [Scope: Resolved] {
        [
            .ingest: resolve(policy.ingest, scope: .ingest, logger: logger),
            .control: resolve(policy.control, scope: .control, logger: logger),
            .events: resolve(policy.events, scope: .events, logger: logger),
        ]
    }

    private static func resolve(_ rule: AccessPolicy.Rule, scope: Scope, logger: Logger) -> Resolved {
        var resolved = Resolved(everyone: rule.isEveryone, uids: [], gids: [], memberUIDs: [], text: rule.description)
        for user in rule.users where user != "*" {
            if let uid = UInt32(user) ?? userID(named: user) {
                resolved.uids.insert(uid)
            } else {
                logger.warning("access policy names an unknown user; it matches nobody", metadata: [
                    "scope": "\(scope.rawValue)", "user": "\(user)",
                ])
            }
        }
        for group in rule.groups {
            guard let entry = UInt32(group).flatMap(groupEntry(id:)) ?? groupEntry(named: group) else {
                if let gid = UInt32(group) {
                    resolved.gids.insert(gid)
                } else {
                    logger.warning("access policy names an unknown group; it matches nobody", metadata: [
                        "scope": "\(scope.rawValue)", "group": "\(group)",
                    ])
                }
                continue
            }
            resolved.gids.insert(entry.gid)
            for member in entry.members {
                if let uid = userID(named: member) { resolved.memberUIDs.insert(uid) }
            }
        }
        return resolved
    }

    private static func userID(named name: String) -> UInt32? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16 << 10)
        guard getpwnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.pw_uid
    }

    private static func groupEntry(named name: String) -> (gid: UInt32, members: [String])? {
        var entry = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 64 << 10)
        guard getgrnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return (entry.gr_gid, members(of: entry))
    }

    private static func groupEntry(id: UInt32) -> (gid: UInt32, members: [String])? {
        var entry = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 64 << 10)
        guard getgrgid_r(id, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return (entry.gr_gid, members(of: entry))
    }

    private static func members(of entry: group) -> [String] {
        var names: [String] = []
        guard var cursor = entry.gr_mem else { return names }
        while let member = cursor.pointee {
            names.append(String(cString: member))
            cursor += 1
        }
        return names
    }
}
