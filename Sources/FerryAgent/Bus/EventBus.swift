import FerryProtocol
import FerryStorage
import FerryThreads
import Synchronization

/// The event bus (`ipc://<runtime dir>/events`): the one type that publishes on every topic.
///
/// Every part that has something to say gets the bus at construction and calls one of its
/// `publish…` methods, from any thread: the ingest stages (each answered batch's outcomes, a
/// request refused whole), the commit thread (`dropped`, `lost`), the delivery loops
/// (`delivered`, `blocked` at send time, `circuit`) and the consent worker (`consent`,
/// `purged`). The messages are built here (``BusMessage``) and queued for the socket thread,
/// which owns the XPUB socket and sends what ``take(_:)`` hands it. The bus knows the
/// subscriptions the socket thread has seen, so nothing is built for a topic nobody listens to.
final class EventBus: Sendable {
    /// A queued publication: a built message, or a committed batch whose outcomes are built on
    /// the socket thread (so neither the commit thread nor an ingest path's threads spend on it).
    private enum Item: Sendable {
        case message(BusTopic, [UInt8])
        case outcomes(CommittedBatch)
    }

    private let queue: SocketQueue<Item>
    private let subscriptions = Mutex<Set<[UInt8]>>([])
    /// The topics some subscription matches, one bit per ``BusTopic``, recomputed when a
    /// subscription changes: the publishers ask per message.
    private let wanted = Atomic<UInt64>(0)

    /// The topics of an answered batch.
    private static let outcomeTopics: [BusTopic] = [.accepted, .rejected, .blocked, .suppressed, .held]

    /// A bus whose publications wake the socket thread through `wakeup`.
    init(wakeup: SocketWakeup) {
        queue = SocketQueue(wakeup: wakeup)
    }

    // MARK: Subscriptions (the socket thread reports them)

    /// Whether any subscriber would receive `topic`.
    func wants(_ topic: BusTopic) -> Bool {
        wanted.load(ordering: .acquiring) & Self.bit(topic) != 0
    }

    /// Records a subscription (`subscribe` true) or its end, as the XPUB socket reported it.
    func updateSubscription(_ prefix: [UInt8], subscribe: Bool) {
        subscriptions.withLock { subs in
            if subscribe { subs.insert(prefix) } else { subs.remove(prefix) }
            var bits: UInt64 = 0
            for topic in BusTopic.allCases {
                let name = Array(topic.rawValue.utf8)
                if subs.contains(where: { name.starts(with: $0) }) { bits |= Self.bit(topic) }
            }
            wanted.store(bits, ordering: .releasing)
        }
    }

    private static func bit(_ topic: BusTopic) -> UInt64 {
        let index: UInt64 = switch topic {
        case .accepted: 0
        case .delivered: 1
        case .dropped: 2
        case .rejected: 3
        case .blocked: 4
        case .suppressed: 5
        case .held: 6
        case .purged: 7
        case .consent: 8
        case .circuit: 9
        case .lost: 10
        case .quarantined: 11
        }
        return 1 << index
    }

    // MARK: Publishing (any thread)

    /// Publishes the outcome of each event of an answered batch, whatever path it came by:
    /// `accepted`, `rejected` with its reason, or the consent topic of its note (`blocked`,
    /// `suppressed`, `held`) with its reason. Built on the socket thread, for subscribers only.
    func publishOutcomes(of batch: CommittedBatch) {
        let any = wants(.accepted) || wants(.rejected) || (!batch.notes.isEmpty && (wants(.blocked) || wants(.suppressed) || wants(.held) || wants(.quarantined)))
        guard any else { return }
        queue.post(.outcomes(batch))
    }

    /// Publishes stored events on `topic` (`delivered`, `blocked` at send time, `dropped`), with
    /// the `reason` and `sink` given and, when `origins` is true, each event's origin.
    func publishEvents(_ topic: BusTopic, _ events: [StoredEvent], at: UInt64, reason: String? = nil, sink: String? = nil,
                       origins: Bool = false) {
        guard wants(topic) else { return }
        for event in events {
            let origin = origins ? EventOrigin(metadata: event.metadata) : nil
            if let json = BusMessage.event(topic: topic, frame: event.frame, at: at, reason: reason, sink: sink, origin: origin) {
                queue.post(.message(topic, json))
            }
        }
    }

    /// Publishes a client session's lost events (`lost`).
    func publishLost(_ loss: SessionTable.Loss, at: UInt64) {
        guard wants(.lost) else { return }
        queue.post(.message(.lost, BusMessage.lost(loss, at: at)))
    }

    /// Publishes a sink's circuit change (`circuit`).
    func publishCircuit(_ change: CircuitChange) {
        guard wants(.circuit) else { return }
        queue.post(.message(.circuit, BusMessage.circuit(change)))
    }

    /// Publishes a finished consent change (`consent`): the key changed, its old and new values
    /// (JSON text), the audit entry's time and number.
    func publishConsent(change: String, old: String, new: String, at: Int, seq: Int) {
        guard wants(.consent) else { return }
        queue.post(.message(.consent, BusMessage.consent(change: change, old: old, new: new, at: at, seq: seq)))
    }

    /// Publishes the counts of a purge, an erasure or a hold expiry (`purged`).
    func publishPurged(queued: Int, held: Int, quarantined: Int = 0, total: Int, reason: String, at: Int) {
        guard wants(.purged) else { return }
        queue.post(.message(.purged, BusMessage.purged(queued: queued, held: held, quarantined: quarantined, total: total, reason: reason, at: at)))
    }

    /// Publishes a request an ingest path refused as a whole (`rejected`): the path, its status
    /// and code, the reason and the sender's uid when known.
    func publishRefusal(path: String, status: Int, code: String, reason: String, uid: UInt32?) {
        guard wants(.rejected) else { return }
        queue.post(.message(.rejected, BusMessage.refusal(path: path, status: status, code: code, reason: reason, uid: uid,
                                                          at: WallClock.unixMilliseconds())))
    }

    // MARK: Draining (the socket thread)

    /// Hands every queued publication to `send` (topic, message), oldest first, building the
    /// outcomes of answered batches now.
    func take(_ send: (BusTopic, [UInt8]) -> Void) {
        for item in queue.take() {
            switch item {
            case .message(let topic, let json):
                send(topic, json)
            case .outcomes(let batch):
                outcomes(of: batch, send)
            }
        }
    }

    private func outcomes(of batch: CommittedBatch, _ send: (BusTopic, [UInt8]) -> Void) {
        let origin = batch.origin.withUnsafeBytes { EventOrigin(metadata: RecordMetadata(decoding: $0)) }
        for (index, (entry, frame)) in zip(batch.entries, batch.frames).enumerated() {
            let topic: BusTopic, reason: String?
            if let note = batch.notes[index] {
                (topic, reason) = (note.topic, note.reason)
            } else if entry.status == .accepted {
                (topic, reason) = (.accepted, nil)
            } else if entry.status == .rejected {
                (topic, reason) = (.rejected, entry.reason.description)
            } else {
                continue
            }
            guard wants(topic),
                  let json = BusMessage.event(topic: topic, frame: frame, at: batch.acceptedAt, reason: reason, origin: origin)
            else { continue }
            send(topic, json)
        }
    }
}
