import FerryIntegrationKit
import FerryTestKit
import Foundation
import Testing

/// What `scripts/gen-docs` turns into completions and man pages, from the real binaries (the
/// script itself runs in CI through `scripts/check-docs`: it builds, which a test cannot do while
/// `swift test` holds the build directory).
@Suite("completions and man page input")
struct ShippedDocsTests {
    static let subcommands = ["emit", "tail", "status", "top", "queue", "deadletter", "consent", "tracking", "features",
                              "purge", "forget", "start", "whoami", "plan"]

    @Test("ferry's completion scripts name every subcommand", arguments: ["bash", "zsh", "fish"])
    func ferryCompletions(shell: String) async throws {
        let result = try await runCLI(["--generate-completion-script", shell])
        #expect(result.status == .exited(0), "\(result)")
        for subcommand in Self.subcommands {
            #expect(result.stdout.range(of: "\\b\(subcommand)\\b", options: .regularExpression) != nil, "\(shell) lacks \(subcommand)")
        }
        #expect(result.stdout.contains(shell == "fish" ? "'once'" : "--once"), "top's options")
    }

    @Test("ferryd's completion scripts know --log-format and its values", arguments: ["bash", "zsh", "fish"])
    func ferrydCompletions(shell: String) async throws {
        let result = try await runProcess(try FerryBinaries.ferryd(), ["--generate-completion-script", shell])
        #expect(result.status == .exited(0), "\(result)")
        #expect(result.stdout.contains("log-format"))
        #expect(result.stdout.contains("journal"), "the format values are completed")
    }

    @Test("ferryd and ferry describe themselves for generate-manual (--experimental-dump-help)")
    func dumpHelp() async throws {
        for (binary, name) in [(try FerryBinaries.ferryd(), "ferryd"), (try FerryBinaries.ferry(), "ferry")] {
            let result = try await runProcess(binary, ["--experimental-dump-help"])
            #expect(result.status == .exited(0), "\(result)")
            let object = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
            let command = try #require(object["command"] as? [String: Any])
            #expect(command["commandName"] as? String == name)
        }
    }
}
