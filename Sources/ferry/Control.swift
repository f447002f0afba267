import Foundation
import FerryProtocol
import ZeroMQ

/// One request/reply exchange with the agent's control socket.
enum Control {
    /// Sends `request` and returns the decoded JSON reply, or throws a clear "not running" error.
    static func request(_ request: [String: Any], runtimeDirectory: String, timeout: Duration = .seconds(3)) throws -> [String: Any] {
        let endpoint = FerryPaths.controlEndpoint(runtimeDirectory)
        guard FileManager.default.fileExists(atPath: runtimeDirectory + "/control") else {
            throw CLIError.notRunning(runtimeDirectory)
        }
        let context = try ZMQContext()
        defer { context.terminate() }
        let socket = try ZMQSocket(context: context, type: .req)
        defer { socket.close() }
        try socket.connect(endpoint)
        let body = try JSONSerialization.data(withJSONObject: request)
        guard try socket.send([Array(body)], dontWait: true) else { throw CLIError.notRunning(runtimeDirectory) }
        let ready = try ZMQPoller.poll([.socket(socket, .readable)], timeout: timeout)
        guard ready[0].contains(.readable), let reply = try socket.receive(dontWait: true), let frame = reply.first else {
            throw CLIError.notRunning(runtimeDirectory)
        }
        guard let object = try JSONSerialization.jsonObject(with: Data(frame)) as? [String: Any] else {
            throw CLIError.message("the agent sent an unreadable control reply")
        }
        if object["ok"] as? Bool != true {
            throw CLIError.message("the agent refused: \(object["error"] as? String ?? "unknown error")")
        }
        return object
    }

    /// Whether an agent answers in `runtimeDirectory`.
    static func isRunning(runtimeDirectory: String) -> Bool {
        (try? request(["op": "status"], runtimeDirectory: runtimeDirectory, timeout: .seconds(1))) != nil
    }
}

/// Errors the CLI reports to people.
enum CLIError: Error, CustomStringConvertible {
    case notRunning(String)
    case message(String)

    var description: String {
        switch self {
        case .notRunning(let directory):
            "ferryd is not running (no answer on ipc://\(directory)/control). Start it with `ferryd`, or point --runtime-dir / FERRY_RUNTIME_DIR at the agent's runtime directory."
        case .message(let text):
            text
        }
    }
}
