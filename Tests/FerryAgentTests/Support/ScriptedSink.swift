import FerryProtocol
@testable import FerryAgent
import Foundation
import FerryTestKit
@testable import FerryStorage
import FerryThreads
import Synchronization

/// A real ``Sink`` for delivery-loop tests: it keeps what it is given in memory and, on command,
/// fails (with any ``SinkError``) or holds every delivery until told otherwise.
final class ScriptedSink: Sink {
    enum Mode: Sendable {
        case accept
        case fail(SinkError)
        /// Deliveries wait (a slow upstream) until the mode changes.
        case hang
    }

    let name: String
    private let state: Mutex<State>
    private let changed = AsyncSignal()

    private struct State {
        var mode: Mode
        var batches: [DeliveryBatch] = []
        /// Wall-clock ms at the start of every attempt.
        var attempts: [UInt64] = []
        /// The name of the thread each attempt ran on.
        var threads: [String] = []
        /// How ``erase(_:)`` answers (`nil`: the default, not supported).
        var eraseMode: Mode?
        /// Erasure requests accepted, in order, and every attempt.
        var erasures: [SinkErasure] = []
        var eraseAttempts = 0
    }

    init(name: String, mode: Mode = .accept) {
        self.name = name
        state = Mutex(State(mode: mode))
    }

    func set(_ mode: Mode) {
        state.withLock { $0.mode = mode }
        changed.signal()
    }

    /// Batches acknowledged, in order.
    var batches: [DeliveryBatch] { state.withLock { $0.batches } }
    /// Every acknowledged event, in order.
    var events: [StoredEvent] { batches.flatMap(\.events) }
    /// Their ids as text.
    var ids: [String] { events.map { $0.decodedID.description } }
    /// Start times of all attempts (successful or not).
    var attempts: [UInt64] { state.withLock { $0.attempts } }

    func recover(checkpoint: [UInt8]?) async throws -> [UInt8]? { nil }

    /// The names of the threads the attempts ran on, in order.
    var threads: [String] { state.withLock { $0.threads } }

    func deliver(_ batch: DeliveryBatch) async throws -> [UInt8]? {
        let thread = currentThreadName()
        state.withLock {
            $0.attempts.append(WallClock.unixMilliseconds())
            $0.threads.append(thread)
        }
        while true {
            switch state.withLock({ $0.mode }) {
            case .accept:
                state.withLock { $0.batches.append(batch) }
                return nil
            case .fail(let error):
                throw error
            case .hang:
                await changed.wait()
                if Task.isCancelled { throw CancellationError() }
            }
        }
    }

    func shutdown() async throws {}

    /// Makes ``erase(_:)`` answer as `mode` (`nil`: not supported, the protocol's default).
    func setErase(_ mode: Mode?) {
        state.withLock { $0.eraseMode = mode }
        changed.signal()
    }

    /// Erasure requests accepted.
    var erasures: [SinkErasure] { state.withLock { $0.erasures } }
    /// Erasure attempts made.
    var eraseAttempts: Int { state.withLock { $0.eraseAttempts } }

    func erase(_ request: SinkErasure) async throws -> String? {
        let mode = state.withLock { state -> Mode? in
            state.eraseAttempts += 1
            return state.eraseMode
        }
        switch mode {
        case nil: throw SinkError(.permanent, "sink \(name) does not support erasure")
        case .accept:
            state.withLock { $0.erasures.append(request) }
            return "ref-" + request.id.prefix(8)
        case .fail(let error): throw error
        case .hang: throw SinkError(.retry(after: nil), "hanging")
        }
    }
}

extension SinkError {
    /// A retryable failure as an unreachable upstream gives.
    static let unavailable = SinkError(.retry(after: nil), "upstream unavailable", upstreamStatus: 503, upstreamBody: "try later")
    /// A permanent refusal as a 400 gives.
    static let badRequest = SinkError(.permanent, "upstream refused the batch", upstreamStatus: 400,
                                      upstreamBody: #"{"error":"field 'name' is invalid"}"#)
}

/// The calling OS thread's name (`/proc/thread-self/comm`: `ferry-sink-<name>` on a sink's thread).
func currentThreadName() -> String {
    ((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "?").trimmingCharacters(in: .newlines)
}
