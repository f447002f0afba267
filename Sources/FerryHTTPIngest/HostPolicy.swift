/// Which `Host` and `Origin` headers a listener serves: the defence against DNS rebinding, a pure
/// function of the request's two headers (tested in `HostPolicyTests`).
///
/// A web page the host's user opens can make its own name resolve to 127.0.0.1 and then post to
/// the loopback listener "same-origin", reading the answers. Its requests still name the page's
/// host in `Host`, and a browser adds `Origin` to every POST: the TCP listener serves only its
/// own names (127.0.0.1, localhost, [::1], the host it listens on, `http.allowedHosts`), and
/// every listener refuses a request carrying an `Origin` that `http.allowedOrigins` does not
/// list. Server libraries send no `Origin` and a loopback `Host`; they are not affected.
///
/// The Unix socket does not check `Host`: no name resolution reaches it (a browser cannot
/// connect to it; curl sends `localhost`, other clients the socket's path), and who may connect
/// is its file mode and the kernel's credentials. It does check `Origin`, so a browser's request
/// forwarded to it by a local proxy is refused unless allowed.
package struct HostPolicy: Sendable, Equatable {
    /// The names served, lowercased, without a port (brackets kept for IPv6); nil: any `Host`.
    package var names: Set<String>?
    /// The origins allowed, lowercased, without a trailing `/`.
    package var origins: Set<String>

    /// The names every TCP listener serves.
    package static let loopbackNames: Set<String> = ["127.0.0.1", "localhost", "[::1]"]

    /// The policy of a TCP listener on `listenHost` (the host of `http.listen`): its own names,
    /// the loopback names and `allowedHosts`; `allowedOrigins` may send from a web page.
    package static func tcp(listenHost: String, allowedHosts: [String], allowedOrigins: [String]) -> HostPolicy {
        var names = loopbackNames
        let own = listenHost.contains(":") && !listenHost.hasPrefix("[") ? "[\(listenHost)]" : listenHost
        // A wildcard address is no name of the listener: the operator lists the names it answers to.
        if own != "0.0.0.0" && own != "[::]" { names.insert(normalizedHost(own)) }
        for host in allowedHosts { names.insert(normalizedHost(host)) }
        return HostPolicy(names: names, origins: Set(allowedOrigins.map(normalizedOrigin)))
    }

    /// The policy of the Unix socket: any `Host`; `allowedOrigins` may send from a web page.
    package static func unix(allowedOrigins: [String]) -> HostPolicy {
        HostPolicy(names: nil, origins: Set(allowedOrigins.map(normalizedOrigin)))
    }

    /// Why a request with these `Host` and `Origin` headers (nil: absent) arriving on local port
    /// `port` is refused, or nil when it may go on. A `Host` may name the port (it must then be
    /// the listener's); a request without `Host` (HTTP/1.0, no browser sends one) is served.
    package func refusal(host: String?, origin: String?, port: Int?) -> IngestRefusal? {
        if let names, let host {
            let (name, hostPort) = Self.split(host)
            let portMatches = hostPort.map { given in port.map { String($0) == given } ?? false } ?? true
            guard names.contains(Self.normalizedHost(name)), portMatches else {
                return IngestRefusal(421, "host_not_allowed",
                                     "Host \"\(host.prefix(255))\" is not a name of this listener (127.0.0.1, localhost, [::1] or one of http.allowedHosts)")
            }
        }
        if let origin, !origins.contains(Self.normalizedOrigin(origin)) {
            return IngestRefusal(403, "origin_not_allowed",
                                 "requests from web pages are refused (Origin \"\(origin.prefix(255))\"); list the origin in http.allowedOrigins to allow it")
        }
        return nil
    }

    /// `host` split into its name and its port text (nil when none).
    static func split(_ host: String) -> (name: Substring, port: Substring?) {
        let text = Substring(host.trimmingSpaces)
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return (text, nil) }
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { return (text[...close], rest.isEmpty ? nil : rest) }
            return (text[...close], rest.dropFirst())
        }
        guard let colon = text.lastIndex(of: ":") else { return (text, nil) }
        return (text[..<colon], text[text.index(after: colon)...])
    }

    /// A host name compared case-insensitively, a trailing dot (the fully qualified spelling) dropped.
    static func normalizedHost<S: StringProtocol>(_ name: S) -> String {
        var lowered = name.lowercased()
        if lowered.hasSuffix("."), lowered.count > 1 { lowered.removeLast() }
        return lowered
    }

    /// An origin compared case-insensitively, a trailing `/` dropped.
    static func normalizedOrigin(_ origin: String) -> String {
        var lowered = origin.trimmingSpaces.lowercased()
        while lowered.hasSuffix("/") { lowered.removeLast() }
        return lowered
    }
}
