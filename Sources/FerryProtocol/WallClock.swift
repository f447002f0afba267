#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Wall-clock time for event timestamps (the client's view of "when").
public enum WallClock {
    /// Milliseconds since the Unix epoch, from `CLOCK_REALTIME`.
    @inlinable
    public static func unixMilliseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000
    }
}

/// Monotonic time for durations (latencies, sync times): never steps with the wall clock.
public enum MonotonicClock {
    /// Nanoseconds of `CLOCK_MONOTONIC` (since an arbitrary start).
    @inlinable
    public static func nanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }
}
