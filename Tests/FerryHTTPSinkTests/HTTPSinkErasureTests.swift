import Foundation
@testable import FerryAgent
@testable import FerryHTTPSink
import FerryIntegrationKit
import FerryProtocol
import FerryTestKit
import Testing

@Suite("HTTP sink erasure: the envelope message, Segment's Public API regulation, retry classification")
struct HTTPSinkErasureTests {
    static let request = SinkErasure(id: "0190f5c2-7a3b-7c4d-8e5f-0123456789ab", userID: "u-\"42\"", requestedAt: 1_795_309_000_123)

    @Test("envelope: the erasure message is POSTed to erasure.url with the sink's auth and headers")
    func envelope() async throws {
        let server = try await HTTPTestServer.start()
        defer { Task { await server.shutdown() } }
        let scratch = try TemporaryDirectory()
        defer { scratch.remove() }
        try "tok-1\n".write(toFile: scratch.path + "/token", atomically: true, encoding: .utf8)
        var configuration = HTTPSinkConfiguration(url: server.url("/v1/batch"), headers: ["X-Tenant": "acme"], tokenFile: scratch.path + "/token")
        configuration.erasure.url = server.url("/v1/erasure")
        let sink = HTTPSink(configuration: configuration, logger: quietLogger)
        defer { Task { try? await sink.shutdown() } }
        #expect(try await sink.erase(Self.request) == nil)
        let sent = try #require(server.requests.last)
        #expect(sent.method == "POST" && sent.path == "/v1/erasure")
        #expect(sent.header("Authorization") == "Bearer tok-1" && sent.header("X-Tenant") == "acme")
        #expect(sent.header("Idempotency-Key") == "erasure-" + Self.request.id)
        #expect(String(decoding: sent.body, as: UTF8.self)
            == #"{"id":"0190f5c2-7a3b-7c4d-8e5f-0123456789ab","requestedAt":1795309000123,"type":"erasure","userId":"u-\"42\""}"#)

        // Classified like a batch: 503 retried (with Retry-After), 400 permanent.
        server.enqueue(.status(503, headers: ["Retry-After": "2"]), .status(400, body: "no"))
        await #expect(throws: SinkError.self) { try await sink.erase(Self.request) }
        do {
            _ = try await sink.erase(Self.request)
            Issue.record("a 400 must fail")
        } catch let error as SinkError {
            #expect(error.disposition == .permanent && error.upstreamStatus == 400)
        }
    }

    @Test("segment: a SUPPRESS_WITH_DELETE regulation through the Public API stand-in; 429/5xx retried, 4xx permanent")
    func segment() async throws {
        let api = try await SegmentPublicAPI.start(token: "sp-secret")
        defer { api.stop() }
        let scratch = try TemporaryDirectory()
        defer { scratch.remove() }
        try "wk-1".write(toFile: scratch.path + "/writekey", atomically: true, encoding: .utf8)
        try "sp-secret\n".write(toFile: scratch.path + "/api-token", atomically: true, encoding: .utf8)
        chmod(scratch.path + "/api-token", 0o600)
        var configuration = HTTPSinkConfiguration(url: "http://127.0.0.1:9/v1/batch", writeKeyFile: scratch.path + "/writekey", format: .segment)
        configuration.erasure = .init(apiURL: api.url, tokenFile: scratch.path + "/api-token")
        let sink = HTTPSink(configuration: configuration, logger: quietLogger)
        defer { Task { try? await sink.shutdown() } }
        _ = try await sink.recover(checkpoint: nil)

        let reference = try await sink.erase(Self.request)
        let sent = try #require(api.requests().last)
        #expect(sent["status"] as? Int == 200)
        #expect(sent["method"] as? String == "POST" && sent["path"] as? String == "/regulations")
        #expect(sent["authorization"] as? String == "Bearer sp-secret")
        let body = try #require(sent["body"] as? [String: Any])
        #expect(body["regulationType"] as? String == "SUPPRESS_WITH_DELETE" && body["subjectType"] as? String == "USER_ID")
        #expect(body["subjectIds"] as? [String] == [Self.request.userID])
        #expect(reference?.isEmpty == false)

        // 429 (Retry-After 1 s) and 503 are retried; 400 and a wrong token are permanent.
        for (status, permanent) in [(429, false), (503, false), (500, false), (400, true)] {
            try api.script([status])
            do {
                _ = try await sink.erase(Self.request)
                Issue.record("HTTP \(status) must fail")
            } catch let error as SinkError {
                #expect((error.disposition == .permanent) == permanent, "HTTP \(status): \(error)")
                if status == 429 { #expect(error.disposition == .retry(after: .seconds(1))) }
                #expect(!error.message.contains("sp-secret"))
            }
        }
        try "sp-wrong".write(toFile: scratch.path + "/api-token", atomically: true, encoding: .utf8)
        do {
            _ = try await sink.erase(Self.request)
            Issue.record("a wrong token must fail")
        } catch let error as SinkError {
            #expect(error.disposition == .permanent && error.upstreamStatus == 401)
            #expect(!(error.upstreamBody ?? "").contains("sp-wrong"))
        }
    }

    @Test("segment without erasure.tokenFile cannot erase: a permanent failure that says why")
    func segmentWithoutToken() async throws {
        let configuration = HTTPSinkConfiguration(url: "http://127.0.0.1:9/v1/batch", format: .segment)
        let sink = HTTPSink(configuration: configuration, logger: quietLogger)
        defer { Task { try? await sink.shutdown() } }
        do {
            _ = try await sink.erase(Self.request)
            Issue.record("must fail")
        } catch let error as SinkError {
            #expect(error.disposition == .permanent && error.message.contains("erasure.tokenFile"))
        }
    }

    @Test("erasure keys are read and checked", arguments: [
        (#"{"type":"http","url":"http://c/v1","erasure":{"url":"http://c/erase"}}"#, nil as String?),
        (#"{"type":"http","url":"http://c/v1","format":"segment","erasure":{"apiURL":"https://api.eu1.segmentapis.com","tokenFile":"/t"}}"#, nil),
        (#"{"type":"http","url":"http://c/v1","erasure":{"url":"ftp://c"}}"#, "erasure.url"),
        (#"{"type":"http","url":"http://c/v1","erasure":{"tokenFile":""}}"#, "erasure.tokenFile"),
        (#"{"type":"http","url":"http://c/v1","erasure":{"subject":"x"}}"#, "subject"),
    ])
    func keys(json: String, expected: String?) throws {
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        do {
            var reader = FieldReader(path: "ferryd.json")
            // The keys are read at parse, their values checked with the rest of the file.
            try HTTPSinkConfiguration.parse(object, reader: &reader, at: "sink").validate()
            #expect(expected == nil)
        } catch {
            #expect(expected != nil && "\(error)".contains(expected ?? "-"), "\(error)")
        }
    }
}
