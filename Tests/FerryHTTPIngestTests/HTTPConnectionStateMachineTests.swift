import NIOCore
import Testing

@testable import FerryHTTPIngest

/// The connection's decisions, pure: events in, actions out, a fake clock (no sleeps, no channel).
@Suite struct HTTPConnectionStateMachineTests {
    typealias Machine = HTTPConnectionStateMachine
    typealias Action = HTTPConnectionStateMachine.Action

    /// A clock the test moves.
    struct FakeClock {
        var now = NIODeadline.uptimeNanoseconds(1_000_000_000)
        mutating func advance(_ amount: TimeAmount) { now = now + amount }
    }

    /// The listener's body budget, as a test sees it.
    final class Budget {
        var limit: Int
        var held = 0
        init(limit: Int = 1 << 20) { self.limit = limit }
        func reserve(_ bytes: Int) -> Bool {
            guard held + bytes <= limit else { return false }
            held += bytes
            return true
        }
        func apply(_ actions: [Action]) {
            for case .release(let bytes) in actions { held -= bytes }
        }
    }

    static func configuration(maxBodyBytes: Int = 1000, maxDiscardedBytes: Int = 4000, maxQueued: Int = 16) -> Machine.Configuration {
        Machine.Configuration(requestTimeout: .seconds(10), idleTimeout: .seconds(60), shutdownGrace: .seconds(5),
                              maxBodyBytes: maxBodyBytes, maxDiscardedBytes: maxDiscardedBytes, maxQueued: maxQueued,
                              hostPolicy: .tcp(listenHost: "127.0.0.1", allowedHosts: [], allowedOrigins: []))
    }

    static let post = Machine.Head(method: "POST", uri: "/v1/batch", host: "127.0.0.1:8088")

    static func response(_ status: Int, _ text: String = "{}") -> IngestResponse {
        IngestResponse(status: status, body: Array(text.utf8))
    }

    /// The writes among `actions`: status and keep-alive.
    static func writes(_ actions: [Action]) -> [(status: Int, keepAlive: Bool)] {
        actions.compactMap { if case .write(let response, let keepAlive) = $0 { (response.status, keepAlive) } else { nil } }
    }

    static func processed(_ actions: [Action]) -> [Machine.Request] {
        actions.compactMap { if case .process(let request) = $0 { request } else { nil } }
    }

    /// Sends a whole request (head, body, end) and returns the actions of its end.
    static func send(_ machine: inout Machine, _ head: Machine.Head = post, body: String = #"{"batch":[]}"#,
                     clock: FakeClock, budget: Budget) -> [Action] {
        budget.apply(machine.bytesArrived(now: clock.now))
        budget.apply(machine.head(head, localPort: 8088, now: clock.now))
        if !body.isEmpty { budget.apply(machine.body(ByteBuffer(string: body), now: clock.now, reserve: budget.reserve)) }
        let actions = machine.end(now: clock.now)
        budget.apply(actions)
        return actions
    }

    @Test("a request that does not arrive whole within the read deadline is answered 408 and the connection closes")
    func slowClient() {
        var clock = FakeClock()
        let budget = Budget()
        var machine = Machine(configuration: Self.configuration(), now: clock.now)
        #expect(machine.activated(now: clock.now) == [.scheduleTimer(at: clock.now + .seconds(60))])
        clock.advance(.seconds(1))
        let started = clock.now
        #expect(machine.bytesArrived(now: clock.now) == [.scheduleTimer(at: started + .seconds(10))])
        budget.apply(machine.head(Self.post, localPort: 8088, now: clock.now))
        budget.apply(machine.body(ByteBuffer(string: "{\"ba"), now: clock.now, reserve: budget.reserve))
        #expect(budget.held == 4)
        // More bytes do not move the deadline: it runs from the first byte.
        clock.advance(.seconds(9))
        #expect(machine.body(ByteBuffer(string: "t"), now: clock.now, reserve: budget.reserve).isEmpty)
        clock.advance(.seconds(1))
        let actions = machine.timerFired(now: clock.now)
        budget.apply(actions)
        #expect(Self.writes(actions).map(\.status) == [408])
        #expect(Self.writes(actions).map(\.keepAlive) == [false])
        #expect(budget.held == 0)
        #expect(!machine.isOpen)
        // Nothing more is taken.
        #expect(machine.end(now: clock.now).isEmpty)
    }

