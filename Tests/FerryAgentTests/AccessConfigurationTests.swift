@testable import FerryAgent
import FerryPeer
import FerryProtocol
import FerryStorage
import FerryTestKit
import Foundation
import ZeroMQ
import Testing

@Suite("Mode and access policy in the configuration file")
struct AccessConfigurationTests {
    @Test("system mode picks /run/ferry, /var/lib/ferry and its access defaults; per-user mode its own")
    func modeDefaults() throws {
        let system = try ConfigurationTests.load(#"{"mode": "system"}"#)
        #expect(system.mode == .system)
        #expect(system.runtimeDirectory == FerryPaths.systemRuntimeDirectory)
        #expect(system.dataDirectory == FerryPaths.systemDataDirectory)
        #expect(system.access == AccessPolicy.defaults(for: .system))
        #expect(system.access.ingest.isEveryone && system.access.control.groups == ["ferry-admin"])
        let user = try ConfigurationTests.load("{}")
        #expect(user.mode == .user && user.access == AccessPolicy.defaults(for: .user))
        // Directories given in the file win over the mode's.
        let placed = try ConfigurationTests.load(#"{"mode": "system", "runtimeDirectory": "/tmp/fa-rt", "dataDirectory": "/tmp/fa-d"}"#)
        #expect(placed.runtimeDirectory == "/tmp/fa-rt" && placed.dataDirectory == "/tmp/fa-d")
    }

    @Test("a refusal names the peer's pid only when the kernel gave one: a TCP peer's is unknown, not \"pid 0\"")
    func refusalLeavesOutAnUnknownPID() {
        var policy = AccessPolicy.defaults(for: .system)
        policy.ingest = AccessPolicy.Rule(users: ["root"])
        let access = AccessControl(policy: policy, logger: quietLogger)
        let tcp = access.refusal(.ingest, PeerCredentials(pid: 0, uid: 4_000_123, gid: 4_000_124))
        #expect(tcp.contains("uid 4000123 (gid 4000124) may not send events"), "\(tcp)")
        #expect(!tcp.contains("pid "), "\(tcp)")
        let unix = access.refusal(.ingest, PeerCredentials(pid: 77, uid: 4_000_123, gid: 4_000_124))
        #expect(unix.contains("uid 4000123 (gid 4000124, pid 77) may not send events"), "\(unix)")
    }

    @Test("a scope given replaces the mode's default rule entirely; others keep theirs")
    func scopesReplace() throws {
        let config = try ConfigurationTests.load(#"{"mode": "system", "access": {"ingest": {"groups": ["apps"]}, "control": {"users": ["root", "1001"]}}}"#)
        #expect(config.access.ingest == AccessPolicy.Rule(groups: ["apps"]))
        #expect(!config.access.ingest.isEveryone)
        #expect(config.access.control == AccessPolicy.Rule(users: ["root", "1001"]))
        #expect(config.access.events == AccessPolicy.defaults(for: .system).events)
    }

    @Test("mistakes are errors naming the key", arguments: [
        (#"{"mode": "host"}"#, "mode"),
        (#"{"access": {"ingest": {"user": ["x"]}}}"#, "access.ingest.user"),
        (#"{"access": {"ingest": ["x"]}}"#, "access.ingest"),
        (#"{"access": {"bus": {}}}"#, "access.bus"),
        (#"{"access": {"control": {"groups": [""]}}}"#, "access.control.groups"),
    ])
    func mistakes(json: String, key: String) throws {
        let error = try ConfigurationTests.error(json)
        #expect(error.message.contains(key), "\(error.message)")
    }

    @Test("the bus can be opened to everyone or one group, not to a list of users")
    func busRule() throws {
        #expect(try AccessControl.busGroup(.everyone) == .everyone)
        #expect(try AccessControl.busGroup(AccessPolicy.Rule(users: ["root"])) == .owner)
        #expect(try AccessControl.busGroup(AccessPolicy.Rule(groups: ["0"])) == .group(0))
        #expect(throws: AgentError.self) { try AccessControl.busGroup(AccessPolicy.Rule(groups: ["a", "b"])) }
        #expect(throws: AgentError.self) { try AccessControl.busGroup(AccessPolicy.Rule(users: ["nobody-here-\(UInt32.random(in: 0...999_999))"])) }
    }

    @Test("origin: systemd units from cgroup v1 and v2, the effective uid from status")
    func originParsing() {
        #expect(OriginResolver.systemdUnit(inCgroup: "0::/system.slice/nginx.service\n") == "nginx.service")
        #expect(OriginResolver.systemdUnit(inCgroup: "0::/user.slice/user-1000.slice/user@1000.service/app.slice/foo.service\n") == "foo.service")
        #expect(OriginResolver.systemdUnit(inCgroup: "0::/user.slice/user-1000.slice/session-3.scope\n") == "session-3.scope")
        #expect(OriginResolver.systemdUnit(inCgroup: "12:cpu,cpuacct:/\n1:name=systemd:/system.slice/cron.service\n") == "cron.service")
        #expect(OriginResolver.systemdUnit(inCgroup: "0::/\n") == nil)
        #expect(OriginResolver.systemdUnit(inCgroup: "0::/docker/abc123\n") == nil)
        #expect(OriginResolver.effectiveUID(inStatus: "Name:\tx\nUid:\t1000\t1001\t1001\t1001\nGid:\t1\t1\t1\t1\n") == 1001)
        let me = OriginResolver.origin(of: .init(pid: getpid(), uid: geteuid(), gid: getegid()))
        #expect(me.comm != nil && me.exe != nil && me.uid == geteuid())
        // Credentials that do not match the process: nothing but the credentials is said.
        let stranger = OriginResolver.origin(of: .init(pid: getpid(), uid: geteuid() &+ 4242, gid: 0))
        #expect(stranger.comm == nil && stranger.exe == nil && stranger.unit == nil && stranger.pid == UInt32(getpid()))
    }
}
