/// The pause before a retry: exponential backoff with full jitter, uniform in
/// [0, min(cap, initial·2^attempt)] (the sink's `retry` settings). Shared by the delivery loop
/// (batches) and the erasure sender (erasure requests); the random draw is the caller's.
enum RetryBackoff {
    /// The upper bound of the pause before retry `attempt` (1 for the first retry), in ms.
    static func ceilingMilliseconds(attempt: Int, retry: AgentConfiguration.SinkConfiguration.Retry) -> Double {
        min(Double(retry.maxMilliseconds), Double(retry.initialMilliseconds) * Double(1 << min(max(0, attempt), 30)))
    }

    /// A pause drawn uniformly up to ``ceilingMilliseconds(attempt:retry:)``.
    static func delay(attempt: Int, retry: AgentConfiguration.SinkConfiguration.Retry) -> Duration {
        .milliseconds(Int(Double.random(in: 0...max(0, ceilingMilliseconds(attempt: attempt, retry: retry)))))
    }
}
