#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
@testable import FerryAgent
@testable import FerryStorage
import FerryTestKit
import FerryProtocol
import Logging
import Synchronization

// Helpers shared by the FerryAgentTests suites. Nothing here sleeps for a fixed time: waiting is
// always on a condition with a deadline.

// The log fixtures (scratch directories, events, opening and writing logs, byte-level file
// edits) are FerryTestKit's `LogFixtures.swift`, shared with FerryStorageTests.

// MARK: Waiting (thin names over FerryTestKit's deadline-bounded helpers)

/// Runs blocking `body` on a thread of its own (never on the concurrency pool).
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await runOffPool(body)
}

/// Polls `condition` until it holds or `timeout` passes (then throws).
func waitUntil(_ what: String, timeout: Duration = .seconds(20), _ condition: () throws -> Bool) async throws {
    try await eventually(what, timeout: timeout) { try condition() }
}

/// Awaits `task`'s value, or throws if it takes longer than `timeout`.
func value<T: Sendable>(of task: Task<T, any Error>, timeout: Duration, _ what: String) async throws -> T {
    try await withTimeout(timeout, what) { try await task.value }
}

/// A lock-protected value that can be shared by reference (a `Mutex` cannot be copied).
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<R>(_ body: (inout sending Value) throws -> sending R) rethrows -> R {
        try mutex.withLock(body)
    }
    var value: Value { mutex.withLock { $0 } }
}

/// The ids of encoded event frames (compared instead of whole frames, for short failure output).
