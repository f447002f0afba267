import FerryIntegrationKit
import FerryTestKit
import Foundation
import Testing

/// Every configuration snippet of README.md, daemon/README.md and docs/, and every example file in
/// daemon/, is checked by `ferryd validate` and started by `ferryd` (issue 39): validate's verdict
/// is start's. Each runs twice: with a throwaway file behind every path it names (a secret, a CA
/// certificate, NATS credentials, a redaction key; both accept it), and with those files missing
/// (both refuse a snippet that names one).
@Suite("Configuration snippets: validate's verdict is start's")
struct ConfigSnippetTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    /// The top-level keys of a configuration file.
    static let configurationKeys: Set<String> = [
        "comment", "mode", "access", "runtimeDirectory", "dataDirectory", "maxEventBytes", "logLevel", "log", "dedup", "delivery",
        "consent", "metrics", "quality", "redact", "sink", "sinks", "http",
    ]

    struct Snippet: CustomTestStringConvertible, Sendable {
        var source: String
        var json: String
        var testDescription: String { source }
    }

    /// The JSON code blocks that are configurations (or a fragment of one: `"sinks": […]`, a
    /// sink object), as files; and the example files.
    static func snippets() -> [Snippet] {
        var found: [Snippet] = []
        let docs = ((try? FileManager.default.contentsOfDirectory(atPath: repository + "/docs")) ?? [])
            .filter { $0.hasSuffix(".md") && $0 != "BENCHMARKS.md" }.sorted().map { "docs/" + $0 }
        for name in ["README.md", "daemon/README.md"] + docs {
            guard let text = try? String(contentsOfFile: repository + "/" + name, encoding: .utf8) else { continue }
            for block in text.matches(of: /```json\n([\s\S]*?)```/) {
                let body = block.output.1.trimmingCharacters(in: .whitespacesAndNewlines)
                let line = text[..<block.range.lowerBound].filter { $0 == "\n" }.count + 1
                for candidate in [body, "{" + body + "}"] {
                    guard let object = (try? JSONSerialization.jsonObject(with: Data(candidate.utf8))) as? [String: Any] else { continue }
                    if Set(object.keys).isSubset(of: configurationKeys) {
                        found.append(Snippet(source: "\(name):\(line)", json: candidate))
                    } else if object["type"] is String, object["name"] is String {
                        found.append(Snippet(source: "\(name):\(line)", json: #"{"sinks": ["# + candidate + "]}"))
                    }
                    break
                }
            }
        }
        let daemon = ((try? FileManager.default.contentsOfDirectory(atPath: repository + "/daemon")) ?? [])
            .filter { $0.hasSuffix(".example.json") }.sorted()
        for name in daemon {
            if let text = try? String(contentsOfFile: repository + "/daemon/" + name, encoding: .utf8) {
                found.append(Snippet(source: "daemon/" + name, json: text))
            }
        }
        return found
    }

    @Test("the docs hold the configuration snippets the issue names")
    func found() {
        let sources = Self.snippets().map(\.source)
        #expect(sources.contains { $0.hasPrefix("README.md:") })
        #expect(sources.contains { $0.hasPrefix("docs/HTTP-SINK.md:") })
        #expect(sources.contains("daemon/ferryd.http.example.json") && sources.contains("daemon/ferryd.segment.example.json"))
        #expect(sources.count >= 12, "\(sources)")
    }

    @Test("validate accepts what start accepts and refuses what it refuses", arguments: snippets())
    func verdicts(snippet: Snippet) async throws {
        for withFiles in [true, false] {
            let dir = try TemporaryDirectory()
            defer { dir.remove() }
            let (json, named) = try await Self.localise(snippet.json, in: dir, createFiles: withFiles)
            let config = dir.appending("ferryd.json")
            try Data(json.utf8).write(to: URL(fileURLWithPath: config))
            let validate = try await runProcess(try FerryBinaries.ferryd(), ["validate", "--config", config])
            let started = try await Self.starts(config: config, in: dir)
            let label = "\(snippet.source) (\(withFiles ? "with" : "without") its files)"
            #expect(validate.status.isSuccess == started.accepted,
                    "\(label): validate \(validate.status), start \(started.accepted ? "accepted" : "refused")\n\(validate.stderr)\n\(started.log.suffix(2000))")
            if withFiles {
                #expect(validate.status.isSuccess, "\(label): the documented snippet should be valid\n\(validate.stderr)")
            } else if !named.isEmpty {
                #expect(!validate.status.isSuccess, "\(label) names \(named) but validate accepts it")
                for path in named { #expect(validate.stderr.contains(path), "\(label): \(path) not named\n\(validate.stderr)") }
            }
        }
    }

    /// Starts `ferryd --config config` in `dir`; accepted once it answers `status`, refused when it
    /// exits first.
    static func starts(config: String, in dir: TemporaryDirectory) async throws -> (accepted: Bool, log: String) {
        let agent = try AgentProcess(in: dir, extraArguments: ["--config", config])
        defer { agent.cleanup() }
        do {
            try await agent.waitUntilReady()
        } catch {
            guard !agent.isRunning else { throw error }
            return (false, agent.logs)
        }
        _ = try await agent.terminate()
        return (true, agent.logs)
    }

    /// `json` with every absolute path it names moved into `dir`: the files a setting reads
    /// (created with throwaway contents when `createFiles`), directories the agent writes. Returns
    /// the paths of the files.
    static func localise(_ json: String, in dir: TemporaryDirectory, createFiles: Bool) async throws -> (json: String, files: [String]) {
        var text = json, files: [String] = []
        // `"tokenFile": "/etc/ferry/token"`: a key ending in `File` names a file a setting reads;
        // any other path is a directory the agent creates.
        var paths: [String: Bool] = [:]
        for match in json.matches(of: /"(\w+)"\s*:\s*"(\/(?:etc|var|run)\/[^"]+)"/) {
            paths[String(match.output.2)] = match.output.1.hasSuffix("File")
        }
        for (match, isFile) in paths.sorted(by: { $0.key < $1.key }) {
            let name = (match as NSString).lastPathComponent
            let local = dir.appending("files/" + name)
            text = text.replacingOccurrences(of: "\"\(match)\"", with: "\"\(local)\"")
            guard isFile else { continue }
            files.append(local)
            guard createFiles else { continue }
            try FileManager.default.createDirectory(atPath: dir.appending("files"), withIntermediateDirectories: true)
            if name.hasSuffix(".pem") {
                let made = try await runProcess("/usr/bin/openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=ferry-test", "-days", "1",
                                       "-keyout", dir.appending("files/ca-key.pem"), "-out", local])
                guard made.status.isSuccess else { throw FerryTestKitError("openssl could not make a certificate") }
            } else {
                // A token, a write key, a 32-byte redaction key, NATS credentials: any text will do
                // for start's checks, which read the file.
                try Data("ferrytestsecret0123456789abcdefghij\n".utf8).write(to: URL(fileURLWithPath: local))
            }
            chmod(local, 0o600)  // secrets are refused when others may read them
        }
        return (text, files)
    }
}
