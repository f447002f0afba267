@testable import FerryAgent
import FerryStorage
import Testing

/// The commit thread's `commit_delay`/`commit_siblings` decision: senders and times in, a
/// deadline (or none) out.
@Suite("CommitDelay: wait for siblings only while other senders are active")
struct CommitDelayTests {
    static let a: [UInt8] = [1], b: [UInt8] = [2], c: [UInt8] = [3]
    /// 200 µs: a sender is active for 1.6 ms after its last batch.
    static func decision(siblings: Int = 1) -> CommitDelay { CommitDelay(delayMicroseconds: 200, siblings: siblings) }

    struct Case: Sendable, CustomTestStringConvertible {
        var what: String
        var siblings: Int = 1
        /// Earlier batches: sender and arrival (ns).
        var seen: [([UInt8], UInt64)]
        /// The group's senders, taken at 10 ms.
        var group: Set<[UInt8]>
        var expected: UInt64?
        var testDescription: String { what }
    }

    static let takenAt: UInt64 = 10_000_000
    static let cases: [Case] = [
        Case(what: "a lone client is never delayed, however fast", seen: [(a, 9_990_000), (a, 9_999_000)], group: [a], expected: nil),
        Case(what: "another sender active: wait up to the delay", seen: [(a, 9_999_000), (b, 9_000_000)], group: [a],
             expected: takenAt + 200_000),
        Case(what: "another sender, but idle longer than the active window: no wait", seen: [(a, 9_999_000), (b, 8_000_000)],
             group: [a], expected: nil),
        Case(what: "every active sender already in the group: no wait", seen: [(a, 9_999_000), (b, 9_999_500)], group: [a, b],
             expected: nil),
        Case(what: "siblings 2: one other active sender is not enough", siblings: 2, seen: [(a, 9_999_000), (b, 9_900_000)],
             group: [a], expected: nil),
        Case(what: "siblings 2: two other active senders", siblings: 2, seen: [(a, 9_999_000), (b, 9_900_000), (c, 9_500_000)],
             group: [a], expected: takenAt + 200_000),
    ]

    @Test("the decision before a sync", arguments: cases)
    func waitUntil(_ c: Case) {
        var delay = Self.decision(siblings: c.siblings)
        for (sender, at) in c.seen { delay.arrived(sender, at: at) }
        for sender in c.group { delay.arrived(sender, at: Self.takenAt) }
        delay.prune(now: Self.takenAt)
        #expect(delay.waitUntil(group: c.group, takenAt: Self.takenAt, now: Self.takenAt) == c.expected)
    }

    @Test("0 µs: never waits, and keeps no table")
    func off() {
        var delay = CommitDelay(delayMicroseconds: 0, siblings: 1)
        delay.arrived(Self.a, at: 1)
        delay.arrived(Self.b, at: 2)
        #expect(delay.lastSeen.isEmpty)
        #expect(delay.waitUntil(group: [Self.a], takenAt: 3, now: 3) == nil)
    }

    @Test("during the wait: stop at the deadline, or once every active sender has sent")
    func keepWaiting() {
        var delay = Self.decision()
        delay.arrived(Self.a, at: Self.takenAt)
        delay.arrived(Self.b, at: Self.takenAt - 500_000)
        delay.arrived(Self.c, at: Self.takenAt - 700_000)
        let deadline = Self.takenAt + 200_000
        #expect(delay.keepWaiting(group: [Self.a], deadline: deadline, now: Self.takenAt + 50_000))
        #expect(delay.keepWaiting(group: [Self.a, Self.b], deadline: deadline, now: Self.takenAt + 60_000), "c has not sent")
        #expect(!delay.keepWaiting(group: [Self.a, Self.b, Self.c], deadline: deadline, now: Self.takenAt + 70_000))
        #expect(!delay.keepWaiting(group: [Self.a], deadline: deadline, now: deadline), "the deadline passed")
    }

    @Test("pruning forgets senders past the active window")
    func prune() {
        var delay = Self.decision()
        delay.arrived(Self.a, at: 1_000_000)
        delay.arrived(Self.b, at: 2_000_000)
        delay.prune(now: 2_600_000)
        #expect(Set(delay.lastSeen.keys) == [Self.a, Self.b], "both within 1.6 ms")
        delay.prune(now: 2_600_001)
        #expect(Set(delay.lastSeen.keys) == [Self.b])
    }

    @Test("a bad configuration is refused with the key", arguments: [
        (#"{"log": {"commitDelayMicroseconds": -1}}"#, "log.commitDelayMicroseconds must be 0 to 100000"),
        (#"{"log": {"commitDelayMicroseconds": 100001}}"#, "log.commitDelayMicroseconds must be 0 to 100000"),
        (#"{"log": {"commitSiblings": 0}}"#, "log.commitSiblings must be at least 1"),
    ])
    func refused(json: String, message: String) throws {
        #expect(throws: AgentError.self) { try ConfigurationTests.load(json) }
        do {
            _ = try ConfigurationTests.load(json)
        } catch {
            #expect("\(error)".contains(message), "\(error)")
        }
    }

    @Test("the keys are read from the file")
    func parsed() throws {
        let config = try ConfigurationTests.load(#"{"log": {"commitDelayMicroseconds": 500, "commitSiblings": 3}}"#)
        #expect(config.log.commitDelayMicroseconds == 500 && config.log.commitSiblings == 3)
        let defaults = try ConfigurationTests.load("{}")
        #expect(defaults.log.commitDelayMicroseconds == LogConfiguration.defaultCommitDelayMicroseconds)
    }
}
