import Ferry
import FerryProtocol
import Foundation
import Synchronization

/// What became of one input line of `ferry emit --stdin` (or of the one event without it).
package struct LineOutcome: Sendable, Equatable {
    /// The outcomes, as printed (`"status"` in `--json`).
    package enum Status: String, Sendable, CaseIterable {
        /// Durable in the agent's queue.
        case accepted
        /// Acked accepted with reason `held`: stored durably but held until consent for its
        /// category is decided (the `hold` policy); delivered once granted, erased if denied.
        case held
        /// Acked accepted with reason `quarantined`: it breaks the host's tracking plan and is kept
        /// durably in the agent's quarantine, not delivered until released (`ferry quarantine`).
        /// Acked: a re-send would not help.
        case quarantined
        /// The agent already had it (same id, or an already used once-key): not stored again.
        case duplicate
        /// Acked, but the consent state blocks it: not stored.
        case blocked
        /// Acked and counted, kept local (local-only, or its category's persistence is off).
        case suppressed
        /// The agent refused it (`reason`: `too_large`, `full`, …): not stored.
        case rejected
        /// The line is not a valid event (`error` says why): never sent.
        case invalid
        /// Sent (or queued to send) but not acked before `--timeout`: it may or may not be stored.
        case unacknowledged
    }

    package var status: Status
    /// The event's id, once the agent acked it.
    package var id: EventID?
    /// The reject reason, or why the line is invalid.
    package var detail: String?

    package init(status: Status, id: EventID? = nil, detail: String? = nil) {
        self.status = status
        self.id = id
        self.detail = detail
    }

    /// The outcome of a receipt from the client library.
    package init(_ receipt: Receipt) {
        switch receipt.status {
        case .accepted where receipt.reason == .held: self.init(status: .held, id: receipt.id, detail: Self.reason(receipt))
        case .accepted where receipt.reason == .quarantined: self.init(status: .quarantined, id: receipt.id, detail: Self.reason(receipt))
        case .accepted: self.init(status: .accepted, id: receipt.id)
        // Blocked and suppressed lines (and a once-key duplicate) say why, when the agent does.
        case .duplicate: self.init(status: .duplicate, id: receipt.id, detail: Self.reason(receipt))
        case .blocked: self.init(status: .blocked, id: receipt.id, detail: Self.reason(receipt))
        case .suppressed: self.init(status: .suppressed, id: receipt.id, detail: Self.reason(receipt))
        case .rejected(let reason): self.init(status: .rejected, id: receipt.id, detail: reason.description)
        // `ferry emit` waits for room in the outbox, so this is only a safety net: never sent.
        case .droppedFromOutbox: self.init(status: .rejected, detail: "outbox_full")
        case .clientClosed: self.init(status: .unacknowledged)
        // The agent refused the whole message (e.g. `access_denied`): nothing of it was stored.
        case .refusedByAgent(let code): self.init(status: .rejected, detail: code.description)
        }
    }

    private static func reason(_ receipt: Receipt) -> String? {
        receipt.reason == .none ? nil : receipt.reason.description
    }

    /// An invalid input line.
    static func invalid(_ error: String) -> Self { .init(status: .invalid, detail: error) }

    /// The run's exit status from its outcomes' counts: the first that applies of unacknowledged
    /// (not running), invalid, rejected (failure), an unreadable input; else success.
    package static func exitStatus(_ count: (LineOutcome.Status) -> Int, readFailed: Bool) -> ExitStatus {
        count(.unacknowledged) > 0 ? .notRunning
            : count(.invalid) > 0 ? .invalidInput
            : count(.rejected) > 0 ? .failure
            : readFailed ? .unreadableInput
            : .success
    }

    /// `accepted=N duplicate=N rejected=N`, then each other outcome that is not zero (`held=N`,
    /// `quarantined=N`, …) in the order of ``LineOutcome/Status``.
    package static func summaryLine(_ count: (LineOutcome.Status) -> Int) -> String {
        var line = "accepted=\(count(.accepted)) duplicate=\(count(.duplicate)) rejected=\(count(.rejected))"
        for status in LineOutcome.Status.allCases where ![.accepted, .duplicate, .rejected].contains(status) && count(status) > 0 {
            line += " \(status.rawValue)=\(count(status))"
        }
        return line
    }
}

