import FerryProtocol
import FerryThreads

extension CommitPipeline {
    /// Applies ``CommitDelay`` to the work just taken: notes each batch's sender and, when the
    /// decision says so, takes more work from the inbox until the deadline, until every active
    /// sender has sent, or until the group holds ``maxGroupBytes``. Returns the group to commit
    /// (the work taken first, then what joined it, in arrival order). On the commit thread.
    func gatherSiblings(_ work: [CommitWork], delay: inout CommitDelay) -> [CommitWork] {
        guard delay.delayNanoseconds > 0 else { return work }
        let takenAt = MonotonicClock.nanoseconds()
        var group = Set<[UInt8]>()
        func note(_ items: [CommitWork], at now: UInt64) {
            for case .events(let batch) in items {
                group.insert(batch.route.address)
                delay.arrived(batch.route.address, at: now)
            }
        }
        note(work, at: takenAt)
        delay.prune(now: takenAt)
        guard let deadline = delay.waitUntil(group: group, takenAt: takenAt, now: takenAt) else { return work }
        var gathered = work
        var weight = work.reduce(0) { $0 + Self.weight(of: $1) }
        while weight < Self.maxGroupBytes {
            let now = MonotonicClock.nanoseconds()
            guard now < deadline,
                  let more = inbox.take(timeout: .nanoseconds(Int64(deadline - now)), budget: Self.maxGroupBytes - weight,
                                        weight: Self.weight(of:)),
                  !more.isEmpty else { break }
            let arrived = MonotonicClock.nanoseconds()
            note(more, at: arrived)
            gathered += more
            weight += more.reduce(0) { $0 + Self.weight(of: $1) }
            guard delay.keepWaiting(group: group, deadline: deadline, now: arrived) else { break }
        }
        return gathered
    }
}
