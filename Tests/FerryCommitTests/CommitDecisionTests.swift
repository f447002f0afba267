@testable import FerryAgent
import FerryProtocol
import FerryStorage
import Testing

typealias Machine = CommitPipeline.StateMachine

/// The committed state as the decision sees it, in memory: a real id window and session table,
/// a set of once-key marks, and figures set by each case.
struct MemoryBook: CommitBook {
    var window = DedupWindow(maxEntries: 10_000, maxAgeMilliseconds: 3_600_000)
    var sessions = SessionTable(idleMilliseconds: 3_600_000, maxSessions: 100, lossGraceMilliseconds: 60_000)
    var marks: Set<OnceKeyStore.Mark> = []
    /// The consent verdict by event category byte (``decision`` for the others).
    var decisions: [UInt8: IngestDecision] = [:]
    var decision: IngestDecision = .store
    var uidBytes: [UInt32: Int64] = [:]
    var logBytes: Int64 = 0
    var heldBytes: Int64 = 0

    func isStored(session: EventID, sequence: UInt64) -> Bool {
        sessions.contains(session: session, sequence: sequence) == true
    }

    func isRecent(_ id: EventID) -> Bool { window.contains(id) }
    func isMarked(_ mark: OnceKeyStore.Mark) -> Bool { marks.contains(mark) }
    func consent(_ key: ConsentKey) -> IngestDecision { decisions[key.category] ?? decision }
    func bytes(ofUID uid: UInt32) -> Int64 { uidBytes[uid] ?? 0 }
    mutating func remember(_ id: EventID, at: UInt64) { window.insert(id, at: at) }
    mutating func remember(session: EventID, sequence: UInt64, source: String, at: UInt64) {
        sessions.insert(session: session, sequence: sequence, at: at, source: source)
    }
    mutating func mark(_ mark: OnceKeyStore.Mark) { marks.insert(mark) }
}

/// A book that counts how often the consent state is asked (local-only events are suppressed).
struct CountingBook: CommitBook {
    final class Counter { var count = 0 }
    let asked: Counter
    func isStored(session: EventID, sequence: UInt64) -> Bool { false }
    func isRecent(_ id: EventID) -> Bool { false }
    func isMarked(_ mark: OnceKeyStore.Mark) -> Bool { false }
    func consent(_ key: ConsentKey) -> IngestDecision {
        asked.count += 1
        return key.localOnly ? .suppressed : .store
    }
    func bytes(ofUID uid: UInt32) -> Int64 { 0 }
    var logBytes: Int64 { 0 }
    var heldBytes: Int64 { 0 }
    mutating func remember(_ id: EventID, at: UInt64) {}
    mutating func remember(session: EventID, sequence: UInt64, source: String, at: UInt64) {}
    mutating func mark(_ mark: OnceKeyStore.Mark) {}
}

enum Fixture {
    static let cap: Int64 = 1 << 20
    static let limits = Machine.Limits(uidShareBytes: cap / 2, retentionMaxBytes: cap, fullPolicy: .reject)
    static let session = EventID(high: 0xAAAA, low: 1)
    static let uid: UInt32 = 1000

    static func id(_ n: UInt64) -> EventID { EventID(high: 0x0123_4567, low: n) }

    static func event(
        _ n: UInt64, session: EventID? = nil, sequence: UInt64 = 0, onceKey: String? = nil, category: UInt8 = 0,
        localOnly: Bool = false, uid: UInt32? = Fixture.uid, bytes: Int64 = 200
    ) -> Machine.Event {
        Machine.Event(
            id: id(n), session: session, sequence: sequence,
            consent: ConsentKey(type: .track, category: category, localOnly: localOnly),
            onceKey: onceKey.map(OnceKeyStore.Mark.init(key:)), source: session == nil ? "" : "app",
            recordBytes: bytes, heldBytes: bytes - 20, uid: uid, countsUsage: uid != nil)
    }
}

/// One event judged alone against a prepared committed state.
struct Case: Sendable, CustomTestStringConvertible {
    var name: String
    var decision: IngestDecision = .store
    /// The event's session sequence is in the session table.
    var storedSequence = false
    /// The event's id is in the id window.
    var recentID = false
    /// The event carries a once-key (and whether it is marked already).
    var onceKey = false
    var markedOnceKey = false
    var uidBytes: Int64 = 0
    var logBytes: Int64 = 0
    var heldBytes: Int64 = 0
    var fullPolicy: LogConfiguration.FullPolicy = .reject
    var action: Machine.Action
    /// The answer's status and reason codes once the action is carried out.
    var status: UInt8
    var reason: UInt8
    var topic: BusTopic?

