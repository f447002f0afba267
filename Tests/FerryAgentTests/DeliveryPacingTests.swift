@testable import FerryAgent
import FerryStorage
import Testing

/// When a delivery loop sends what it read: the pure decision (events in, actions out, the clock
/// an argument).
@Suite("DeliveryPacing: full batches at once, a trickle coalesced up to maxWaitMilliseconds")
struct DeliveryPacingTests {
    typealias Pending = DeliveryPacing.Pending
    static let batch = AgentConfiguration.SinkConfiguration.Batch(maxEvents: 100, maxBytes: 10_000, maxWaitMilliseconds: 200)

    struct Case: Sendable, CustomTestStringConvertible {
        var what: String
        var lastDeliveryAt: UInt64
        var pending: Pending?
        var now: UInt64
        var expected: DeliveryPacing.Action
        var testDescription: String { what }
    }

    static let cases: [Case] = [
        Case(what: "nothing read: idle", lastDeliveryAt: 0, pending: nil, now: 5_000, expected: .idle),
        Case(what: "full by count: at once", lastDeliveryAt: 1_000, pending: Pending(events: 100, bytes: 5_000, oldestAcceptedAt: 1_000),
             now: 1_001, expected: .deliver),
        Case(what: "full by bytes: at once", lastDeliveryAt: 1_000, pending: Pending(events: 3, bytes: 10_000, oldestAcceptedAt: 1_000),
             now: 1_001, expected: .deliver),
        Case(what: "a trickle after a delivery: waits until that delivery + maxWait", lastDeliveryAt: 1_000,
             pending: Pending(events: 1, bytes: 300, oldestAcceptedAt: 1_050), now: 1_050, expected: .wait(until: 1_200)),
        Case(what: "the deadline reached: deliver", lastDeliveryAt: 1_000,
             pending: Pending(events: 20, bytes: 6_000, oldestAcceptedAt: 1_050), now: 1_200, expected: .deliver),
        Case(what: "after a quiet spell longer than maxWait: at once", lastDeliveryAt: 1_000,
             pending: Pending(events: 1, bytes: 300, oldestAcceptedAt: 5_000), now: 5_000, expected: .deliver),
        Case(what: "left over from a full batch: due by its own acceptance + maxWait", lastDeliveryAt: 1_000,
             pending: Pending(events: 4, bytes: 1_200, oldestAcceptedAt: 900), now: 1_000, expected: .wait(until: 1_100)),
        Case(what: "left over and already due: at once", lastDeliveryAt: 1_000,
             pending: Pending(events: 4, bytes: 1_200, oldestAcceptedAt: 700), now: 1_000, expected: .deliver),
    ]

    @Test("the decision", arguments: cases)
    func decide(_ c: Case) {
        var pacing = DeliveryPacing(batch: Self.batch, startedAt: 0)
        pacing.delivered(at: c.lastDeliveryAt)
        #expect(pacing.decide(c.pending, now: c.now) == c.expected)
    }

    @Test("maxWaitMilliseconds 0: every partial batch goes at once")
    func noWait() {
        var batch = Self.batch
        batch.maxWaitMilliseconds = 0
        let pacing = DeliveryPacing(batch: batch, startedAt: 1_000)
        #expect(pacing.decide(Pending(events: 1, bytes: 10, oldestAcceptedAt: 1_000), now: 1_000) == .deliver)
    }

    @Test("the first events after start wait for the loop's start + maxWait, not longer")
    func firstBatch() {
        let pacing = DeliveryPacing(batch: Self.batch, startedAt: 10_000)
        #expect(pacing.decide(Pending(events: 1, bytes: 10, oldestAcceptedAt: 10_050), now: 10_050) == .wait(until: 10_200))
        // Events queued before the start (a backlog) were accepted long ago: they go at once.
        #expect(pacing.decide(Pending(events: 7, bytes: 70, oldestAcceptedAt: 2_000), now: 10_001) == .deliver)
    }

    @Test("no event waits longer than maxWaitMilliseconds, whatever the arrivals", arguments: [1, 7, 33, 199, 250, 1_000])
    func boundedWait(gap: Int) {
        // Events every `gap` ms; the loop delivers exactly when the decision says so.
        var pacing = DeliveryPacing(batch: Self.batch, startedAt: 0)
        var pending: [UInt64] = []
        var longest: UInt64 = 0, deliveries = 0
        var next: UInt64 = 0
        for now in UInt64(0)...5_000 {
            if now == next {
                pending.append(now)
                next += UInt64(gap)
            }
            let summary = pending.first.map { Pending(events: pending.count, bytes: pending.count * 10, oldestAcceptedAt: $0) }
            if pacing.decide(summary, now: now) == .deliver {
                longest = max(longest, now - pending[0])
                deliveries += 1
                pending.removeAll()
                pacing.delivered(at: now)
            }
        }
        #expect(longest <= 200)
        // At most one partial batch per maxWait (plus the full ones: 100 events each).
        #expect(deliveries <= 5_000 / 200 + 1 + 5_000 / (gap * 100) + 1)
    }

    @Test("a commit wakes a waiting loop only when it could fill the batch", arguments: [
        (Pending(events: 10, bytes: 1_000, oldestAcceptedAt: 0), 0, false),
        (Pending(events: 10, bytes: 1_000, oldestAcceptedAt: 0), 100, false),
        (Pending(events: 10, bytes: 1_000, oldestAcceptedAt: 0), 8_999, false),
        (Pending(events: 10, bytes: 1_000, oldestAcceptedAt: 0), 9_000, true),
        (Pending(events: 90, bytes: 900, oldestAcceptedAt: 0), 100, true),
        (Pending(events: 90, bytes: 900, oldestAcceptedAt: 0), 99, false),
    ] as [(Pending, Int, Bool)])
    func wakeCondition(pending: Pending, ahead: Int, expected: Bool) {
        let pacing = DeliveryPacing(batch: Self.batch, startedAt: 0)
        #expect(pacing.shouldRead(pending, committedBytesAhead: ahead) == expected)
    }

    @Test("the log moved to a later segment: read to find out")
    func unknownAhead() {
        let pacing = DeliveryPacing(batch: Self.batch, startedAt: 0)
        #expect(pacing.shouldRead(Pending(events: 1, bytes: 1, oldestAcceptedAt: 0), committedBytesAhead: nil))
        #expect(DeliveryLoop.bytesAhead(of: LogPosition(segment: 2, offset: 100), end: LogPosition(segment: 3, offset: 16)) == nil)
        #expect(DeliveryLoop.bytesAhead(of: LogPosition(segment: 2, offset: 100), end: LogPosition(segment: 2, offset: 400)) == 300)
        #expect(DeliveryLoop.bytesAhead(of: LogPosition(segment: 2, offset: 100), end: LogPosition(segment: 2, offset: 100)) == 0)
    }
}
