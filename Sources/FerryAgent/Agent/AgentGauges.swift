import CoreMetrics
import FerryProtocol
import FerryStorage

/// Brings the gauges of the agent's state (queue, held events, sink backlogs) up to date, just
/// before the exposition is rendered: they are set when someone looks, not as events flow.
struct AgentGauges: Sendable {
    /// The agent's metric store, whose gauges it sets.
    let metrics: AgentMetrics

    /// Sets the gauges from the running agent `running`.
    func update(from running: RunningAgent) {
        let log = running.log.status()
        metrics.queueEvents.record(log.undeliveredEvents)
        metrics.queueBytes.record(Int(log.bytes))
        var age = 0.0
        if log.undeliveredEvents > 0, let at = running.log.oldestUndeliveredAcceptedAt() {
            let now = WallClock.unixMilliseconds()
            age = now >= at ? Double(now - at) / 1000 : 0
        }
        metrics.queueOldestAge.record(age)
        metrics.eventsHeld.record(running.consent.snapshot().heldEvents)
        metrics.erasuresPending.record(running.erasures?.pendingCount ?? 0)
        metrics.quarantinedEvents.record(running.quarantine.count)
        for delivery in running.deliveries {
            delivery.metrics.backlog.record(log.backlog[delivery.name] ?? 0)
        }
    }
}