    @Test("a timer that fires early changes nothing but re-arms")
    func earlyTimer() {
        var clock = FakeClock()
        var machine = Machine(configuration: Self.configuration(), now: clock.now)
        _ = machine.activated(now: clock.now)
        _ = machine.bytesArrived(now: clock.now)
        clock.advance(.seconds(3))
        #expect(machine.timerFired(now: clock.now) == [.scheduleTimer(at: clock.now + .seconds(7))])
    }

    @Test("a body past the listener's budget is answered 503 busy, and every byte it held is given back")
    func bodyBudget() {
        let clock = FakeClock()
        let budget = Budget(limit: 10)
        var machine = Machine(configuration: Self.configuration(), now: clock.now)
        _ = machine.activated(now: clock.now)
        _ = machine.head(Self.post, localPort: 8088, now: clock.now)
        budget.apply(machine.body(ByteBuffer(string: "12345678"), now: clock.now, reserve: budget.reserve))
        #expect(budget.held == 8)
        budget.apply(machine.body(ByteBuffer(string: "9abc"), now: clock.now, reserve: budget.reserve))
        #expect(budget.held == 0)
        let actions = machine.end(now: clock.now)
        #expect(Self.processed(actions).isEmpty)
        guard case .write(let response, let keepAlive)? = actions.first(where: { if case .write = $0 { true } else { false } }) else {
            Issue.record("no answer: \(actions)")
            return
        }
        #expect(response.status == 503 && response.code == "busy" && response.retryAfter == IngestVerdict.retryAfterBusy)
        // A thrown-away body ends the connection.
        #expect(!keepAlive)
    }

    @Test("a stored request's body is held against the budget until its answer is written")
    func budgetHeldWhileStored() {
        var clock = FakeClock()
        let budget = Budget()
        var machine = Machine(configuration: Self.configuration(), now: clock.now)
        _ = machine.activated(now: clock.now)
        let actions = Self.send(&machine, clock: clock, budget: budget)
        #expect(Self.processed(actions).count == 1)
        #expect(budget.held == 12)
        clock.advance(.milliseconds(3))
        let answered = machine.responseReady(Self.response(200), number: 0, now: clock.now)
        budget.apply(answered)
        #expect(budget.held == 0)
        #expect(Self.writes(answered).map(\.status) == [200])
    }

    @Test("oversize: a declared length past the limit, a body growing past it, and a body thrown away past its bound")
    func oversize() {
        let clock = FakeClock()
        let budget = Budget()
        var machine = Machine(configuration: Self.configuration(maxBodyBytes: 10, maxDiscardedBytes: 40), now: clock.now)
        _ = machine.activated(now: clock.now)
        var declared = Self.post
        declared.contentLength = 20
        let first = Self.send(&machine, declared, body: String(repeating: "x", count: 20), clock: clock, budget: budget)
        #expect(Self.writes(first).map(\.status) == [413])
        #expect(Self.writes(first).map(\.keepAlive) == [false])

        var growing = Machine(configuration: Self.configuration(maxBodyBytes: 10, maxDiscardedBytes: 40), now: clock.now)
        _ = growing.head(Self.post, localPort: 8088, now: clock.now)
        budget.apply(growing.body(ByteBuffer(string: "123456"), now: clock.now, reserve: budget.reserve))
        budget.apply(growing.body(ByteBuffer(string: "789abc"), now: clock.now, reserve: budget.reserve))
        #expect(budget.held == 0)
        // Past the discard bound, answered at once, before the body ends.
        let early = growing.body(ByteBuffer(string: String(repeating: "y", count: 40)), now: clock.now, reserve: budget.reserve)
        #expect(Self.writes(early).map(\.status) == [413])
        #expect(Self.writes(early).map(\.keepAlive) == [false])
        #expect(!growing.isOpen)
    }

