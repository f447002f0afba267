import FerryThreads
import Foundation
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

@Suite("DedicatedThread")
struct DedicatedThreadTests {
    #if os(Linux)
    @Test("the OS thread carries the thread's name (first 15 bytes), as top -H and perf show it")
    func osThreadName() throws {
        let seen = ThreadInbox<String>()
        let thread = DedicatedThread(name: "ferry-commit-long-name") {
            let comm = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
            seen.put(comm.trimmingCharacters(in: .newlines))
        }
        thread.join()
        #expect(seen.takeAll(timeout: .zero) == ["ferry-commit-lo"])
    }
    #endif
}
