import FerryTestKit
import Foundation

/// A stand-in for Segment's Public API (`Tests/Support/segment-public-api/segment_public_api.py`,
/// run with `python3`): Create Workspace Regulation, `POST /regulations` with a bearer token,
/// checked against Segment's documented schema, answering `{"data":{"regulateId":…}}`, or the
/// statuses written to ``script(_:)`` first (429 with `Retry-After: 1`).
///
/// ```swift
/// let api = try await SegmentPublicAPI.start(token: "sp-token")
/// defer { api.stop() }
/// try api.script([503, 429])   // the next two requests fail
/// // … POST to api.url + "/regulations" …
/// #expect(api.requests().last?["status"] as? Int == 200)
/// ```
public final class SegmentPublicAPI: Sendable {
    /// The process.
    public let process: ChildProcess
    /// `http://127.0.0.1:<port>`.
    public let url: String
    private let directory: TemporaryDirectory

    private init(process: ChildProcess, url: String, directory: TemporaryDirectory) {
        self.process = process
        self.url = url
        self.directory = directory
    }

    /// The script's path in this source tree.
    public static var scriptPath: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Tests/Support/segment-public-api/segment_public_api.py").path
    }

    /// Starts the stand-in accepting `token`, and waits until it listens.
    public static func start(token: String) async throws -> SegmentPublicAPI {
        let directory = try TemporaryDirectory()
        let process = try ChildProcess(
            executable: "/usr/bin/env",
            arguments: ["python3", scriptPath, "--token", token, "--log", directory.path + "/requests.jsonl",
                        "--script", directory.path + "/script"],
            outputDirectory: directory.path, label: "segment-public-api")
        do {
            let port = try await waitForValue("the Segment Public API stand-in to listen", timeout: .seconds(10)) { () -> Int? in
                if let status = process.exitStatus { throw TestFailure("segment_public_api.py exited \(status): \(process.standardError)") }
                return process.outputLines.first { $0.hasPrefix("PORT ") }.flatMap { Int($0.dropFirst(5)) }
            }
            return SegmentPublicAPI(process: process, url: "http://127.0.0.1:\(port)", directory: directory)
        } catch {
            process.cleanup()
            throw error
        }
    }

    /// Makes the next requests that pass the checks answer `statuses`, in order.
    public func script(_ statuses: [Int]) throws {
        try statuses.map { "\($0)\n" }.joined().write(toFile: directory.path + "/script", atomically: true, encoding: .utf8)
    }

    /// Every request received, oldest first: `method`, `path`, `authorization`, `content_type`,
    /// `body` (parsed), `status` (the answer).
    public func requests() -> [[String: Any]] {
        guard let text = try? String(contentsOfFile: directory.path + "/requests.jsonl", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// Stops the process and removes its files.
    public func stop() {
        process.signal(SIGTERM)
        process.cleanup()
        directory.remove()
    }
}