    @Test("keep-alive: answers keep the connection open as the request asks; an idle connection closes after the idle timeout")
    func keepAlive() {
        var clock = FakeClock()
        let budget = Budget()
        var machine = Machine(configuration: Self.configuration(), now: clock.now)
        _ = machine.activated(now: clock.now)
        for number in 0..<2 {
            _ = Self.send(&machine, clock: clock, budget: budget)
            let answered = machine.responseReady(Self.response(200), number: number, now: clock.now)
            #expect(Self.writes(answered).map(\.keepAlive) == [true])
            // Idle again: the idle timer runs from the answer.
            #expect(answered.contains(.scheduleTimer(at: clock.now + .seconds(60))))
            clock.advance(.seconds(30))
        }
        // Being processed is not idle time.
        _ = Self.send(&machine, clock: clock, budget: budget)
        clock.advance(.seconds(120))
        #expect(!machine.timerFired(now: clock.now).contains(.close))
        _ = machine.responseReady(Self.response(200), number: 2, now: clock.now)
        clock.advance(.seconds(59))
        #expect(!machine.timerFired(now: clock.now).contains(.close))
        clock.advance(.seconds(1))
        #expect(machine.timerFired(now: clock.now).contains(.close))

        var closing = Machine(configuration: Self.configuration(), now: clock.now)
        var head = Self.post
        head.keepAlive = false
        _ = Self.send(&closing, head, clock: clock, budget: budget)
        #expect(Self.writes(closing.responseReady(Self.response(200), number: 0, now: clock.now)).map(\.keepAlive) == [false])
    }

    @Test("pipelined requests are processed one at a time and answered in the order they came")
    func pipelined() {
        let clock = FakeClock()
        let budget = Budget()
        var machine = Machine(configuration: Self.configuration(maxQueued: 3), now: clock.now)
        _ = machine.activated(now: clock.now)
        let first = Self.send(&machine, clock: clock, budget: budget)
        #expect(Self.processed(first).map(\.number) == [0])
        // A request refused at its head is decided at once but answered in its turn.
        let refused = Self.send(&machine, Machine.Head(method: "POST", uri: "/v1/nope", host: "127.0.0.1"), body: "", clock: clock, budget: budget)
        #expect(Self.writes(refused).isEmpty)
        let third = Self.send(&machine, clock: clock, budget: budget)
        #expect(Self.processed(third).isEmpty)
        // Three waiting: reading pauses.
        #expect(!machine.shouldRead)
        let answered = machine.responseReady(Self.response(200, "first"), number: 0, now: clock.now)
        #expect(Self.writes(answered).map(\.status) == [200, 404])
        #expect(Self.processed(answered).map(\.number) == [2])
        #expect(answered.contains(.resumeReading))
        #expect(machine.shouldRead)
        let last = machine.responseReady(Self.response(201, "third"), number: 2, now: clock.now)
        #expect(Self.writes(last).map(\.status) == [201])
        // An answer for a request not being processed is ignored.
        #expect(machine.responseReady(Self.response(200), number: 7, now: clock.now).isEmpty)
    }

    @Test("quiescing (SIGTERM) writes the answer being made and every queued one, the last with Connection: close")
    func quiesceWithResponsesQueued() {
        var clock = FakeClock()
        let budget = Budget()
        var machine = Machine(configuration: Self.configuration(), now: clock.now)
        _ = machine.activated(now: clock.now)
        _ = Self.send(&machine, clock: clock, budget: budget)
        _ = Self.send(&machine, Machine.Head(method: "GET", uri: "/v1/batch", host: "127.0.0.1"), body: "", clock: clock, budget: budget)
        _ = Self.send(&machine, clock: clock, budget: budget)
        // A fourth request half received.
        _ = machine.head(Self.post, localPort: 8088, now: clock.now)
        budget.apply(machine.body(ByteBuffer(string: "{"), now: clock.now, reserve: budget.reserve))
        #expect(budget.held == 25)
        let quiesced = machine.quiesce(now: clock.now)
        budget.apply(quiesced)
        // The first is still being stored: nothing is written before its answer, the rest is given back.
        #expect(Self.writes(quiesced).isEmpty)
        #expect(budget.held == 12)
        #expect(!machine.shouldRead)
        clock.advance(.milliseconds(2))
        let answered = machine.responseReady(Self.response(200), number: 0, now: clock.now)
        budget.apply(answered)
        #expect(Self.writes(answered).map(\.status) == [200, 405, 503, 503])
        #expect(Self.writes(answered).map(\.keepAlive) == [true, true, true, false])
        #expect(budget.held == 0)
        #expect(!machine.isOpen)
    }

