import Foundation
@testable import FerryAgent
import FerryProtocol
import FerryTestKit
@testable import FerryStorage
@testable import FerryHTTPSink
import Testing

/// Issue 39: a segment sink sends the agent's anonymous id for an event without a user; an http
/// sink's files are checked as start checks them; its keys' errors come with the others.
@Suite("HTTP sink: anonymous id fallback, pre-flight")
struct HTTPSinkPreflightTests {
    static let stamp = ["ad_storage": "granted", "anonymous_id": "0190f5c2-7a3b-7c4d-8e5f-0123456789ab"]

    @Test("an event with neither userId nor anonymousId goes out with the agent's anonymous id")
    func anonymousFallback() throws {
        let events = [HTTPSinkSegmentTests.event(1, userID: ""), HTTPSinkSegmentTests.event(2)]
        let batch = DeliveryBatch(events: storedEvents(events), consent: Self.stamp)
        let plan = HTTPBatchBody.segmentPlan(batch)
        #expect(plan.rejections.isEmpty && plan.parts.map(\.events.count) == [2])
        let body = try #require(try JSONSerialization.jsonObject(with: Data(HTTPBatchBody.segment(batch, sentAt: 0))) as? [String: Any])
        let messages = try #require(body["batch"] as? [[String: Any]])
        #expect(messages[0]["anonymousId"] as? String == Self.stamp["anonymous_id"] && messages[0]["userId"] == nil)
        // An event with a user keeps only its own ids.
        #expect(messages[1]["userId"] as? String == "u2" && messages[1]["anonymousId"] == nil)
    }

    @Test("disclose.anonymousId false turns the fallback off: the event is rejected as before")
    func fallbackOff() {
        var batch = DeliveryBatch(events: storedEvents([HTTPSinkSegmentTests.event(1, userID: "")]), consent: Self.stamp)
        batch.disclosure = Disclosure(origin: false, process: false, anonymousID: false)
        #expect(HTTPBatchBody.segmentPlan(batch).rejections.map(\.reason)
            == ["segment: a track message needs a userId or an anonymousId; the event has neither"])
    }

    @Test("a snippet's placeholder key and a missing url are both reported; the valid keys include the shared ones")
    func everyKeyError() {
        let message = HTTPSinkConfigurationTests.error(#"{"sinks": [{"name": "f", "type": "file"}, {"name": "c", "type": "http", "...": "..."}]}"#)
        #expect(message.contains("sinks[1]....: unknown key; valid keys here: batch, bodyVersion, caFile, circuit, connectTimeoutMilliseconds, disclose,"), "\(message)")
        #expect(message.contains("name,"), "\(message)")
        #expect(message.contains("sinks[1].url: required for an http sink"), "\(message)")
    }

    @Test("every bad value of one http sink is reported, each on its own line with the sink's key path")
    func everyValueError() {
        let message = HTTPSinkConfigurationTests.error(#"""
        {"sinks": [{"name": "c", "type": "http", "url": "ftp://c.example", "tokenFile": "/t", "writeKeyFile": "/k", "caFile": "",
                    "bodyVersion": 9, "requestTimeoutMilliseconds": 0, "headers": {"Host": "x", "X-A": "a\u0001"}}]}
        """#)
        let lines = message.split(separator: "\n").filter { $0.contains("sinks[0]: sink (http): ") }
        for part in ["url must be an absolute", "set at most one of", "caFile must not be empty", "bodyVersion must be 1 or 2, not 9",
                     "requestTimeoutMilliseconds and connectTimeoutMilliseconds must be positive",
                     "header Host is set by the sink", "header X-A has a control character"] {
            #expect(lines.contains { $0.contains(part) }, "\(part) missing from: \(message)")
        }
        #expect(lines.count == 7, "\(message)")
    }

    @Test("files the settings name are read as start reads them: each problem names its key")
    func files() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let missing = HTTPSinkConfiguration(url: "https://c.example/v1/batch", tokenFile: scratch.appending("no.token"),
                                            caFile: scratch.appending("no-ca.pem"))
        let problems = missing.checkFiles()
        #expect(problems.count == 2, "\(problems)")
        #expect(problems[0] == "sink (http): cannot read tokenFile \(scratch.appending("no.token"))")
        #expect(problems[1].hasPrefix("sink (http): caFile \(scratch.appending("no-ca.pem")) holds no readable PEM certificate"))
        try writeBytes(Array("secret-token\n".utf8), to: scratch.appending("ok.token"))
        #expect(HTTPSinkConfiguration(url: "https://c.example/v1/batch", tokenFile: scratch.appending("ok.token")).checkFiles().isEmpty)
        #expect(HTTPSinkConfiguration(url: "https://c.example/v1/batch").summary.hasPrefix("url=https://c.example/v1/batch format=envelope"))
    }

    @Test("the User-Agent carries the one version")
    func userAgent() {
        #expect(HTTPSink.userAgent.hasPrefix("ferryd/\(FerryVersion.current) (ferry-protocol/"))
    }
}
