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
