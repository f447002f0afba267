import ArgumentParser
import FerryProtocol
import FerryStorage
import Foundation
import ZeroMQ

extension Queue {
    /// `ferry queue migrate`: moves a stopped agent's undelivered and held events (and, if asked,
    /// its consent choices) into a running agent — a per-user queue into the system agent.
    struct Migrate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Re-submit a stopped agent's undelivered and held events to a running agent, keeping their ids.",
            discussion: """
                For moving a per-user agent's queue into the system agent: stop the per-user agent, then run this \
                (as a user the target lets send events, and root or a ferry-admin member for --consent). Events \
                are sent as they were stored — same ids, same session and sequence — so running it again, or after \
                a failure, stores nothing twice (they are answered duplicate). The target judges each under its \
                own consent state. The source directory is only read; remove it yourself once you are satisfied. \
                Each event's origin becomes the migrating process (the target records who delivered it). Exit \
                status 0 when every event was accepted or was a duplicate, 1 otherwise.
                """
        )

        @Option(name: .long, help: "The stopped agent's data directory.")
        var fromDataDir: String

        @Flag(name: .long, help: "Also copy the source's per-category consent choices (those it has decided) to the target.")
        var consent = false

        @Option(name: .long, help: "Seconds to wait for each batch's ack before sending it again.")
        var timeout: Double = 10

        @OptionGroup var agent: AgentOptions

        func run() throws {
            let source = fromDataDir
            guard FileManager.default.fileExists(atPath: source + "/segments") else {
                throw CLIError.message("\(source) is not an agent's data directory (no segments/)")
            }
            if Self.isLocked(source + "/ferryd.lock") {
                throw CLIError.message("an agent is still running on \(source); stop it first (its queue would change under the migration)")
            }
            let runtime = agent.runtimeDirectory
            let frames = try Self.pendingFrames(dataDirectory: source)
            var counts: [String: Int] = [:]
            if !frames.isEmpty {
                let statuses = try Self.submit(frames, runtimeDirectory: runtime, timeout: .milliseconds(Int(timeout * 1000)))
                for status in statuses { counts[status, default: 0] += 1 }
            }
            let summary = ["accepted", "duplicate", "blocked", "suppressed", "rejected"].map { "\($0)=\(counts[$0] ?? 0)" }
            print("migrated \(frames.count) events from \(source) to \(runtime): " + summary.joined(separator: " "))
            if consent { try copyConsent(from: source, runtimeDirectory: runtime) }
            let settled = (counts["accepted"] ?? 0) + (counts["duplicate"] ?? 0)
            if settled != frames.count { throw ExitCode(1) }
        }

        /// Whether some process holds `path` locked (an agent is running there).
        static func isLocked(_ path: String) -> Bool {
            let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { return false }
            defer { close(fd) }
            if flock(fd, LOCK_SH | LOCK_NB) == 0 {
                flock(fd, LOCK_UN)
                return false
            }
            return true
        }

        /// The frames not yet delivered to every sink (from the oldest sink cursor), then the
        /// held ones, oldest first; erased records and the agent's own `consent_updated`
        /// events are skipped.
        static func pendingFrames(dataDirectory data: String) throws -> [[UInt8]] {
            let cursors = ((try? FileManager.default.contentsOfDirectory(atPath: data + "/cursors")) ?? [])
                .filter { $0.hasSuffix(".cursor") }.map { String($0.dropLast(7)) }
            let cursor = cursors.compactMap { try? CursorStore(dataDirectory: data, sink: $0).load()?.position }.min()
            var frames: [[UInt8]] = []
            for (directory, from) in [(data + "/segments", cursor), (data + "/held", nil)] {
                let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { $0.hasSuffix(".seg") }.sorted()
                for name in names {
                    let index = UInt64(name.dropLast(4)) ?? 0
                    _ = try SegmentScanner.scan(path: directory + "/" + name, truncateTornTail: false) { offset, size, body in
                        let position = LogPosition(segment: index, offset: offset)
                        if let from, position < from { return }
                        let record = StoredEvent(position: position, size: size, body: body)
                        // The source agent's own consent_updated events describe its consent,
                        // not the host's: they stay behind.
                        guard !record.isErased, let header = try? record.header(),
                              header.category != ConsentCategories.consentCode else { return }
                        frames.append(record.frame)
                    }
                }
            }
            return frames
        }

        /// Sends `frames` in batches on one connection, each until it is answered; returns each
        /// event's status name, in order.
        static func submit(_ frames: [[UInt8]], runtimeDirectory: String, timeout: Duration) throws -> [String] {
            let context = try ZMQContext()
            defer { context.terminate() }
            let socket = try ZMQSocket(context: context, type: .dealer)
            defer { socket.close() }
            try socket.connect(FerryPaths.ingestEndpoint(runtimeDirectory))
            var statuses: [String] = []
            var requestID: UInt32 = 0
            for start in stride(from: 0, to: frames.count, by: 500) {
                let batch = Array(frames[start..<min(start + 500, frames.count)])
                requestID &+= 1
                var attempts = 0
                while true {
                    attempts += 1
                    let message = [MessageHeader(kind: .events, requestID: requestID).encoded()] + batch
                    guard try socket.send(message) else { throw CLIError.message("could not send to \(runtimeDirectory)") }
                    if let entries = try Self.awaitAck(socket, requestID: requestID, timeout: timeout) {
                        statuses += entries.map { $0.status == .rejected ? "rejected" : $0.status.description }
                        break
                    }
                    guard attempts < 6 else {
                        throw CLIError.message("the agent in \(runtimeDirectory) did not answer after \(attempts) tries; run the migration again (it stores nothing twice)")
                    }
                }
            }
            return statuses
        }

        /// The ack entries of `requestID`, or nil if none came within `timeout`; an error reply
        /// (such as access_denied) is thrown.
        static func awaitAck(_ socket: ZMQSocket, requestID: UInt32, timeout: Duration) throws -> [AckEntry]? {
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                let ready = try ZMQPoller.poll([.socket(socket, .readable)], timeout: deadline - ContinuousClock.now)
                guard ready[0].contains(.readable), let reply = try socket.receive(dontWait: true), reply.count == 2,
                      let header = try? MessageHeader(decoding: reply[0]), header.requestID == requestID else { continue }
                if header.kind == .error {
                    let error = try? ErrorReply(decoding: reply[1])
                    throw CLIError.message("the agent refused the migration: \(error?.code.description ?? "?"): \(error?.message ?? "")")
                }
                return try AckCodec.decode(reply[1])
            }
            return nil
        }

        /// Copies the source's decided per-category consent (granted or denied) to the target.
        func copyConsent(from source: String, runtimeDirectory: String) throws {
            let path = source + "/consent/state.json"
            guard let data = FileManager.default.contents(atPath: path),
                  let object = try JSONSerialization.jsonObject(with: data) as? [String: Any],
                  let categories = object["consent"] as? [String: String] else {
                throw CLIError.message("cannot read the consent state \(path)")
            }
            for (category, value) in categories.sorted(by: { $0.key < $1.key }) {
                guard let status = ConsentStatus(rawValue: value), status != .undetermined else { continue }
                _ = try Control.request(.setConsent(status, for: category), runtimeDirectory: runtimeDirectory)
                print("consent \(category): \(value)")
            }
        }
    }
}