    @Test("quiescing an idle connection closes it; one whose answer never comes closes after the grace")
    func quiesceIdleAndGrace() {
        var clock = FakeClock()
        let budget = Budget()
        var idle = Machine(configuration: Self.configuration(), now: clock.now)
        _ = idle.activated(now: clock.now)
        #expect(idle.quiesce(now: clock.now).contains(.close))

        var stuck = Machine(configuration: Self.configuration(), now: clock.now)
        _ = stuck.activated(now: clock.now)
        _ = Self.send(&stuck, clock: clock, budget: budget)
        #expect(stuck.quiesce(now: clock.now).contains(.scheduleTimer(at: clock.now + .seconds(5))))
        clock.advance(.seconds(5))
        let actions = stuck.timerFired(now: clock.now)
        budget.apply(actions)
        #expect(actions.contains(.close))
        #expect(budget.held == 0)
    }

    @Test("a request naming another Host is answered 421, one with an Origin not allowed 403; neither is processed", arguments: [
        ("evil.example", nil, 421),
        ("127.0.0.1:8088", "http://evil.example", 403),
    ] as [(String, String?, Int)])
    func hostAndOrigin(host: String, origin: String?, status: Int) {
        let clock = FakeClock()
        let budget = Budget()
        var machine = Machine(configuration: Self.configuration(), now: clock.now)
        _ = machine.activated(now: clock.now)
        var head = Self.post
        head.host = host
        head.origin = origin
        let actions = Self.send(&machine, head, clock: clock, budget: budget)
        #expect(Self.processed(actions).isEmpty)
        #expect(Self.writes(actions).map(\.status) == [status])
        #expect(budget.held == 0)
    }

    @Test("a protocol error is answered 400 in its turn; once the connection is closing it changes nothing")
    func protocolError() {
        let clock = FakeClock()
        let budget = Budget()
        var machine = Machine(configuration: Self.configuration(), now: clock.now)
        _ = machine.activated(now: clock.now)
        _ = Self.send(&machine, clock: clock, budget: budget)
        #expect(Self.writes(machine.protocolError(now: clock.now)).isEmpty)
        #expect(!machine.shouldRead)
        let answered = machine.responseReady(Self.response(200), number: 0, now: clock.now)
        #expect(Self.writes(answered).map(\.status) == [200, 400])
        #expect(Self.writes(answered).map(\.keepAlive) == [true, false])
        #expect(machine.protocolError(now: clock.now).isEmpty)
    }

    @Test("closing gives back every byte held, and answers coming after are dropped")
    func closedReleases() {
        let clock = FakeClock()
        let budget = Budget()
        var machine = Machine(configuration: Self.configuration(), now: clock.now)
        _ = machine.activated(now: clock.now)
        _ = Self.send(&machine, clock: clock, budget: budget)
        _ = Self.send(&machine, clock: clock, budget: budget)
        _ = machine.head(Self.post, localPort: 8088, now: clock.now)
        budget.apply(machine.body(ByteBuffer(string: "abc"), now: clock.now, reserve: budget.reserve))
        #expect(budget.held == 27)
        budget.apply(machine.closed())
        #expect(budget.held == 0)
        #expect(machine.responseReady(Self.response(200), number: 0, now: clock.now).isEmpty)
    }
}
