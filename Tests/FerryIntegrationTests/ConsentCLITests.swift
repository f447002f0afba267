import FerryIntegrationKit
import Foundation
import FerryTestKit
import Testing

/// The consent commands of the real `ferry` binary: validation without an agent, "not running",
/// and the requests and renderings against a control socket answering as docs/PROTOCOL.md says.
@Suite("ferry consent CLI")
struct ConsentCLITests {
    @Test("bad values are refused locally (exit 64) with the valid ones listed", arguments: [
        (["consent", "set", "analytics", "maybe"], ["invalid status 'maybe'", "valid: undetermined, granted, denied"]),
        (["consent", "set", "analytics"], ["missing <status>", "undetermined, granted, denied"]),
        (["consent", "set", "granted"], ["missing <category|all>"]),
        (["consent", "set"], ["ferry consent set <category|all> <status>", "--persistence", "--gdpr"]),
        (["consent", "set", "a", "granted", "b"], ["too many arguments"]),
        (["consent", "set", "--persistence", "nope"], ["'nope'", "'undetermined', 'granted' or 'denied'"]),
        (["consent", "set", "analytics", "granted", "--persistence", "granted"], ["--persistence takes no other arguments"]),
        (["consent", "set", "--gdpr"], ["subject_to_gdpr, data_usage, ads_personalization, ad_storage", "unset, granted, denied"]),
        (["consent", "set", "--gdpr", "data_usage=yes"], ["invalid value 'yes' for data_usage", "valid: unset, granted, denied"]),
        (["consent", "set", "--gdpr", "ad_consent=granted"],
         ["unknown GDPR field 'ad_consent'", "subject_to_gdpr, data_usage, ads_personalization, ad_storage"]),
        (["consent", "set", "--gdpr", "data_usage"], ["expected <field>=<value>"]),
        (["consent", "set", "--gdpr", "data_usage=granted", "data_usage=denied"], ["data_usage given twice"]),
        (["consent", "set", "data_usage=denied"], ["GDPR fields need --gdpr"]),
        (["consent", "log", "--limit", "0"], ["--limit must be positive"]),
        (["tracking", "maybe"], ["'maybe'", "'on', 'off' or 'status'"]),
        (["features", "enable"], ["<name|all>"]),
        (["features", "disable", ""], ["must not be empty"]),
        (["forget"], ["--user"]),
        (["forget", "--user="], ["--user"]),
        (["purge", "--category="], ["--category"]),
    ])
    func validation(args: [String], messages: [String]) async throws {
        // No agent anywhere: validation must not need one.
        let result = try await runCLI(args, environment: ["FERRY_RUNTIME_DIR": "/nonexistent/ferry-rt"])
        #expect(result.status == .exited(64), "\(result)")
        for message in messages { #expect(result.stderr.contains(message), "\(message) in \(result)") }
        #expect(!result.stderr.contains("not running"), "\(result)")
        #expect(result.stdout.isEmpty, "\(result)")
    }

    @Test("without an agent every command says ferryd is not running and exits 2 (README.md, \"Exit status\")", arguments: [
        ["consent", "show"], ["consent"], ["consent", "set", "analytics", "granted"], ["consent", "set", "--persistence", "denied"],
        ["consent", "set", "--gdpr", "data_usage=denied"], ["consent", "log"], ["tracking", "on"], ["tracking"],
        ["features", "list"], ["features", "enable", "all"], ["features", "disable", "push"], ["purge"],
        ["forget", "--user", "u1"], ["start"],
    ])
    func notRunning(args: [String]) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let result = try await runCLI(args, environment: ["FERRY_RUNTIME_DIR": dir.appending("rt")])
        #expect(result.status == .exited(2), "\(result)")
        #expect(result.stderr.contains("ferryd is not running (no answer on ipc://\(dir.path)/rt/control)"), "\(result)")
        #expect(result.stdout.isEmpty, "\(result)")
    }

    @Test("each command sends the documented request (with --actor) and prints a readable result")
    func requestsAndText() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let runtime = dir.appending("rt")
        let fake = try FakeControlAgent(runtimeDirectory: runtime) { op, _ in ControlSamples.reply(to: op) }
        defer { fake.stop() }
        let env = ["FERRY_RUNTIME_DIR": runtime]

