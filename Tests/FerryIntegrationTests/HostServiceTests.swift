#if canImport(Glibc)
import Glibc
#endif
import FerryIntegrationKit
import Foundation
import FerryProtocol
import FerryTestKit
import Testing

/// Issue 11, section 3: ferryd under a service manager (sd_notify over a real datagram socket,
/// SIGHUP reloads), `ferryd validate`, `--version`, and ferryd under the unit's hardening.
@Suite("ferryd as a host service")
struct HostServiceTests {
    /// ferryd with a configuration file, directories in `dir`, and `environment` added.
    private func startFerryd(in dir: TemporaryDirectory, config: String, environment: [String: String] = [:],
                             label: String = "ferryd") throws -> ChildProcess {
        let path = dir.appending("ferryd.json")
        try Data(config.utf8).write(to: URL(fileURLWithPath: path))
        return try ChildProcess(
            executable: try FerryBinaries.ferryd(),
            arguments: ["--config", path, "--data-dir", dir.appending("data"), "--runtime-dir", dir.appending("rt")],
            environment: environment, outputDirectory: dir.path, label: label)
    }

    private func rewrite(_ dir: TemporaryDirectory, _ config: String) throws {
        try Data(config.utf8).write(to: URL(fileURLWithPath: dir.appending("ferryd.json")))
    }

