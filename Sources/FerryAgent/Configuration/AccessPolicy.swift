/// Who may use each of the agent's sockets, checked against the kernel's credentials of the
/// connection (never against what a client claims). See docs/PROTOCOL.md, "Access".
///
/// Each scope names users and groups (names, or numeric ids as text); `"*"` among the users means
/// every local user. Group membership counts supplementary groups, as the group database lists
/// them. Root and the agent's own user are always allowed. A scope left out of the configuration
/// gets the mode's default (``defaults(for:)``).
public struct AccessPolicy: Sendable, Hashable {
    /// One scope's rule.
    public struct Rule: Sendable, Hashable, CustomStringConvertible {
        /// User names or numeric uids; `"*"` allows every user.
        public var users: [String]
        /// Group names or numeric gids (primary or supplementary membership).
        public var groups: [String]

        /// Creates a rule.
        public init(users: [String] = [], groups: [String] = []) {
            self.users = users
            self.groups = groups
        }

        /// Every local user.
        public static let everyone = Rule(users: ["*"])
        /// Whether the rule lets every user in.
        public var isEveryone: Bool { users.contains("*") }

        public var description: String {
            if isEveryone { return "every user" }
            let users = users.isEmpty ? "" : "users " + users.joined(separator: ", ")
            let groups = groups.isEmpty ? "" : "groups " + groups.joined(separator: ", ")
            let parts = [users, groups].filter { !$0.isEmpty }
            return parts.isEmpty ? "root and the agent's user only" : parts.joined(separator: "; ")
        }
    }

    /// Sending events (the ingest socket).
    public var ingest: Rule
    /// Changing things over the control socket: consent, purge, forget, start, dead-letter replay,
    /// and reading the consent audit log. Read-only requests (`status`, `consent_state`,
    /// `whoami`) are allowed to every user who may use ``ingest`` too.
    public var control: Rule
    /// Subscribing to the event bus.
    public var events: Rule

    /// Creates a policy.
    public init(ingest: Rule, control: Rule, events: Rule) {
        self.ingest = ingest
        self.control = control
        self.events = events
    }

    /// The group the system-mode defaults give control and the bus to.
    public static let adminGroup = "ferry-admin"

    /// The defaults: a per-user agent serves its own user only (its runtime directory is private
    /// anyway); a system agent takes events from every local user and gives control and the bus
    /// to root and the `ferry-admin` group.
    public static func defaults(for mode: AgentConfiguration.Mode) -> AccessPolicy {
        switch mode {
        case .user:
            AccessPolicy(ingest: Rule(), control: Rule(), events: Rule())
        case .system:
            AccessPolicy(ingest: .everyone, control: Rule(groups: [adminGroup]), events: Rule(groups: [adminGroup]))
        }
    }
}
