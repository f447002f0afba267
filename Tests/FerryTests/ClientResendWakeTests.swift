import FerryTestKit
import Foundation
import Synchronization
import Testing

@testable import Ferry

/// The client's I/O thread sleeps in poll(2) without a deadline while nothing is in flight. A
/// batch the calling thread sends itself must still be re-sent if its ack never comes, so that
/// send arms the thread's alarm for the re-send (FerryClient+IO.swift, `sendPending`). Without
/// it the thread woke only if libzmq's notification descriptor happened to fire after the
/// caller's own read: a lost ack then hung the send (seen once under the whole suite's load in
/// "a lost ack is re-sent"). White-box: the alarm is the mechanism, and the ack that would clear
/// it never comes here.
@Suite("The client's re-send of a batch the caller sent")
struct ClientResendWakeTests {
    @Test("a batch the calling thread sends arms the sleeping I/O thread's alarm for its re-send")
    func callerSendArmsTheResend() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // An agent that never answers: the ack is lost every time.
        let fake = try FakeIngestAgent(runtimeDirectory: dir.appending("rt")) { _, _, _ in nil }
        defer { fake.stop() }
        let resendAfter = Duration.seconds(60)
        let client = try FerryClientReplyTests.makeClient(runtimeDirectory: dir.appending("rt"), source: "resend-wake",
                                                          resendAfter: resendAfter, sendDelay: .zero)
        // The I/O thread is asleep with nothing to wake it for.
        try await eventually("the I/O thread asleep without a deadline") {
            client.state.withLock { $0.ioAsleep && $0.ioWakesAt == nil && $0.inFlight.isEmpty }
        }
        let before = ContinuousClock.now
        _ = client.enqueue(Event(name: "ack-lost"))
        try await eventually("the calling thread sent the batch") { client.statistics.sentByCaller == 1 }
        let (asleep, wakesAt, alarmAt, oldest) = client.state.withLock { ($0.ioAsleep, $0.ioWakesAt, $0.alarmAt, $0.oldestSentAt) }
        let sentAt = try #require(oldest, "the batch is in flight")
        #expect(sentAt >= before)
        // Awake (it reads the in-flight batch's deadline before it sleeps again), or asleep with
        // a wake-up due by the re-send.
        #expect(!asleep || (wakesAt.map { $0 <= sentAt + resendAfter } ?? false),
                "the I/O thread sleeps past the re-send (wakes at \(String(describing: wakesAt)))")
        #if os(Linux)
        // On Linux by the alarm, not by a wake-up now; the I/O thread keeps an alarm due no
        // later than its own deadline, and nothing else clears it before an ack.
        #expect(alarmAt == sentAt + resendAfter)
        #endif
        await client.shutdown()
    }
}
