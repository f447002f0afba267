import AsyncHTTPClient
import FerryAgent
import FerryProtocol
import FerryStorage
import FerryThreads
import Foundation
import NIOCore
import NIOHTTP1

// The HTTP sink's erasure (docs/HTTP-SINK.md, "Erasure"): `envelope` POSTs an erasure message to
// the collector; `segment` creates a `SUPPRESS_WITH_DELETE` regulation through Segment's Public
// API. Answers are classified as a batch's are (``HTTPSink/classify(status:retryAfter:now:)``).

extension HTTPSink {
    /// Carries `request` to the collector: see the file's comment. Returns Segment's
    /// `regulateId` (`segment`), or nothing (`envelope`).
    public func erase(_ request: SinkErasure) async throws -> String? {
        switch configuration.format {
        case .envelope:
            let url = configuration.erasure.url ?? configuration.url
            let authorization = try await authorization()
            var headers = configuration.headers.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
            headers.append(("Idempotency-Key", "erasure-" + request.id))
            if let authorization { headers.append(("Authorization", authorization)) }
            _ = try await postErasure(url: url, body: request.message, contentType: "application/json",
                                      headers: headers, secrets: [])
            return nil
        case .segment:
            guard let tokenFile = configuration.erasure.tokenFile else {
                throw SinkError(.permanent, "http sink: segment erasure needs erasure.tokenFile (a Segment Public API token)")
            }
            let logger = self.logger
            let token: String
            do {
                token = try await io.run { try Self.readSecret(tokenFile, key: "erasure.tokenFile", logger: logger) }
            } catch {
                throw SinkError(.retry(after: nil), "http sink: cannot read erasure.tokenFile \(tokenFile)")
            }
            let base = configuration.erasure.apiURL.hasSuffix("/") ? String(configuration.erasure.apiURL.dropLast()) : configuration.erasure.apiURL
            let body = try await postErasure(
                url: base + "/regulations", body: Self.regulation(request), contentType: "application/vnd.segment.v1+json",
                headers: [("Authorization", "Bearer " + token), ("Accept", "application/vnd.segment.v1+json")], secrets: [token])
            return Self.regulateID(in: body)
        }
    }

    /// The body of Segment's `POST /regulations` (Create Workspace Regulation).
    static func regulation(_ request: SinkErasure) -> [UInt8] {
        var out: [UInt8] = Array(#"{"regulationType":"SUPPRESS_WITH_DELETE","subjectIds":["#.utf8)
        JSONText.appendString(request.userID, to: &out)
        out += Array(#"],"subjectType":"USER_ID"}"#.utf8)
        return out
    }

    /// `data.regulateId` of Segment's answer, if there.
    static func regulateID(in body: [UInt8]) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
              let data = object["data"] as? [String: Any] else { return nil }
        return data["regulateId"] as? String
    }

    /// One POST of an erasure; returns the body of a 2xx answer (at most 64 KiB), throws
    /// ``SinkError`` classified like a batch's answer (413 and redirects are permanent).
    private func postErasure(url: String, body: [UInt8], contentType: String, headers: [(String, String)],
                             secrets: [String]) async throws -> [UInt8] {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.headers.replaceOrAdd(name: "Content-Type", value: contentType)
        request.headers.replaceOrAdd(name: "User-Agent", value: Self.userAgent)
        request.body = .bytes(ByteBuffer(bytes: body))
        func clean(_ text: String) -> String {
            secrets.reduce(redact(text)) { $0.replacingOccurrences(of: $1, with: "<redacted>") }
        }
        let status: Int, answer: [UInt8], retryAfter: String?
        do {
            let response = try await client.execute(request, timeout: .milliseconds(Int64(configuration.requestTimeoutMilliseconds)))
            status = Int(response.status.code)
            retryAfter = response.headers.first(name: "Retry-After")
            answer = Array(try await response.body.collect(upTo: 64 << 10).readableBytesView)
        } catch {
            throw SinkError(.retry(after: nil), "http sink: erasure: \(clean(Self.describe(error)))")
        }
        let excerpt = clean(String(decoding: answer.prefix(Self.upstreamBodyExcerptBytes), as: UTF8.self))
        switch Self.classify(status: status, retryAfter: retryAfter) {
        case .acknowledged:
            return answer
        case .retry(let after):
            throw SinkError(.retry(after: after), "http sink: erasure: HTTP \(status)", upstreamStatus: status, upstreamBody: excerpt)
        case .tooLarge, .redirect, .permanent:
            throw SinkError(.permanent, "http sink: erasure: HTTP \(status) (\(HTTPResponseStatus(statusCode: status).reasonPhrase))",
                            upstreamStatus: status, upstreamBody: excerpt)
        }
    }
}
