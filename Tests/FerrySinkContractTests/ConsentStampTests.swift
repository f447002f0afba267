@testable import FerryFileSink
import Foundation
@testable import FerryAgent
@testable import FerryHTTPSink
@testable import FerryJetStreamSink
@testable import FerryStorage
import FerryProtocol
import FerryTestKit
import NATS
import Testing

/// One consent stamp (docs/PROTOCOL.md, "Consent stamp"): the file sink, JetStream and both HTTP
/// bodies write the same bytes, `consent_seq` a number and Consent Mode v2's names; the older
/// body versions still write the stamp they wrote before.
@Suite("Consent stamp: the same bytes in every body")
struct ConsentStampTests {
    static let stamp = GDPRRecord(subjectToGDPR: .granted, dataUsage: .granted, adsPersonalization: .denied, adStorage: .granted)
        .stamp.merging(["anonymous_id": "a-1", "consent_seq": "42"]) { $1 }
    /// The stamp as docs/PROTOCOL.md shows it.
    static let expected = #"{"ad_personalization":"denied","ad_storage":"granted","anonymous_id":"a-1","consent_seq":42,"data_usage":"granted","subject_to_gdpr":"granted"}"#
    static let before = #"{"ad_storage":"granted","ads_personalization":"denied","anonymous_id":"a-1","consent_seq":"42","data_usage":"granted","subject_to_gdpr":"granted"}"#
    static let beforeNumeric = #"{"ad_storage":"granted","ads_personalization":"denied","anonymous_id":"a-1","consent_seq":42,"data_usage":"granted","subject_to_gdpr":"granted"}"#

    static var batch: DeliveryBatch {
        var event = Events.make(1, name: "Signed Up")
        event.userID = "u1"
        return DeliveryBatch(events: storedEvents([event]), consent: stamp)
    }

    /// The bytes of the `"consent":{…}` object in `body` (the stamp holds no nested object).
    static func consent(in body: [UInt8]) throws -> String {
        let text = String(decoding: body, as: UTF8.self)
        let start = try #require(text.range(of: #""consent":{"#), "no consent in \(text)")
        let end = try #require(text[start.upperBound...].firstIndex(of: "}"))
        return "{" + String(text[start.upperBound..<end]) + "}"
    }

    static func bodies(lineFormat: Int = FileSink.currentLineFormat, bodyVersion: Int = HTTPSinkConfiguration.currentBodyVersion)
        throws -> [String: [UInt8]]
    {
        let batch = Self.batch
        var line: [UInt8] = []
        FileSink.appendLine(for: batch.events[0], consent: FileSink.consentJSON(batch.consent, lineFormat: lineFormat),
                            lineFormat: lineFormat, to: &line)
        let jetStream = JetStreamSink.messages(for: batch, template: try SubjectTemplate("ferry.events.{type}"),
                                               lineFormat: max(lineFormat, 2))
        return [
            "file": line,
            "jetstream": jetStream[0].payload,
            "envelope": HTTPBatchBody.encode(batch, format: .envelope, version: bodyVersion, sentAt: 1),
            "segment": HTTPBatchBody.encode(batch, format: .segment, version: bodyVersion, sentAt: 1),
        ]
    }

    @Test("file line, JetStream message, envelope and segment bodies carry the same stamp, byte for byte")
    func sameBytesEverywhere() throws {
        for (sink, body) in try Self.bodies() {
            #expect(try Self.consent(in: body) == Self.expected, "\(sink): \(String(decoding: body, as: UTF8.self))")
            // consent_seq is a JSON number in every body.
            let object = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])
            let stamp = try #require((object["consent"] ?? (object["context"] as? [String: Any])?["consent"]) as? [String: Any], "\(sink)")
            #expect(stamp["consent_seq"] is NSNumber && !(stamp["consent_seq"] is String), "\(sink)")
            #expect(Set(stamp.keys) == ["subject_to_gdpr", "data_usage", "ad_personalization", "ad_storage", "anonymous_id", "consent_seq"])
        }
        let bodies = try Self.bodies()
        #expect(String(decoding: bodies["envelope"]!, as: UTF8.self).hasPrefix(#"{"version":2,"batch_id":"#))
        #expect(String(decoding: bodies["file"]!, as: UTF8.self).hasPrefix(#"{"line_format":3,"#))
        #expect(ConsentStampStyle.current.json(Self.stamp) == Array(Self.expected.utf8))
    }

    @Test("the earlier versions keep the stamp they wrote: HTTP body 1, file line formats 1 and 2, JetStream lineFormat 2")
    func earlierVersions() throws {
        let old = try Self.bodies(lineFormat: 2, bodyVersion: 1)
        #expect(try Self.consent(in: old["envelope"]!) == Self.before)
        #expect(try Self.consent(in: old["segment"]!) == Self.before)
        #expect(!String(decoding: old["envelope"]!, as: UTF8.self).contains(#""version""#))
        #expect(try Self.consent(in: old["file"]!) == Self.beforeNumeric)
        #expect(try Self.consent(in: old["jetstream"]!) == Self.beforeNumeric)
        #expect(try Self.consent(in: try Self.bodies(lineFormat: 1)["file"]!) == Self.before)
        // An empty stamp is `{}` in the HTTP bodies.
        #expect(try Self.consent(in: HTTPBatchBody.encode(DeliveryBatch(events: Self.batch.events), format: .envelope, sentAt: 1)) == "{}")
    }

    @Test("bodyVersion and the JetStream lineFormat are read from the file and checked")
    func settings() throws {
        var http = HTTPSinkConfiguration(url: "https://example.com/v1/batch")
        #expect(http.bodyVersion == 2)
        http.bodyVersion = 3
        #expect(throws: AgentError.self) { try http.validate() }
        http.bodyVersion = 1
        try http.validate()
        var jetStream = JetStreamSinkConfiguration()
        #expect(jetStream.lineFormat == 3)
        jetStream.lineFormat = 1
        #expect(throws: AgentError.self) { try jetStream.validate() }
    }

    @Test("docs/PROTOCOL.md's Consent stamp section shows the stamp the bodies write")
    func documented() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/PROTOCOL.md")
        let text = try String(contentsOf: url, encoding: .utf8)
        let section = try #require(text.range(of: "## Consent stamp"))
        #expect(text[section.upperBound...].contains(Self.expected))
    }
}