    var testDescription: String { name }

    static let all: [Case] = [
        Case(name: "new event: stored", action: .store(makingRoom: false), status: 0, reason: 0),
        Case(name: "session sequence stored: duplicate 0", storedSequence: true, action: .duplicate(.none), status: 1, reason: 0),
        Case(name: "id in the window: duplicate 0", recentID: true, action: .duplicate(.none), status: 1, reason: 0),
        Case(name: "once-key marked: duplicate 18", onceKey: true, markedOnceKey: true, action: .duplicate(.onceKey),
             status: 1, reason: 18),
        Case(name: "once-key marked, no-op mode: blocked 10 (the key is not consulted)", decision: .blocked(.noOp),
             onceKey: true, markedOnceKey: true, action: .block(.noOp), status: 3, reason: 10, topic: .blocked),
        Case(name: "once-key new: stored", onceKey: true, action: .store(makingRoom: false), status: 0, reason: 0),
        Case(name: "local-only: suppressed 9", decision: .suppressed, action: .suppress, status: 4, reason: 9, topic: .suppressed),
        Case(name: "undetermined under hold: accepted, held 19", decision: .hold, action: .hold, status: 0, reason: 19, topic: .held),
        Case(name: "held area full: rejected full", decision: .hold, heldBytes: Fixture.cap - 100, action: .reject(.full),
             status: 2, reason: 3),
        Case(name: "uid over its share: rejected full", uidBytes: Fixture.cap / 2 - 100, action: .reject(.full), status: 2, reason: 3),
        Case(name: "uid at its share exactly: stored", uidBytes: Fixture.cap / 2 - 200, action: .store(makingRoom: false),
             status: 0, reason: 0),
        Case(name: "retention cap, policy reject: rejected full", logBytes: Fixture.cap - 100, action: .reject(.full),
             status: 2, reason: 3),
        Case(name: "retention cap, policy drop-oldest: store after making room", logBytes: Fixture.cap - 100,
             fullPolicy: .dropOldest, action: .store(makingRoom: true), status: 0, reason: 0),
    ] + RejectReason.consentBlocks.map { reason in
        Case(name: "consent \(reason): blocked \(reason.rawValue)", decision: .blocked(reason), action: .block(reason),
             status: 3, reason: reason.rawValue, topic: .blocked)
    }
}

@Suite("The commit stage's decision")
struct CommitDecisionTests {
    @Test("one event: every status and reason the commit stage decides", arguments: Case.all)
    func oneEvent(_ test: Case) {
        var book = MemoryBook()
        book.decision = test.decision
        book.uidBytes[Fixture.uid] = test.uidBytes
        book.logBytes = test.logBytes
        book.heldBytes = test.heldBytes
        let event = Fixture.event(1, session: Fixture.session, sequence: 7, onceKey: test.onceKey ? "order-1" : nil)
        if test.storedSequence { book.sessions.insert(session: Fixture.session, sequence: 7, at: 0, source: "app") }
        if test.recentID { book.window.insert(event.id, at: 0) }
        if test.markedOnceKey { book.marks.insert(OnceKeyStore.Mark(key: "order-1")) }
        var limits = Fixture.limits
        limits.fullPolicy = test.fullPolicy
        var machine = Machine(limits: limits)

        let action = machine.judge(event, in: book)
        #expect(action == test.action)
        let (entry, note) = action.answer(for: event.id)
        #expect(entry.id == event.id)
        #expect(entry.status.rawValue == test.status)
        #expect(entry.reason.rawValue == test.reason)
        #expect(note?.topic == test.topic)
    }

    @Test("the same id twice in one group: the second copy is a duplicate (0)")
    func duplicateIDInGroup() {
        var machine = Machine(limits: Fixture.limits)
        let book = MemoryBook()
        #expect(machine.judge(Fixture.event(1), in: book) == .store(makingRoom: false))
        machine.wrote(to: .log, segment: 1)
        #expect(machine.judge(Fixture.event(1), in: book) == .duplicate(.none))
    }

    @Test("the same session sequence twice in one group (another id): a duplicate (0)")
    func duplicateSequenceInGroup() {
        var machine = Machine(limits: Fixture.limits)
        let book = MemoryBook()
        #expect(machine.judge(Fixture.event(1, session: Fixture.session, sequence: 3), in: book) == .store(makingRoom: false))
        machine.wrote(to: .log, segment: 1)
        #expect(machine.judge(Fixture.event(2, session: Fixture.session, sequence: 3), in: book) == .duplicate(.none))
        #expect(machine.judge(Fixture.event(3, session: Fixture.session, sequence: 4), in: book) == .store(makingRoom: false))
    }