    @Test("READY=1 after recovery with the ingest socket bound, WATCHDOG=1, RELOADING=1/READY=1 on SIGHUP, STOPPING=1 on SIGTERM")
    func notifySequence() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let notify = try NotifySocket(path: dir.appending("notify"))
        defer { notify.close() }
        let ferryd = try startFerryd(in: dir, config: #"{"logLevel": "info"}"#,
                                     environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000"])
        defer { ferryd.cleanup() }

        let first = try await notify.next(timeout: .seconds(30))
        #expect(first == "READY=1\nSTATUS=serving", "\(ferryd.standardError)")
        // At READY=1 the log is recovered and the ingest socket is bound and served.
        var st = stat()
        #expect(lstat(dir.appending("rt/ingest"), &st) == 0 && st.st_mode & S_IFMT == S_IFSOCK)
        #expect(ferryd.standardError.contains("recovered the queue"))
        let emit = try await runCLI(["emit", "ready", "--wait"], environment: ["FERRY_RUNTIME_DIR": dir.appending("rt")])
        #expect(emit.status == .exited(0), "\(emit)")

        // The watchdog: WATCHDOG_USEC is 400 ms, pings every 200 ms.
        _ = try await notify.waitFor("WATCHDOG=1", timeout: .seconds(10))
        _ = try await notify.waitFor("WATCHDOG=1", timeout: .seconds(10))

        try rewrite(dir, #"{"logLevel": "debug"}"#)
        ferryd.signal(SIGHUP)
        let reload: [String]
        do {
            reload = try await notify.waitFor("READY=1", timeout: .seconds(20)).filter { $0 != "WATCHDOG=1" }
        } catch {
            throw FerryTestKitError("\(error); ferryd \(ferryd.exitStatus.map { "exited \($0)" } ?? "runs"):\n\(ferryd.standardError)")
        }
        #expect(reload == ["RELOADING=1\nSTATUS=reloading", "READY=1\nSTATUS=serving"])
        try await eventually("the reload logged") { ferryd.standardError.contains("configuration reloaded") }
        #expect(ferryd.standardError.contains("changed=logLevel"), "\(ferryd.standardError)")

        ferryd.signal(SIGTERM)
        _ = try await notify.waitFor("STOPPING=1", timeout: .seconds(10))
        #expect(try await ferryd.waitForExit(timeout: .seconds(20)) == .exited(0))
        #expect(ferryd.standardError.contains("ferryd stopped"))
    }

    @Test("SIGHUP: a bad file and a restart-only change are refused with the old configuration kept; reloadable keys apply")
    func reloadRefusesAndApplies() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let ferryd = try startFerryd(in: dir, config: #"{"sinks": [{"name": "file", "type": "file", "retry": {"initialMilliseconds": 100}}]}"#)
        defer { ferryd.cleanup() }
        let runtime = dir.appending("rt")
        try await eventually("ferryd ready") { (try? await controlStatus(runtimeDirectory: runtime, timeout: .milliseconds(500)))?.ok == true }

        func hangUp(expecting line: String) async throws {
            ferryd.signal(SIGHUP)
            try await eventually("log line \"\(line)\"") { ferryd.standardError.contains(line) }
            #expect(ferryd.isRunning)
            #expect(try await controlStatus(runtimeDirectory: runtime).ok)
        }
        try rewrite(dir, #"{"sinks": [ not json"#)
        try await hangUp(expecting: "reload refused: the configuration is invalid; keeping the running one")
        try rewrite(dir, #"{"maxEventBytes": 1024, "log": {"segmentMaxBytes": 65536}}"#)
        try await hangUp(expecting: "reload refused: these keys need a restart: maxEventBytes, log; the running configuration is kept")
        try rewrite(dir, #"{"logLevel": "notice", "sinks": [{"name": "file", "type": "file", "retry": {"initialMilliseconds": 50}, "batch": {"maxEvents": 10}}]}"#)
        try await hangUp(expecting: "changed=logLevel,sinks[0].batch,sinks[0].retry")
        // Reloaded, not restarted: the same process, still accepting.
        let emit = try await runCLI(["emit", "after-reload", "--wait"], environment: ["FERRY_RUNTIME_DIR": runtime])
        #expect(emit.status == .exited(0), "\(emit)")
        ferryd.signal(SIGTERM)
        #expect(try await ferryd.waitForExit(timeout: .seconds(20)) == .exited(0))
    }

    @Test("ferryd validate: the summary for a valid file, every wrong key path for a bad one")
    func validate() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        for example in ["ferryd.example.json", "ferryd.consent-optin.example.json"] {
            let result = try await runProcess(try FerryBinaries.ferryd(), ["validate", "--config", repositoryRoot + "/daemon/" + example])
            #expect(result.status == .exited(0), "\(example): \(result)")
            #expect(result.stdout.contains("daemon/\(example): valid (ferryd \(FerryVersion.current))"), "\(result)")
        }
        // The examples that name a secret are refused where it is missing, as start refuses them
        // (issue 39: validate said "valid", start refused).
        for (example, file) in [("ferryd.http.example.json", "tokenFile /etc/ferry/collector.token"),
                                ("ferryd.segment.example.json", "writeKeyFile /etc/ferry/segment.key"),
                                ("ferryd.jetstream.example.json", "credentialsFile /etc/ferry/nats.creds")]
        where !FileManager.default.fileExists(atPath: String(file.split(separator: " ")[1])) {
            let result = try await runProcess(try FerryBinaries.ferryd(), ["validate", "--config", repositoryRoot + "/daemon/" + example])
            #expect(result.status == .exited(1) && result.stderr.contains("sinks[0]: sink "), "\(example): \(result)")
            #expect(result.stderr.contains("cannot read \(file)"), "\(example): \(result)")
        }
        let good = try await runProcess(try FerryBinaries.ferryd(), ["validate", "--config", repositoryRoot + "/daemon/ferryd.example.json"])
        #expect(good.stdout.contains("sinks: 1\n  file (file)"), "\(good)")
        #expect(good.stdout.contains("    sends: the event, ids, timestamps, consent stamp; origin: yes (default); process (pid, seq, session): yes (default); context keys dropped: none"), "\(good)")
        // A third party gets neither by default: the effective choice is printed per sink, with
        // what the sink does (its URL and format).
        let key = dir.appending("segment.key")
        try Data("wk-test\n".utf8).write(to: URL(fileURLWithPath: key))
        chmod(key, 0o600)
        let segmentConfig = dir.appending("segment.json")
        try Data(try String(contentsOfFile: repositoryRoot + "/daemon/ferryd.segment.example.json", encoding: .utf8)
            .replacingOccurrences(of: "/etc/ferry/segment.key", with: key).utf8).write(to: URL(fileURLWithPath: segmentConfig))
        let segment = try await runProcess(try FerryBinaries.ferryd(), ["validate", "--config", segmentConfig])
        #expect(segment.status == .exited(0), "\(segment)")
        #expect(segment.stdout.contains("origin: no (default); process (pid, seq, session): no (default)"), "\(segment)")
        #expect(segment.stdout.contains("url=https://api.segment.io/v1/batch format=segment gzip=true"), "\(segment)")
        #expect(good.stdout.contains("reloadable on SIGHUP: logLevel"), "\(good)")
        // What each sink receives: its consent requirement and route (docs/DELIVERY.md, "Routes and consent per sink").
        #expect(good.stdout.contains("    receives: requiresConsent: none; route: every event\n"), "\(good)")
        let routed = dir.appending("routed.json")
        try Data(#"""
            {"dataDirectory": "\#(dir.appending("data"))", "runtimeDirectory": "\#(dir.appending("rt"))",
             "sinks": [{"name": "ads", "type": "file", "requiresConsent": ["advertising"],
                        "route": {"include": {"types": ["track"], "names": ["Order *"]}, "exclude": {"sources": ["cli"]}}}]}
            """#.utf8).write(to: URL(fileURLWithPath: routed))
        let routedResult = try await runProcess(try FerryBinaries.ferryd(), ["validate", "--config", routed])
        #expect(routedResult.status == .exited(0), "\(routedResult)")
        #expect(routedResult.stdout.contains(#"    receives: requiresConsent: advertising; route: include types=track names="Order *"; exclude sources=cli"#),
                "\(routedResult)")
        let unknown = dir.appending("unknown-category.json")
        try Data(String(decoding: try Data(contentsOf: URL(fileURLWithPath: routed)), as: UTF8.self)
            .replacingOccurrences(of: #"["advertising"]"#, with: #"["adverts"]"#).utf8).write(to: URL(fileURLWithPath: unknown))
        let refused = try await runProcess(try FerryBinaries.ferryd(), ["validate", "--config", unknown])
        #expect(refused.status == .exited(1), "\(refused)")
        #expect(refused.stderr.contains(#"sinks[0]: sink "ads": requiresConsent: unknown category "adverts""#), "\(refused)")

        let bad = dir.appending("bad.json")
        try Data(#"""
            {"maxEventBytes": "big", "log": {"fullPolicy": "maybe", "bogus": 1},
             "sinks": [{"name": "a", "type": "nope"}, {"name": "b", "type": "file", "batch": {"maxEvents": true}}]}
            """#.utf8).write(to: URL(fileURLWithPath: bad))
        let result = try await runProcess(try FerryBinaries.ferryd(), ["validate", "--config", bad])
        #expect(result.status == .exited(1), "\(result)")
        for keyPath in ["log.bogus: unknown key", "log.fullPolicy: expected one of", "maxEventBytes: expected an integer",
                        "sinks[0].type: expected one of", "sinks[1].batch.maxEvents: expected an integer", "5 errors"] {
            #expect(result.stderr.contains(keyPath), "missing \(keyPath): \(result.stderr)")
        }
        #expect(result.stdout.isEmpty)
    }

    @Test("ferryd validate compiles the tracking plan and reads the key file as the agent would, and lists both; a plan that does not compile fails")
    func validateQuality() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let plan = dir.appending("plan.json"), key = dir.appending("redact.key"), config = dir.appending("ferryd.json")
        try Data(#"""
            {"events": [{"type": "track", "name": "Order Completed", "properties": {"type": "object", "required": ["total"],
              "properties": {"total": {"type": "number", "minimum": 0}}}}, {"type": "identify", "traits": {"type": "object"}}]}
            """#.utf8).write(to: URL(fileURLWithPath: plan))
        try Data(repeating: 0x6b, count: 32).write(to: URL(fileURLWithPath: key))
        chmod(key, 0o600)
        try Data("""
            {"quality": {"plan": "\(plan)", "onViolation": "quarantine"},
             "redact": {"keyFile": "\(key)", "rules": [{"path": "properties.email", "action": "hash"}], "detect": [{"kind": "card", "action": "mask"}]}}
            """.utf8).write(to: URL(fileURLWithPath: config))
        let good = try await runProcess(try FerryBinaries.ferryd(), ["validate", "--config", config])
        #expect(good.status == .exited(0), "\(good)")
        for line in ["quality: plan \(plan): 2 events, onViolation quarantine, allowUnplanned true",
                     "quality:   track Order Completed", "quality:   identify", "redact:   properties.email: hash", "redact:   detect card: mask"] {
            #expect(good.stdout.contains(line), "missing \(line): \(good.stdout)")
        }
        // A keyword the subset does not have: refused with the file, the path and the keyword.
        try Data(#"{"events": [{"type": "track", "name": "A", "properties": {"type": "object", "minProperties": 1}}]}"#.utf8)
            .write(to: URL(fileURLWithPath: plan))
        let bad = try await runProcess(try FerryBinaries.ferryd(), ["validate", "--config", config])
        #expect(bad.status == .exited(1), "\(bad)")
        #expect(bad.stderr.contains(plan) && bad.stderr.contains("minProperties"), "\(bad)")
        #expect(bad.stdout.isEmpty)
    }

    @Test("ferryd validate --system refuses an access.events the bus socket cannot express, as ferryd --system does at start", arguments: [
        #"{"access": {"events": {"groups": ["adm", "daemon"]}}}"#,
        #"{"access": {"events": {"users": ["nobody"]}}}"#,
    ])
    func validateSystemBusRule(config: String) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.appending("ferryd.json")
        try Data(config.utf8).write(to: URL(fileURLWithPath: path))
        let checked = try await runProcess(try FerryBinaries.ferryd(), ["validate", "--system", "--config", path])
        #expect(checked.status == .exited(1), "\(checked)")
        #expect(checked.stderr.contains("access.events can name every user"), "\(checked)")
        // The start refuses it with the same words (before anything is created).
        let started = try await runProcess(try FerryBinaries.ferryd(), [
            "--system", "--config", path, "--data-dir", dir.appending("data"), "--runtime-dir", dir.appending("rt"),
        ], timeout: .seconds(30))
        #expect(started.status != .exited(0), "\(started)")
        #expect(started.stderr.contains("access.events can name every user"), "\(started)")
        // As a per-user agent's file the rule is not used (its bus is 0600): valid.
        let user = try await runProcess(try FerryBinaries.ferryd(), ["validate", "--config", path])
        #expect(user.status == .exited(0), "\(user)")
    }

    @Test("--version on ferryd and ferry is FerryVersion.current")
    func version() async throws {
        for binary in [try FerryBinaries.ferryd(), try FerryBinaries.ferry()] {
            let result = try await runProcess(binary, ["--version"])
            #expect(result.status == .exited(0))
            #expect(result.stdout == FerryVersion.current + "\n", "\(binary): \(result)")
        }
    }

    @Test("ferryd runs under the unit's restrictions: another uid, no capabilities, no new privileges, read-only / (needs root)",
          .enabled(if: geteuid() == 0, "needs root for unshare, mount and setpriv"))
    func hardened() async throws {
        let user = try otherUser()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        #expect(chmod(dir.path, 0o755) == 0)
        let home = try dir.subdirectory("svc")
        #expect(chown(home, user.uid, user.gid) == 0)
        #expect(chmod(home, 0o700) == 0)
        let data = home + "/data", runtime = home + "/rt"
        // ProtectSystem=strict: / read-only but for the state directory (a bind mount of its own);
        // User=, CapabilityBoundingSet= and AmbientCapabilities= empty, NoNewPrivileges=yes.
        let script = """
            mount --bind "$1" "$1" && mount -o remount,bind,ro / || exit 97
            if touch /ferry-ro-probe 2>/dev/null; then rm -f /ferry-ro-probe; exit 98; fi
            shift
            exec setpriv --reuid=\(user.uid) --regid=\(user.gid) --clear-groups --no-new-privs \
                --inh-caps=-all --bounding-set=-all -- "$@"
            """
        let ferryd = try ChildProcess(
            executable: "/usr/bin/unshare",
            arguments: ["--mount", "--propagation", "private", "/bin/sh", "-c", script, "sh", home,
                        try FerryBinaries.ferryd(), "--data-dir", data, "--runtime-dir", runtime],
            outputDirectory: dir.path, label: "ferryd-hardened")
        defer { ferryd.cleanup() }
        try await eventually("hardened ferryd ready", timeout: .seconds(30)) {
            if let exit = ferryd.exitStatus { throw FerryTestKitError("exited \(exit): \(ferryd.standardError)") }
            return (try? await controlStatus(runtimeDirectory: runtime, timeout: .milliseconds(500)))?.ok == true
        }
        var st = stat()
        #expect(stat(data, &st) == 0 && st.st_uid == user.uid)
        let emit = try await runCLI(["emit", "hardened", "--wait"], environment: ["FERRY_RUNTIME_DIR": runtime])
        #expect(emit.status == .exited(0), "\(emit)")
        try await eventually("delivered") { (try? deliveredEvents(in: data + "/delivered"))?.contains { $0.name == "hardened" } == true }
        ferryd.signal(SIGTERM)
        #expect(try await ferryd.waitForExit(timeout: .seconds(20)) == .exited(0), "\(ferryd.standardError)")
    }
}

/// The repository's root directory (this file is Tests/FerryIntegrationTests/…).
let repositoryRoot: String = {
    var url = URL(fileURLWithPath: #filePath)
    for _ in 0..<3 { url.deleteLastPathComponent() }
    return url.path
}()