        let cases: [(args: [String], request: String, output: [String])] = [
            (["consent", "show"], #"{"op":"consent_state"}"#,
             ["tracking", "runtime", "on", "waiting for `ferry start`", "analytics, push", "advertising", "denied",
              "subject_to_gdpr", "anonymous id", "0190f5c2-7a3b-7c4d-8e5f-0123456789ab", "held events", "3",
              "2 entries, head 9f2c4e6a8b0d1f3e"]),
            (["consent", "set", "advertising", "denied", "--actor", "ops"],
             #"{"actor":"ops","category":"advertising","op":"set_consent","status":"denied"}"#,
             ["consent denied for advertising", "erased 9 events (7 queued, 2 held)"]),
            (["consent", "set", "all", "granted"], #"{"category":"all","op":"set_consent","status":"granted"}"#,
             ["consent granted for all categories"]),
            (["consent", "set", "--persistence", "granted"], #"{"op":"set_persistence","status":"granted"}"#,
             ["persistence consent undetermined"]),
            (["consent", "set", "--gdpr", "subject_to_gdpr=granted", "data_usage=denied"],
             #"{"fields":{"data_usage":"denied","subject_to_gdpr":"granted"},"op":"set_gdpr"}"#,
             ["gdpr subject_to_gdpr=granted data_usage=granted ads_personalization=denied ad_storage=unset", "erased 9 events"]),
            (["tracking", "off"], #"{"enabled":false,"op":"set_tracking"}"#, ["tracking on"]),
            (["tracking", "status"], #"{"op":"consent_state"}"#, ["tracking on"]),
            (["features", "enable", "analytics", "push"], #"{"features":["analytics","push"],"op":"enable_features"}"#,
             ["analytics", "enabled", "advertising", "disabled"]),
            (["features", "disable", "all"], #"{"features":["all"],"op":"disable_features"}"#, ["erased 9 events"]),
            (["features", "list"], #"{"op":"consent_state"}"#, ["push", "enabled"]),
            (["purge", "--category", "advertising"], #"{"category":"advertising","op":"purge"}"#,
             ["erased 13 events (12 queued, 1 held) (category advertising)"]),
            (["purge"], #"{"op":"purge"}"#, ["erased 13 events (12 queued, 1 held)"]),
            (["forget", "--user", "u-42"], #"{"op":"forget","user_id":"u-42"}"#, ["erased 13 events (12 queued, 1 held) for user u-42"]),
            (["start"], #"{"op":"start"}"#, ["delivery started"]),
            (["consent", "log", "--limit", "2"], #"{"limit":2,"op":"consent_log"}"#,
             [#"#1  2023-11-14T22:13:20.000Z  consent.analytics: "undetermined" -> "granted"  by uid 1000 pid 4242 ferry actor "settings-ui"  hash 1b2c3d4e5f60"#,
              "#2  2023-11-14T22:13:21.500Z  tracking: true -> false  by uid 1000 pid 4243 settings  hash 9f2c4e6a8b0d",
              "hash chain verified"]),
        ]
        for (args, request, output) in cases {
            let before = fake.requests.count
            let result = try await runCLI(args, environment: env)
            #expect(result.status == .exited(0), "\(args): \(result)")
            #expect(fake.requests.dropFirst(before) == [request], "\(args)")
            for text in output { #expect(result.stdout.contains(text), "\(args): \(text) in \(result)") }
        }
    }

    @Test("--json prints the agent's reply exactly")
    func json() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let runtime = dir.appending("rt")
        let fake = try FakeControlAgent(runtimeDirectory: runtime) { op, _ in ControlSamples.reply(to: op) }
        defer { fake.stop() }
        for args in [["consent", "show", "--json"], ["consent", "set", "push", "denied", "--json"], ["consent", "log", "--json"],
                     ["tracking", "--json"], ["features", "list", "--json"], ["purge", "--json"], ["forget", "--user", "u", "--json"],
                     ["start", "--json"]] {
            let result = try await runCLI(args, environment: ["FERRY_RUNTIME_DIR": runtime])
            #expect(result.status == .exited(0), "\(result)")
            let op = try #require(fake.requestObjects.last?["op"] as? String)
            #expect(result.stdout == ControlSamples.reply(to: op) + "\n", "\(args)")
        }
    }

    @Test("a category the agent refuses is reported with the agent's valid list, exit 1")
    func refusedCategory() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let runtime = dir.appending("rt")
        let fake = try FakeControlAgent(runtimeDirectory: runtime) { _, _ in ControlSamples.unknownCategory }
        defer { fake.stop() }
        let result = try await runCLI(["consent", "set", "analytcs", "granted"], environment: ["FERRY_RUNTIME_DIR": runtime])
        #expect(result.status == .exited(1), "\(result)")
        #expect(result.stderr.contains(#"the agent refused: unknown category "analytcs""#), "\(result)")
        #expect(result.stderr.contains("valid: advertising, analytics, diagnostics, personalization, push, all"), "\(result)")
    }

    @Test("consent log exits 1 and says so when the hash chain does not verify, also with --json")
    func brokenChain() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let runtime = dir.appending("rt")
        let fake = try FakeControlAgent(runtimeDirectory: runtime) { _, _ in ControlSamples.brokenConsentLog }
        defer { fake.stop() }
        let text = try await runCLI(["consent", "log"], environment: ["FERRY_RUNTIME_DIR": runtime])
        #expect(text.status == .exited(1), "\(text)")
        #expect(text.stdout.contains("HASH CHAIN BROKEN: entry 2: prev does not match the hash of entry 1"), "\(text)")
        #expect(text.stdout.contains("#2"), "the entries are still shown: \(text)")
        #expect(text.stderr.contains("does not verify"), "\(text)")

        let json = try await runCLI(["consent", "log", "--json"], environment: ["FERRY_RUNTIME_DIR": runtime])
        #expect(json.status == .exited(1), "\(json)")
        #expect(json.stdout == ControlSamples.brokenConsentLog + "\n", "\(json)")
    }
}