    @Test("a held or suppressed event's copy later in the group is a duplicate (0)",
          arguments: [IngestDecision.hold, .suppressed])
    func duplicateOfHeldOrSuppressed(_ decision: IngestDecision) {
        var machine = Machine(limits: Fixture.limits)
        var book = MemoryBook()
        book.decision = decision
        let first = machine.judge(Fixture.event(1), in: book)
        if first == .hold { machine.wrote(to: .held, segment: 0) }
        #expect(machine.judge(Fixture.event(1), in: book) == .duplicate(.none))
    }

    @Test("a blocked or refused event is judged again when its copy comes (nothing seen)")
    func blockedAndRefusedAreNotSeen() {
        var machine = Machine(limits: Fixture.limits)
        var book = MemoryBook()
        book.decisions[9] = .blocked(.consentDenied)
        #expect(machine.judge(Fixture.event(1, category: 9), in: book) == .block(.consentDenied))
        #expect(machine.judge(Fixture.event(1, category: 9), in: book) == .block(.consentDenied))
        book.logBytes = Fixture.cap
        #expect(machine.judge(Fixture.event(2), in: book) == .reject(.full))
        book.logBytes = 0
        // Judged store but never written (no room, or the append failed): not seen either.
        #expect(machine.judge(Fixture.event(3), in: book) == .store(makingRoom: false))
        #expect(machine.judge(Fixture.event(2), in: book) == .store(makingRoom: false))
        #expect(machine.judge(Fixture.event(3), in: book) == .store(makingRoom: false))
        #expect(machine.written.log == 0)
    }

    @Test("the same once-key twice in one group: the second is a duplicate (18), even after a block")
    func duplicateOnceKeyInGroup() {
        var machine = Machine(limits: Fixture.limits)
        var book = MemoryBook()
        book.decisions[9] = .blocked(.consentDenied)
        #expect(machine.judge(Fixture.event(1, onceKey: "k", category: 9), in: book) == .block(.consentDenied))
        #expect(machine.judge(Fixture.event(2, onceKey: "k"), in: book) == .duplicate(.onceKey))
        #expect(machine.judge(Fixture.event(3, onceKey: "other"), in: book) == .store(makingRoom: false))
    }

    @Test("a sender's share counts what it stored earlier in the group")
    func shareCountsTheGroup() {
        var machine = Machine(limits: Fixture.limits)
        var book = MemoryBook()
        book.uidBytes[Fixture.uid] = Fixture.cap / 2 - 300
        #expect(machine.judge(Fixture.event(1), in: book) == .store(makingRoom: false))
        machine.wrote(to: .log, segment: 1)
        #expect(machine.judge(Fixture.event(2), in: book) == .reject(.full))
        // Another sender is not held back.
        #expect(machine.judge(Fixture.event(3, uid: 7), in: book) == .store(makingRoom: false))
        #expect(machine.usage.count == 1)
        #expect(machine.usage.first?.bytes == 200)
    }

    @Test("the consent state is asked once per kind of event and group")
    func consentMemoised() {
        let counter = CountingBook.Counter()
        var book = CountingBook(asked: counter)
        var machine = Machine(limits: Fixture.limits)
        for n in 1...10 {
            let action = machine.judge(Fixture.event(UInt64(n), localOnly: n % 2 == 0), in: book)
            if action == .store(makingRoom: false) { machine.wrote(to: .log, segment: 1) }
        }
        #expect(counter.count == 2)
        machine.settle(failed: [], at: 1, into: &book)
        _ = machine.judge(Fixture.event(11), in: book)
        #expect(counter.count == 3)
    }
}

@Suite("The commit stage's overlay: a group's decisions reach the committed state only after its writes")
struct CommitOverlayTests {
    static let keys = ["stored", "held", "suppressed", "blocked", "refused"]