/// Prints each line's outcome in input order as soon as it and every line before it are known
/// (so a stream's report follows the stream), and counts them.
///
/// With `--json`, every line is one object on standard output (`{"line":2,"status":"invalid",
/// "error":"…"}`). In text, the lines that were not acked as sent (`rejected`, `invalid`,
/// `unacknowledged`) are named on standard error, and so are the `quarantined` ones (acked, but
/// not delivered until released); every other line was acked and goes on as usual.
final class EmitReporter: Sendable {
    private struct State {
        /// Line numbers (nil: the event of the command line) by report position.
        var lines: [Int: Int?] = [:]
        var ready: [Int: LineOutcome] = [:]
        var nextPosition = 0
        var nextToPrint = 0
        var counts: [LineOutcome.Status: Int] = [:]
    }

    private let state = Mutex(State())
    private let json: Bool

    init(json: Bool) {
        self.json = json
    }

    /// Reserves the next report position for input line `line` (nil for the single event).
    func expect(line: Int?) -> Int {
        state.withLock { state in
            defer { state.nextPosition += 1 }
            state.lines[state.nextPosition] = line
            return state.nextPosition
        }
    }

    /// Records the outcome at `position` and prints what is now complete, in order.
    func resolve(_ position: Int, _ outcome: LineOutcome) {
        // Printing under the lock keeps the order. This runs on the client's I/O thread (receipt
        // callbacks): the writes are small and unbuffered, and a reader of standard output that
        // stops reading slows the acks down, as back-pressure should.
        state.withLock { state in
            state.ready[position] = outcome
            state.counts[outcome.status, default: 0] += 1
            var out: [UInt8] = []
            var err: [UInt8] = []
            while let next = state.ready.removeValue(forKey: state.nextToPrint) {
                let line = state.lines.removeValue(forKey: state.nextToPrint) ?? nil
                state.nextToPrint += 1
                if json {
                    out += Self.jsonLine(line: line, next)
                } else if let text = Self.textLine(line: line, next) {
                    err += Array(text.utf8)
                }
            }
            if !out.isEmpty { FileHandle.standardOutput.write(Data(out)) }
            if !err.isEmpty { FileHandle.standardError.write(Data(err)) }
        }
    }

    /// How many lines ended with `status`.
    func count(_ status: LineOutcome.Status) -> Int {
        state.withLock { $0.counts[status, default: 0] }
    }

    /// How many lines were reported.
    var total: Int {
        state.withLock { $0.counts.values.reduce(0, +) }
    }

    /// `{"line":N,"status":"…","id":"…"|"reason":"…"|"error":"…"}` and a newline.
    private static func jsonLine(line: Int?, _ outcome: LineOutcome) -> [UInt8] {
        var out = Array("{".utf8)
        if let line { out += Array("\"line\":\(line),".utf8) }
        out += Array("\"status\":".utf8)
        JSONText.appendString(outcome.status.rawValue, to: &out)
        if let id = outcome.id {
            out += Array(",\"id\":".utf8)
            JSONText.appendString(id.description, to: &out)
        }
        if let detail = outcome.detail {
            out += Array((outcome.status == .invalid ? ",\"error\":" : ",\"reason\":").utf8)
            JSONText.appendString(detail, to: &out)
        }
        out += Array("}\n".utf8)
        return out
    }

    /// The stderr line of an outcome that is not an ack, or nil.
    private static func textLine(line: Int?, _ outcome: LineOutcome) -> String? {
        let what = line.map { "stdin line \($0)" } ?? "the event"
        switch outcome.status {
        case .accepted, .held, .duplicate, .blocked, .suppressed:
            return nil
        case .quarantined:
            return "ferry emit: \(what): quarantined (it breaks the tracking plan; kept, not delivered until released: see `ferry quarantine list`)\n"
        case .rejected:
            return "ferry emit: \(what): rejected by the agent (\(outcome.detail ?? "no reason"))\n"
        case .invalid:
            return "ferry emit: \(what): invalid, not sent: \(outcome.detail ?? "")\n"
        case .unacknowledged:
            return "ferry emit: \(what): unacknowledged (no ack before the timeout; it may or may not be stored)\n"
        }
    }
}
