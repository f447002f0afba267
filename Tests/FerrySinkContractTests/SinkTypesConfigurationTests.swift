@testable import FerryFileSink
@testable import FerryAgent
import FerryHTTPSink
import FerryJetStreamSink
import Foundation
import Testing

/// Configuration files naming every sink type `ferryd` links: here, in the one test target that
/// links every sink (each sink's own test target loads files with its type only).
@Suite("Configuration with every sink type")
struct SinkTypesConfigurationTests {
    @Test("the README's multi-sink example (HTTP collector, JetStream, file archive) loads as written")
    func readmeExample() throws {
        let root = #filePath.split(separator: "/").dropLast(3).joined(separator: "/")
        let readme = try String(contentsOfFile: "/" + root + "/README.md", encoding: .utf8)
        let section = try #require(readme.range(of: "## Upstream delivery"))
        let rest = readme[section.upperBound...]
        let start = try #require(rest.range(of: "```json\n"))
        let end = try #require(rest[start.upperBound...].range(of: "```"))
        let config = try AgentConfiguration.load(
            json: Array(String(rest[start.upperBound..<end.lowerBound]).utf8), path: "README.md",
            sinkKinds: .builtIn.registering(.http, .jetstream))
        #expect(config.sinks.map(\.name) == ["collector", "bus", "archive"])
        #expect(config.sinks.map(\.type) == ["http", "jetstream", "file"])
    }
}
