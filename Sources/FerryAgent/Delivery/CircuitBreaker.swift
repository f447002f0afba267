// The circuit breaker of a sink's delivery loop: its pure bookkeeping and the change it publishes.

/// A change of a sink's circuit breaker, published on the bus topic `circuit`.
public struct CircuitChange: Sendable {
    /// The sink.
    public var sink: String
    /// The state before.
    public var from: DeliveryState.CircuitState
    /// The state now.
    public var to: DeliveryState.CircuitState
    /// Agent ms of the change.
    public var at: UInt64
    /// Consecutive failed attempts at the change.
    public var consecutiveFailures: Int
    /// The last error, if the change follows a failure.
    public var error: String?
    /// When the circuit goes half-open (for `open`).
    public var retryAt: UInt64?
}

/// The circuit breaker's bookkeeping (pure: the loop supplies the time).
struct CircuitBreaker {
    private(set) var failureThreshold: Int
    private(set) var openMilliseconds: UInt64
    private(set) var state: DeliveryState.CircuitState = .closed
    /// Transient failures since the last success: what opens the circuit.
    private(set) var failures = 0
    /// Failed attempts since the last success, permanent ones (which never open the circuit)
    /// included: what `ferry status` shows.
    private(set) var consecutiveFailures = 0
    private(set) var openUntil: UInt64 = 0

    init(_ configuration: AgentConfiguration.SinkConfiguration.Circuit) {
        failureThreshold = configuration.failureThreshold
        openMilliseconds = UInt64(max(0, configuration.openMilliseconds))
    }

    /// New thresholds (a reload); the current state and failure count are kept.
    mutating func reconfigure(_ configuration: AgentConfiguration.SinkConfiguration.Circuit) {
        failureThreshold = configuration.failureThreshold
        openMilliseconds = UInt64(max(0, configuration.openMilliseconds))
    }

    /// Before an attempt: how long to wait first (`nil`: attempt now). An open circuit whose time
    /// is up becomes half-open (the attempt is the probe); `changed` reports that transition.
    mutating func admit(now: UInt64) -> (wait: UInt64?, changed: (DeliveryState.CircuitState, DeliveryState.CircuitState)?) {
        guard state == .open else { return (nil, nil) }
        if now < openUntil { return (openUntil - now, nil) }
        state = .halfOpen
        return (nil, (.open, .halfOpen))
    }

    /// After a successful attempt.
    mutating func succeeded() -> (DeliveryState.CircuitState, DeliveryState.CircuitState)? {
        consecutiveFailures = 0
        return upstreamAnswered()
    }

    /// After a failed attempt at `now`.
    mutating func failed(now: UInt64) -> (DeliveryState.CircuitState, DeliveryState.CircuitState)? {
        failures += 1
        consecutiveFailures += 1
        let opens = switch state {
        case .halfOpen: true  // the probe failed: open again for another period, whatever the count
        case .closed: failures >= failureThreshold
        case .open: false
        }
        guard opens else { return nil }
        let from = state
        state = .open
        openUntil = now + openMilliseconds
        return (from, .open)
    }

    /// After an attempt that failed for good (its batch is dead-lettered): counted for status,
    /// never toward opening the circuit. The upstream answered, so it is reachable: the transient
    /// failures start again from zero, and a circuit that was probing (half-open) closes
    /// (docs/DELIVERY.md: permanent errors say the batch is bad, not the upstream). Returns that
    /// change, if any.
    @discardableResult
    mutating func failedPermanently() -> (DeliveryState.CircuitState, DeliveryState.CircuitState)? {
        consecutiveFailures += 1
        return upstreamAnswered()
    }

    /// The upstream answered (a success, or a refusal of the batch): the transient failures start
    /// again from zero and the circuit closes. Returns that change, if any.
    private mutating func upstreamAnswered() -> (DeliveryState.CircuitState, DeliveryState.CircuitState)? {
        failures = 0
        guard state != .closed else { return nil }
        defer { state = .closed }
        return (state, .closed)
    }
}
