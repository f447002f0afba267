import Foundation
import FerryProtocol
import ZeroMQ

/// A reply of the agent's control socket to `{"op":"status"}`.
public struct AgentStatus: Sendable, CustomStringConvertible {
    /// The reply exactly as received (a JSON object).
    public let json: [UInt8]

    /// The reply decoded as a JSON object.
    public var object: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(json)) as? [String: Any]) ?? [:]
    }

    /// Whether the agent answered `"ok": true`.
    public var ok: Bool { object["ok"] as? Bool == true }

    /// The agent's process id.
    public var pid: Int? { (object["pid"] as? NSNumber)?.intValue }

    /// The `counters` group (accepted, duplicate, rejected, delivered, malformed_messages, …).
    public var counters: [String: Int] {
        (object["counters"] as? [String: Any] ?? [:]).compactMapValues { ($0 as? NSNumber)?.intValue }
    }

    /// `queue.events`: undelivered events in the durable log.
    public var queuedEvents: Int? { ((object["queue"] as? [String: Any])?["events"] as? NSNumber)?.intValue }

    /// `delivery.state`.
    public var deliveryState: String? { (object["delivery"] as? [String: Any])?["state"] as? String }

    public var description: String { String(decoding: json, as: UTF8.self) }
}

/// Sends one JSON request to the control socket in `runtimeDirectory` and returns the raw reply.
/// Throws if nothing answers within `timeout`.
public func controlRequest(runtimeDirectory: String, request: [UInt8], timeout: Duration = .seconds(2)) async throws -> [UInt8] {
    try await runOffPool { try controlRequestBlocking(runtimeDirectory: runtimeDirectory, request: request, timeout: timeout) }
}

/// `{"op":"status"}` on the control socket in `runtimeDirectory`.
public func controlStatus(runtimeDirectory: String, timeout: Duration = .seconds(2)) async throws -> AgentStatus {
    let reply = try await controlRequest(runtimeDirectory: runtimeDirectory, request: Array(#"{"op":"status"}"#.utf8), timeout: timeout)
    return AgentStatus(json: reply)
}

/// The blocking form of ``controlRequest(runtimeDirectory:request:timeout:)``: a fresh REQ socket
/// per call, so a lost reply never leaves a REQ socket stuck in its send/receive state machine.
public func controlRequestBlocking(runtimeDirectory: String, request: [UInt8], timeout: Duration) throws -> [UInt8] {
    guard FileManager.default.fileExists(atPath: runtimeDirectory + "/control") else {
        throw FerryTestKitError("no control socket in \(runtimeDirectory)")
    }
    let context = try ZMQContext()
    defer { context.terminate() }
    let socket = try ZMQSocket(context: context, type: .req)
    defer { socket.close() }
    try socket.connect(FerryPaths.controlEndpoint(runtimeDirectory))
    guard try socket.send([request], dontWait: true) else {
        throw FerryTestKitError("cannot send a control request in \(runtimeDirectory)")
    }
    let ready = try ZMQPoller.poll([.socket(socket, .readable)], timeout: timeout)
    guard ready[0].contains(.readable), let reply = try socket.receive(dontWait: true), let frame = reply.first else {
        throw FerryTestKitError("no control reply from \(runtimeDirectory) within \(timeout)")
    }
    return frame
}
