@testable import FerryProtocol
import Testing

@Suite("ThreadInbox")
struct ThreadInboxTests {
    @Test("take(budget:) takes the oldest items up to the budget, at least one, and leaves the rest in order")
    func budget() {
        let inbox = ThreadInbox<Int>()
        for value in [5, 3, 4, 10, 1] { inbox.put(value) }
        // 5 + 3 = 8 reaches the budget of 8: the take stops there.
        #expect(inbox.take(timeout: .zero, budget: 8) { $0 } == [5, 3])
        #expect(inbox.count == 3)
        // One item over the budget on its own is still taken (no starvation of large items).
        #expect(inbox.take(timeout: .zero, budget: 2) { $0 } == [4])
        #expect(inbox.take(timeout: .zero, budget: 100) { $0 } == [10, 1])
        #expect(inbox.take(timeout: .zero, budget: 100) { $0 } == [])
        inbox.close()
        #expect(inbox.take(timeout: .zero, budget: 100) { $0 } == nil)
    }

    @Test("takeAll takes everything queued")
    func takeAll() {
        let inbox = ThreadInbox<Int>()
        for value in 1...5 { inbox.put(value) }
        #expect(inbox.takeAll(timeout: .zero) == [1, 2, 3, 4, 5])
        #expect(inbox.count == 0)
    }
}
