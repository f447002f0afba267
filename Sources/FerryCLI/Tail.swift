import ArgumentParser
import Ferry
import FerryProtocol
import Foundation
import ZeroMQ

/// `ferry tail`: the live event bus.
struct Tail: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Watch the agent's event bus live (no replay of earlier messages).",
        discussion: "Topics: \(BusTopics.names.joined(separator: ", ")) (see docs/PROTOCOL.md). Without --topic, all of them."
    )


    @Option(name: .customLong("topic"), help: "Only this topic (prefix match). Repeatable.")
    var topics: [String] = []

    @Flag(name: .long, help: "Print each message as one JSON object per line.")
    var json = false

    @Option(name: .long, help: "Exit after this many messages.")
    var count: Int?

    @Option(name: .long, help: "Exit with status 75 if this many seconds pass without a message.")
    var idleTimeout: Double?

    @Option(name: .long, help: "Only events sent by this uid (the kernel's word: the event's origin).")
    var uid: UInt32?

    @Option(name: .long, help: "Only events sent from this systemd unit (e.g. nginx.service; the event's origin).")
    var unit: String?

    @OptionGroup var agent: AgentOptions

    func validate() throws {
        if let count, count <= 0 { throw ValidationError("--count must be positive") }
        if let unit, unit.isEmpty { throw ValidationError("--unit must not be empty") }
        try BusTopics.check(topics)
    }

    func run() throws {
        let runtime = agent.runtimeDirectory
        // The bus is guarded by its socket file's permissions, which would leave a refused
        // subscriber waiting in silence: ask first. `whoami` is answered to every caller (not
        // `status`, which needs the ingest right: a user allowed only to watch must get through),
        // so it is also the liveness check.
        let reply = try Control.request(.whoami(), runtimeDirectory: runtime, timeout: .seconds(1))
        let who = try Control.decode(WhoAmIReply.self, from: reply)
        if !who.events {
            throw CLIError.accessDenied("access denied: uid \(who.uid.map(String.init) ?? "?") may not subscribe to the event bus of the agent in \(runtime) (its \"access.events\" policy)")
        }
        let context = try ZMQContext()
        defer { context.terminate() }
        let socket = try ZMQSocket(context: context, type: .sub)
        defer { socket.close() }
        try socket.connect(FerryPaths.eventsEndpoint(runtime))
        for topic in topics.isEmpty ? [""] : topics { try socket.subscribe(topic) }
        // The subscription reaches the agent asynchronously; say when we are listening so scripts
        // can start emitting.
        FileHandle.standardError.write(Data("ferry tail: listening on \(FerryPaths.eventsEndpoint(runtime))\n".utf8))

        var seen = 0
        let output = FileHandle.standardOutput
        while count.map({ seen < $0 }) ?? true {
            let timeout = idleTimeout.map { Duration.milliseconds(Int($0 * 1000)) }
            let ready = try ZMQPoller.poll([.socket(socket, .readable)], timeout: timeout)
            guard ready[0].contains(.readable) else { throw ExitCode(ExitStatus.timedOut.rawValue) }
            guard let message = try socket.receive(dontWait: true), message.count == 2 else { continue }
            if (uid != nil || unit != nil) && !matchesOrigin(message[1]) { continue }
            seen += 1
            let line = json ? String(decoding: message[1], as: UTF8.self) : Self.readable(topic: message[0], body: message[1])
            output.write(Data((line + "\n").utf8))
        }
    }

    /// Whether a bus message's `origin` matches `--uid` and `--unit` (messages without an origin,
    /// such as `circuit`, do not).
    func matchesOrigin(_ body: [UInt8]) -> Bool {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
              let origin = object["origin"] as? [String: Any] else { return false }
        if let uid, (origin["uid"] as? NSNumber)?.uint32Value != uid { return false }
        if let unit, origin["unit"] as? String != unit { return false }
        return true
    }

    /// `12:00:01.123 accepted   track "Signed Up" source=app pid=42 seq=7 id=… uid=1000 unit=app.service`
    static func readable(topic: [UInt8], body: [UInt8]) -> String {
        let topicName = String(decoding: topic, as: UTF8.self)
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else {
            return "\(topicName) \(String(decoding: body, as: UTF8.self))"
        }
        var parts: [String] = []
        if let at = object["at"] as? NSNumber {
            let date = Date(timeIntervalSince1970: at.doubleValue / 1000)
            let formatter = DateFormatter()
            formatter.dateFormat = "HH:mm:ss.SSS"
            parts.append(formatter.string(from: date))
        }
        parts.append(topicName.padding(toLength: 10, withPad: " ", startingAt: 0))
        if let type = object["type"] as? String { parts.append(type) }
        if let name = object["name"] as? String { parts.append("\"\(name)\"") }
        if let state = object["state"] as? String, let previous = object["previous"] as? String {
            parts.append("\(previous) -> \(state)")
        }
        for key in ["reason", "sink", "source", "pid", "seq", "id", "consecutive_failures", "error"] {
            if let value = object[key] { parts.append("\(key)=\(value)") }
        }
        if let origin = object["origin"] as? [String: Any] {
            for key in ["uid", "comm", "unit"] {
                if let value = origin[key], !(value is NSNull) { parts.append("\(key)=\(value)") }
            }
        }
        return parts.joined(separator: " ")
    }
}

/// The event bus's topics as `ferry tail` knows them (the agent's `BusTopic`; FerryCLITests
/// checks they agree).
package enum BusTopics {
    /// Every topic, in docs/PROTOCOL.md's order.
    package static let names = [
        "accepted", "delivered", "dropped", "rejected", "blocked", "suppressed", "held", "quarantined", "purged", "consent",
        "circuit", "lost",
    ]

    /// Each `--topic` must be a prefix of some topic (a subscription is a prefix match): one that
    /// matches none would wait in silence for ever. Throws the usage error naming the valid ones.
    package static func check(_ topics: [String]) throws {
        for topic in topics where !names.contains(where: { $0.hasPrefix(topic) }) {
            throw ValidationError("unknown --topic '\(topic)'; valid: \(names.joined(separator: ", ")) (or a prefix of one)")
        }
    }
}