    /// One group: a stored event with a session and a once-key, a held one, a suppressed one, a
    /// blocked conversion, a conversion refused `full`, and a later copy of the stored event.
    static func judgeGroup(_ machine: inout Machine, _ book: inout MemoryBook) {
        book.decisions = [1: .hold, 2: .suppressed, 3: .blocked(.consentDenied)]
        #expect(machine.judge(Fixture.event(1, session: Fixture.session, sequence: 1, onceKey: "stored"), in: book)
            == .store(makingRoom: false))
        machine.wrote(to: .log, segment: 1)
        #expect(machine.judge(Fixture.event(2, session: Fixture.session, sequence: 2, onceKey: "held", category: 1), in: book)
            == .hold)
        machine.wrote(to: .held, segment: 0)
        #expect(machine.judge(Fixture.event(3, session: Fixture.session, sequence: 3, onceKey: "suppressed", category: 2),
                              in: book) == .suppress)
        #expect(machine.judge(Fixture.event(4, onceKey: "blocked", category: 3), in: book) == .block(.consentDenied))
        book.uidBytes[Fixture.uid] = Fixture.cap
        #expect(machine.judge(Fixture.event(5, onceKey: "refused"), in: book) == .reject(.full))
        book.uidBytes[Fixture.uid] = 0
        #expect(machine.judge(Fixture.event(1, session: Fixture.session, sequence: 1), in: book) == .duplicate(.none))
        // Nothing reached the committed state yet.
        #expect(seenIDs(book) == [])
        #expect(storedSequences(book) == [])
        #expect(markedKeys(book) == [])
    }

    /// Which of the group's ids (1–5) the id window holds.
    static func seenIDs(_ book: MemoryBook) -> [UInt64] { (1...5).filter { book.window.contains(Fixture.id($0)) } }
    /// Which of the session's sequences 1–3 the session table holds.
    static func storedSequences(_ book: MemoryBook) -> [UInt64] {
        (1...3).filter { book.isStored(session: Fixture.session, sequence: $0) }
    }
    /// Which of the group's once-keys are marked.
    static func markedKeys(_ book: MemoryBook) -> Set<String> {
        Set(keys.filter { book.marks.contains(OnceKeyStore.Mark(key: $0)) })
    }

    @Test("both writes succeed: every seen id, sequence and once-key is committed")
    func bothSucceed() {
        var machine = Machine(limits: Fixture.limits)
        var book = MemoryBook()
        Self.judgeGroup(&machine, &book)
        #expect(machine.written.log == 1 && machine.written.held == 1)
        #expect(machine.ids(waitingOn: []).isEmpty)
        machine.settle(failed: [], at: 10, into: &book)
        #expect(Self.seenIDs(book) == [1, 2, 3])
        #expect(Self.storedSequences(book) == [1, 2, 3])
        #expect(Self.markedKeys(book) == Set(Self.keys))
        // The next group sees them through the committed state.
        #expect(machine.judge(Fixture.event(1), in: book) == .duplicate(.none))
    }

    @Test("the log's write fails: its events leave no trace; the rest is committed")
    func logWriteFails() {
        var machine = Machine(limits: Fixture.limits)
        var book = MemoryBook()
        Self.judgeGroup(&machine, &book)
        #expect(machine.ids(waitingOn: .log) == [Fixture.id(1)])
        machine.settle(failed: .log, at: 10, into: &book)
        #expect(Self.seenIDs(book) == [2, 3])
        #expect(Self.storedSequences(book) == [2, 3])
        #expect(Self.markedKeys(book) == ["held", "suppressed", "blocked", "refused"])
        // Re-sent, it is judged anew (and its once-key is free).
        #expect(machine.judge(Fixture.event(1, session: Fixture.session, sequence: 1, onceKey: "stored"), in: book)
            == .store(makingRoom: false))
    }

    @Test("the held area's write fails: its events leave no trace; the rest is committed")
    func heldWriteFails() {
        var machine = Machine(limits: Fixture.limits)
        var book = MemoryBook()
        Self.judgeGroup(&machine, &book)
        #expect(machine.ids(waitingOn: .held) == [Fixture.id(2)])
        machine.settle(failed: .held, at: 10, into: &book)
        #expect(Self.seenIDs(book) == [1, 3])
        #expect(Self.storedSequences(book) == [1, 3])
        #expect(Self.markedKeys(book) == ["stored", "suppressed", "blocked", "refused"])
    }

    @Test("both writes fail: only the suppressed event, and the once-keys of events not written, stay")
    func bothFail() {
        var machine = Machine(limits: Fixture.limits)
        var book = MemoryBook()
        Self.judgeGroup(&machine, &book)
        #expect(machine.ids(waitingOn: [.log, .held]) == [Fixture.id(1), Fixture.id(2)])
        machine.settle(failed: [.log, .held], at: 10, into: &book)
        #expect(Self.seenIDs(book) == [3])
        #expect(Self.storedSequences(book) == [3])
        #expect(Self.markedKeys(book) == ["suppressed", "blocked", "refused"])
        // The overlay is empty for the next group: the failed events are judged anew.
        #expect(machine.judge(Fixture.event(2, session: Fixture.session, sequence: 2), in: book) == .store(makingRoom: false))
    }
}
