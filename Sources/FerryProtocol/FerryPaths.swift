#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where the agent's sockets and data live, by the same rules for the agent, the CLI and clients.
public enum FerryPaths {
    /// The runtime directory: `$FERRY_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/ferry`, else
    /// `/tmp/ferry-<uid>`. The agent creates it with mode 0700.
    public static func runtimeDirectory(environment: [String: String] = currentEnvironment()) -> String {
        if let explicit = environment["FERRY_RUNTIME_DIR"], !explicit.isEmpty { return explicit }
        if let xdg = environment["XDG_RUNTIME_DIR"], !xdg.isEmpty { return xdg + "/ferry" }
        return "/tmp/ferry-\(getuid())"
    }

    /// The default data directory: `$XDG_STATE_HOME/ferry`, else `$HOME/.local/state/ferry`.
    public static func dataDirectory(environment: [String: String] = currentEnvironment()) -> String {
        if let state = environment["XDG_STATE_HOME"], !state.isEmpty { return state + "/ferry" }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp/ferry-home-\(getuid())"
        return home + "/.local/state/ferry"
    }

    /// The system agent's runtime directory (`ferryd --system`).
    public static let systemRuntimeDirectory = "/run/ferry"
    /// The system agent's data directory (`ferryd --system`).
    public static let systemDataDirectory = "/var/lib/ferry"
    /// The lock file a running agent holds in its runtime directory.
    public static let lockFileName = "ferryd.lock"

    /// Whether an agent is running with `runtimeDirectory`: it holds the lock file there (socket
    /// files alone prove nothing: they survive a kill -9). A lock file the caller may not read
    /// (another user's per-user agent) counts as not running for this caller.
    public static func isAgentRunning(in runtimeDirectory: String) -> Bool {
        let fd = open(runtimeDirectory + "/" + lockFileName, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        // The agent holds an exclusive lock; a shared one can be had only if it is gone.
        if flock(fd, LOCK_SH | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return false
        }
        return errno == EWOULDBLOCK
    }

    /// The runtime directory of the agent a client or the CLI should talk to, decided once at
    /// start: `$FERRY_RUNTIME_DIR` if set; else the per-user agent's directory if that agent
    /// runs; else the system agent's (`/run/ferry`) if it runs; else the per-user directory
    /// (where a per-user agent started later will be found).
    public static func agentRuntimeDirectory(environment: [String: String] = currentEnvironment()) -> String {
        if let explicit = environment["FERRY_RUNTIME_DIR"], !explicit.isEmpty { return explicit }
        let personal = runtimeDirectory(environment: environment)
        if isAgentRunning(in: personal) { return personal }
        if isAgentRunning(in: systemRuntimeDirectory) { return systemRuntimeDirectory }
        return personal
    }

    /// The ingest (ROUTER) endpoint in `runtimeDirectory`.
    public static func ingestEndpoint(_ runtimeDirectory: String) -> String { "ipc://\(runtimeDirectory)/ingest" }
    /// The event bus (PUB) endpoint in `runtimeDirectory`.
    public static func eventsEndpoint(_ runtimeDirectory: String) -> String { "ipc://\(runtimeDirectory)/events" }
    /// The control (REP) endpoint in `runtimeDirectory`.
    public static func controlEndpoint(_ runtimeDirectory: String) -> String { "ipc://\(runtimeDirectory)/control" }

    /// The process environment as a dictionary.
    public static func currentEnvironment() -> [String: String] {
        var result: [String: String] = [:]
        var pointer = environ
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                result[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            pointer += 1
        }
        return result
    }
}
