@testable import FerryAgent
import Testing

/// The breaker is the one place a sink's circuit and its failures since the last success are
/// kept; `ferry status` reads them from it.
@Suite("CircuitBreaker: the circuit and the failures status shows")
struct CircuitBreakerTests {
    @Test("transient failures open the circuit at the threshold; a probe after the open period decides")
    func opensAndCloses() {
        var breaker = CircuitBreaker(.init(failureThreshold: 2, openMilliseconds: 100))
        #expect(breaker.failed(now: 0) == nil)
        #expect(breaker.failed(now: 10).map { [$0.0, $0.1] } == [.closed, .open])
        #expect(breaker.state == .open && breaker.consecutiveFailures == 2)
        #expect(breaker.admit(now: 50).wait == 60)
        let probe = breaker.admit(now: 110)
        #expect(probe.wait == nil && probe.changed.map { [$0.0, $0.1] } == [.open, .halfOpen])
        #expect(breaker.succeeded().map { [$0.0, $0.1] } == [.halfOpen, .closed])
        #expect(breaker.state == .closed && breaker.consecutiveFailures == 0 && breaker.failures == 0)
    }

    @Test("a failed probe opens the circuit again at once, even after a reload raised the threshold")
    func failedProbe() {
        var breaker = CircuitBreaker(.init(failureThreshold: 2, openMilliseconds: 100))
        _ = breaker.failed(now: 0)
        _ = breaker.failed(now: 10)
        breaker.reconfigure(.init(failureThreshold: 5, openMilliseconds: 100))
        #expect(breaker.admit(now: 200).changed.map { [$0.0, $0.1] } == [.open, .halfOpen])
        #expect(breaker.failed(now: 210).map { [$0.0, $0.1] } == [.halfOpen, .open])
        #expect(breaker.state == .open && breaker.admit(now: 250).wait == 60)
    }

    @Test("a permanent failure is counted for status but never opens the circuit")
    func permanent() {
        var breaker = CircuitBreaker(.init(failureThreshold: 2, openMilliseconds: 100))
        breaker.failedPermanently()
        breaker.failedPermanently()
        #expect(breaker.state == .closed && breaker.consecutiveFailures == 2 && breaker.failures == 0)
        #expect(breaker.failed(now: 0) == nil)
        #expect(breaker.consecutiveFailures == 3)
        _ = breaker.succeeded()
        #expect(breaker.consecutiveFailures == 0)
    }
}

/// docs/DELIVERY.md: permanent errors say the batch is bad, not the upstream (issue 39).
@Suite("CircuitBreaker: a permanent answer is an answer")
struct CircuitBreakerPermanentTests {
    @Test("a permanent error on the half-open probe closes the circuit and starts the transient count again")
    func permanentProbe() {
        var breaker = CircuitBreaker(.init(failureThreshold: 2, openMilliseconds: 100))
        _ = breaker.failed(now: 0)
        _ = breaker.failed(now: 10)
        #expect(breaker.state == .open)
        #expect(breaker.admit(now: 200).changed.map { [$0.0, $0.1] } == [.open, .halfOpen])
        #expect(breaker.failedPermanently().map { [$0.0, $0.1] } == [.halfOpen, .closed])
        #expect(breaker.state == .closed && breaker.failures == 0 && breaker.consecutiveFailures == 3)
        // One transient failure after it does not reopen a threshold-2 circuit.
        #expect(breaker.failed(now: 300) == nil && breaker.state == .closed)
    }

    @Test("a permanent error while closed changes no state but ends the transient streak")
    func permanentClosed() {
        var breaker = CircuitBreaker(.init(failureThreshold: 2, openMilliseconds: 100))
        _ = breaker.failed(now: 0)
        #expect(breaker.failedPermanently() == nil)
        #expect(breaker.failed(now: 10) == nil && breaker.state == .closed)
    }
}
