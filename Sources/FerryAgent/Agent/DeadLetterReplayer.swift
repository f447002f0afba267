import FerryProtocol
import FerryStorage
import FerryThreads

/// `{"op":"deadletter_replay","id":…,"sink":…}`: finds the sink that holds a dead letter (when
/// the request does not name it) and hands the letter to that sink's delivery loop once more.
struct DeadLetterReplayer: Sendable {
    /// The agent's data directory (where the dead letters are).
    let dataDirectory: String

    /// Replays dead letter `id` through one of `deliveries` (nil: the agent is starting). `sink`
    /// may be left out when only one sink holds `id`.
    func replay(id: String, sink: String?, deliveries: [DeliveryLoop]?) async -> DeadLetterReplayReply {
        guard DeadLetterStore.isValidID(id) else {
            return .refused("deadletter_replay needs a string field \"id\" naming a dead letter")
        }
        guard let deliveries else { return .refused("agent starting") }
        var name = sink
        if name == nil {
            let store = DeadLetterStore(dataDirectory: dataDirectory)
            let holders = (try? await BlockingExecutor.runDetached(name: "ferry-deadletter-lookup") { try store.sinks(holding: id) }) ?? []
            guard holders.count == 1 else {
                return .refused(holders.isEmpty ? "no dead letter \(id)"
                    : "dead letter \(id) exists for sinks \(holders.joined(separator: ", ")); give \"sink\"")
            }
            name = holders[0]
        }
        guard let delivery = deliveries.first(where: { $0.name == name }) else {
            return .refused("no sink named \"\(name ?? "")\"; sinks: \(deliveries.map(\.name).joined(separator: ", "))")
        }
        do {
            let events = try await delivery.replay(id: id)
            return DeadLetterReplayReply(ok: true, sink: delivery.name, id: id, events: events)
        } catch let error as AgentError {
            return DeadLetterReplayReply(ok: false, sink: delivery.name, id: id, error: error.message)
        } catch {
            return DeadLetterReplayReply(ok: false, sink: delivery.name, id: id, error: "\(error)")
        }
    }
}
