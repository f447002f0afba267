import FerryDaemon
import FerryIntegrationKit
import FerryTestKit
import Foundation
import Logging
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("ferryd --log-format")
struct LogFormatTests {
    static let date = Date(timeIntervalSince1970: 1_795_000_000.25)

    @Test("journal lines start with the syslog priority of their level", arguments: [
        (Logger.Level.trace, 7), (.debug, 7), (.info, 6), (.notice, 5), (.warning, 4), (.error, 3), (.critical, 2),
    ])
    func journalPriority(level: Logger.Level, priority: Int) {
        let line = FerryLogHandler.line(format: .journal, label: "ferryd", level: level, message: "hello\nworld",
                                        metadata: ["sink": "file"], source: "FerryAgent", date: Self.date)
        #expect(line == "<\(priority)>sink=file hello world\n")
    }

    @Test("journal lines leave out ferryd's own label, which journald shows as the identifier; other labels stay")
    func journalIdentifierNotRepeated() {
        let own = FerryLogHandler.line(format: .journal, label: "ferryd", level: .info, message: "started",
                                       metadata: [:], source: "FerryAgent", date: Self.date)
        #expect(own == "<6>started\n")
        let other = FerryLogHandler.line(format: .journal, label: "nats", level: .warning, message: "slow",
                                         metadata: ["server": "a"], source: "NATS", date: Self.date)
        #expect(other == "<4>nats: server=a slow\n")
    }

    @Test("json lines are one object each, with timestamp, level, label, source, message and metadata")
    func jsonLine() throws {
        let line = FerryLogHandler.line(
            format: .json, label: "ferryd", level: .warning, message: "say \"hi\"\n\tthere",
            metadata: ["sink": "file", "attempt": "\(3)", "nested": ["a": ["x", "y"]]], source: "FerryAgent", date: Self.date
        )
        #expect(line.hasSuffix("}\n"))
        #expect(line.dropLast().contains("\n") == false)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["ts"] as? String == "2026-11-18T11:06:40.250Z")
        #expect(object["level"] as? String == "warning")
        #expect(object["label"] as? String == "ferryd")
        #expect(object["source"] as? String == "FerryAgent")
        #expect(object["msg"] as? String == "say \"hi\"\n\tthere")
        let metadata = try #require(object["metadata"] as? [String: Any])
        #expect(metadata["sink"] as? String == "file")
        #expect(metadata["attempt"] as? String == "3")
        #expect((metadata["nested"] as? [String: Any])?["a"] as? [String] == ["x", "y"])
    }

    @Test("json lines without metadata have no metadata key")
    func jsonWithoutMetadata() throws {
        let line = FerryLogHandler.line(format: .json, label: "l", level: .info, message: "m", metadata: [:], source: "s", date: Self.date)
        #expect(line == "{\"ts\":\"2026-11-18T11:06:40.250Z\",\"level\":\"info\",\"label\":\"l\",\"source\":\"s\",\"msg\":\"m\"}\n")
    }

    @Test("text lines: timestamp, level, label, sorted metadata, message")
    func textLine() {
        let line = FerryLogHandler.line(format: .text, label: "ferryd", level: .info, message: "started",
                                        metadata: ["b": "2", "a": "1"], source: "s", date: Self.date)
        #expect(line == "2026-11-18T11:06:40Z info ferryd: a=1 b=2 started\n")
    }

    @Test("the handler merges its metadata, the provider's and the message's, and writes one line per message")
    func handlerMerges() {
        let lines = Lines()
        let provider = Logger.MetadataProvider { ["provided": "p"] }
        var logger = Logger(label: "test") { label in
            FerryLogHandler(label: label, format: .journal, metadataProvider: provider) { line in lines.append(line) }
        }
        logger[metadataKey: "own"] = "o"
        logger.logLevel = .debug
        logger.debug("one", metadata: ["call": "c"])
        logger.trace("not written")
        logger.error("two")
        #expect(lines.all == ["<7>test: call=c own=o provided=p one\n", "<3>test: own=o provided=p two\n"])
    }

    @Test("JOURNAL_STREAM must name exactly the device and inode", arguments: [
        ("8:1234", true), ("8:1235", false), ("9:1234", false), ("8:", false), ("8", false), ("", false), ("x:y", false), ("8:1234:5", false),
    ])
    func journalStreamMatch(value: String, matches: Bool) {
        #expect(LogFormat.journalStream(value, matchesDevice: 8, inode: 1234) == matches)
    }

    @Test("ferryd picks journal when JOURNAL_STREAM names its stderr, text when it names another file")
    func journalStreamRun() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir, start: false)
        defer { agent.cleanup() }
        // AgentProcess's first run writes stderr to <logs>/ferryd.stderr (opened with O_TRUNC, so
        // the inode made here is the one ferryd's stderr gets).
        let stderrPath = agent.logDirectory + "/ferryd.stderr"
        #expect(FileManager.default.createFile(atPath: stderrPath, contents: nil))
        var info = stat()
        #expect(stat(stderrPath, &info) == 0)
        try agent.start(extraEnvironment: ["JOURNAL_STREAM": "\(info.st_dev):\(info.st_ino)"])
        try await agent.waitUntilReady()
        #expect(try await agent.terminate().isSuccess)
        let journalLines = try #require(agent.process).standardError.split(separator: "\n")
        #expect(!journalLines.isEmpty)
        for line in journalLines {
            #expect(line.range(of: #"^<[2-7]>\S"#, options: .regularExpression) != nil, "\(line)")
            #expect(!line.contains("ferryd:"), "journald adds the identifier: \(line)")
        }

        // Another file's inode: text, as without the variable.
        try agent.start(extraEnvironment: ["JOURNAL_STREAM": "\(info.st_dev):\(info.st_ino + 1)"])
        try await agent.waitUntilReady()
        #expect(try await agent.terminate().isSuccess)
        let textLines = try #require(agent.process).standardError.split(separator: "\n")
        #expect(!textLines.isEmpty)
        for line in textLines {
            #expect(line.range(of: #"^\d{4}-\d\d-\d\dT\S+ (info|notice|warning) ferryd"#, options: .regularExpression) != nil, "\(line)")
        }
    }

    @Test("ferryd --log-format json writes one JSON object per line")
    func jsonRun() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir, extraArguments: ["--log-format", "json"])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        #expect(try await agent.terminate().isSuccess)
        let lines = try #require(agent.process).standardError.split(separator: "\n")
        #expect(!lines.isEmpty)
        for line in lines {
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            #expect(object?["label"] as? String == "ferryd", "\(line)")
            #expect(object?["msg"] is String, "\(line)")
        }
    }

    @Test("an unknown --log-format is refused with the valid values")
    func unknownFormat() async throws {
        let result = try await runProcess(try FerryBinaries.ferryd(), ["--log-format", "xml"])
        #expect(result.status == .exited(64))
        #expect(result.stderr.contains("text") && result.stderr.contains("json") && result.stderr.contains("journal"), "\(result.stderr)")
    }
}

/// Lines a handler wrote, from any thread.
final class Lines: Sendable {
    private let lines = Mutex<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}
