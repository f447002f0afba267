import Foundation
import Synchronization
import Testing
@testable import ZeroMQ

/// ``ZMQWaiter`` asks a socket for `ZMQ_EVENTS` only when its readiness may have changed. These
/// tests look for the two ways that can go wrong: a message reported that is not there, and a
/// message that is there but never reported (a lost wake-up: the wait would sleep to its
/// timeout with a message queued).
@Suite("ZeroMQ waiter")
struct WaiterTests {
    /// A PULL socket bound to `endpoint` and a PUSH socket connected to it, in `context`.
    private static func pair(_ context: ZMQContext, _ endpoint: String) throws -> (pull: ZMQSocket, push: ZMQSocket) {
        let pull = try ZMQSocket(context: context, type: .pull)
        try pull.bind(endpoint)
        let push = try ZMQSocket(context: context, type: .push)
        try push.connect(endpoint)
        return (pull, push)
    }

    @Test("reports a queued message, nothing once it is read, and the next one")
    func readinessFollowsTheQueue() throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let (pull, push) = try Self.pair(context, "inproc://waiter-basic")
        defer { pull.close(); push.close() }
        let waiter = try ZMQWaiter([.socket(pull, .readable)])

        #expect(try waiter.wait(timeout: .milliseconds(20)) == [[]])
        try push.send([[1]])
        #expect(try waiter.wait(timeout: .seconds(10)) == [.readable])
        #expect(try pull.receive(dontWait: true) == [[1]])
        #expect(try waiter.wait(timeout: .milliseconds(20)) == [[]], "nothing queued: nothing reported")
        try push.send([[2]])
        #expect(try waiter.wait(timeout: .seconds(10)) == [.readable])
    }

    @Test("a socket read only in part is reported again without a new notification")
    func partlyReadSocketStaysReady() throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let (pull, push) = try Self.pair(context, "inproc://waiter-partial")
        defer { pull.close(); push.close() }
        let waiter = try ZMQWaiter([.socket(pull, .readable)])
        for value: UInt8 in 1...3 { try push.send([[value]]) }
        for value: UInt8 in 1...3 {
            // Each message was queued before the previous wait: no notification is due for it.
            #expect(try waiter.wait(timeout: .seconds(10)) == [.readable], "message \(value) is queued")
            #expect(try pull.receive(dontWait: true) == [[value]])
        }
        #expect(try waiter.wait(timeout: .milliseconds(20)) == [[]])
    }

    @Test("a send that takes the socket's notification does not hide a message that came before it")
    func sendDoesNotHideAMessage() throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let a = try ZMQSocket(context: context, type: .pair)
        defer { a.close() }
        try a.bind("inproc://waiter-send")
        let b = try ZMQSocket(context: context, type: .pair)
        defer { b.close() }
        try b.connect("inproc://waiter-send")
        let waiter = try ZMQWaiter([.socket(a, .readable)])
        // An empty wait: a's readiness is read (nothing) and it sleeps 20 ms, longer than libzmq
        // waits between two passes over a socket's commands when sending.
        #expect(try waiter.wait(timeout: .milliseconds(20)) == [[]])
        try b.send([[1]])  // signals a's notification descriptor
        try a.send([[2]])  // processes a's commands: takes that signal, reports nothing
        // Had the waiter trusted the descriptor alone, this would sleep with the message queued.
        #expect(try waiter.wait(timeout: .seconds(10)) == [.readable])
        #expect(try a.receive(dontWait: true) == [[1]])
        #expect(try b.receive(dontWait: true) == [[2]])
    }

    @Test("a disabled socket is left out of the wait and reported once enabled again")
    func disabledSocketKeepsItsMessage() throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let (pull, push) = try Self.pair(context, "inproc://waiter-disabled")
        defer { pull.close(); push.close() }
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let waiter = try ZMQWaiter([.fileDescriptor(fds[0], .readable), .socket(pull, .readable)])
        try push.send([[7]])
        #expect(try waiter.wait(timeout: .milliseconds(20)) { $0 == 0 } == [[], []])
        var byte: UInt8 = 1
        #expect(write(fds[1], &byte, 1) == 1)
        #expect(try waiter.wait(timeout: .seconds(10)) { $0 == 0 } == [.readable, []])
        #expect(try waiter.wait(timeout: .seconds(10)) == [.readable, .readable], "the pipe and the kept message")
        #expect(try pull.receive(dontWait: true) == [[7]])
    }

    @Test("messages from another thread over IPC, at random gaps: every one seen (a lost wake-up would leave the last ones unseen)")
    func noLostWakeUps() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("waiter-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let endpoint = "ipc://" + directory.appendingPathComponent("s").path
        let context = try ZMQContext()
        defer { context.terminate() }
        let pull = try ZMQSocket(context: context, type: .pull)
        defer { pull.close() }
        try pull.bind(endpoint)
        let count = 2_000
        let sent = Atomic<Int>(0)
        let caughtUp = Atomic<Int>(0)  // messages the receiver has read
        let sender = Thread {
            guard let push = try? ZMQSocket(context: context, type: .push) else { return }
            defer { push.close() }
            guard (try? push.connect(endpoint)) != nil else { return }
            var random = SystemRandomNumberGenerator()
            for index in 0..<count {
                // Bursts and trickles, so messages arrive while the receiver is inside libzmq and
                // while it waits: before about half of the messages the sender waits (a condition
                // with a deadline, not a delay) until the receiver has read all it sent.
                if Bool.random(using: &random) {
                    let deadline = ContinuousClock.now + .seconds(10)
                    while caughtUp.load(ordering: .acquiring) < index && ContinuousClock.now < deadline { sched_yield() }
                }
                guard (try? push.send([withUnsafeBytes(of: UInt32(index).littleEndian) { Array($0) }])) == true else { return }
                sent.add(1, ordering: .relaxed)
            }
        }
        sender.start()
        let waiter = try ZMQWaiter([.socket(pull, .readable)])
        var received = 0
        var emptyWaits = 0
        while received < count {
            // After a lost wake-up nothing would report the queued message again: the waits
            // would run to their timeout, empty, until the loop gives up. (A wait may also end
            // empty when a notification carried no message, as a new connection's does.)
            let ready = try waiter.wait(timeout: .seconds(10))
            if ready[0].isEmpty { emptyWaits += 1; if emptyWaits > 5 { break } }
            // Read one or two at a time, not always to the end: the partly-read path too.
            for _ in 0..<(received % 2 + 1) {
                guard let message = try pull.receive(dontWait: true) else { break }
                #expect(message.count == 1 && message[0].count == 4)
                received += 1
                caughtUp.store(received, ordering: .releasing)
            }
        }
        #expect(received == count, "\(received) of \(count) received (sent \(sent.load(ordering: .relaxed)), \(emptyWaits) empty waits)")
    }
}
