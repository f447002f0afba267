import Foundation
import FerryProtocol
import FerryTestKit
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

/// Sends `request` (a JSON object) to the control socket in `runtimeDirectory` and returns the
/// decoded reply object (whatever its `ok`).
public func controlJSON(runtimeDirectory: String, _ request: [String: Any], timeout: Duration = .seconds(10)) async throws -> [String: Any] {
    let body = Array(try JSONSerialization.data(withJSONObject: request))
    let reply = try await controlRequest(runtimeDirectory: runtimeDirectory, request: body, timeout: timeout)
    guard let object = try JSONSerialization.jsonObject(with: Data(reply)) as? [String: Any] else {
        throw FerryTestKitError("control reply is not a JSON object: \(String(decoding: reply, as: UTF8.self))")
    }
    return object
}

extension AgentProcess {
    /// Sends a control request to this agent and returns the reply object; throws unless `"ok": true`.
    @discardableResult
    public func control(_ request: [String: Any], timeout: Duration = .seconds(10)) async throws -> [String: Any] {
        let reply = try await controlJSON(runtimeDirectory: runtimeDirectory, request, timeout: timeout)
        guard reply["ok"] as? Bool == true else {
            throw FerryTestKitError("control request \(request) refused: \(reply)")
        }
        return reply
    }

    /// The agent's consent state (`consent_state`).
    public func consentState() async throws -> [String: Any] {
        try await control(["op": "consent_state"])["consent"] as? [String: Any] ?? [:]
    }
}

/// Every regular file under `directory` whose bytes contain `marker`.
public func filesContaining(_ marker: String, under directory: String) -> [String] {
    let needle = Data(marker.utf8)
    guard let walker = FileManager.default.enumerator(atPath: directory) else { return [] }
    var hits: [String] = []
    while let relative = walker.nextObject() as? String {
        let path = directory + "/" + relative
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue,
              let data = FileManager.default.contents(atPath: path) else { continue }
        if data.range(of: needle) != nil { hits.append(relative) }
    }
    return hits
}

/// A fingerprint of every file under `directory` (path, size, modification time), to prove that
/// nothing was written.
public func directoryFingerprint(_ directory: String) -> [String: String] {
    var result: [String: String] = [:]
    guard let walker = FileManager.default.enumerator(atPath: directory) else { return [:] }
    while let relative = walker.nextObject() as? String {
        let attributes = (try? FileManager.default.attributesOfItem(atPath: directory + "/" + relative)) ?? [:]
        let size = (attributes[.size] as? NSNumber)?.intValue ?? -1
        let modified = (attributes[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0
        result[relative] = "\(size)@\(modified)"
    }
    return result
}
