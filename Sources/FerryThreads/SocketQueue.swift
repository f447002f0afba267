import Synchronization

/// A socket thread's wake-up: one pipe it polls, made readable by whoever queues it work (for the
/// agent's socket thread the `EventBus`, the `ControlReplyQueue`, shutdown; for the ZeroMQ
/// ingest path's thread its acks). Built before anything that queues, so every part gets its
/// queue at construction. `@usableFromInline`, as its `wake()`, for `SocketQueue.post(_:wake:)`.
@usableFromInline
package final class SocketWakeup: Sendable {
    /// The pipe the socket thread polls.
    package let pipe: WakePipe
    /// Set when the pipe is closed; a late sender checks it under the lock so it never writes to
    /// a closed (maybe reused) descriptor.
    private let closed = Mutex(false)

    /// A new pipe. Throws when the system has no descriptor for one.
    package init() throws {
        pipe = try WakePipe()
    }

    /// Wakes the socket thread (nothing once closed).
    @usableFromInline package func wake() {
        closed.withLock { closed in if !closed { pipe.wake() } }
    }

    /// Closes the pipe once the socket thread has ended (again: nothing).
    package func close() {
        closed.withLock { closed in
            guard !closed else { return }
            closed = true
            pipe.close()
        }
    }
}

/// Items handed to the socket thread by other threads, of one role; the socket thread takes them
/// all whenever its ``SocketWakeup`` fires.
///
/// The type is `public` (its members `package`, its methods `@inlinable`) for the reason
/// ``ThreadInbox`` gives: so that the modules that post and take specialise them for their item.
public final class SocketQueue<Item: Sendable>: Sendable {
    @usableFromInline let items = Mutex<[Item]>([])
    /// The socket thread's wake-up, fired on every post.
    @usableFromInline package let wakeup: SocketWakeup

    /// A queue that wakes `wakeup` on every post.
    package init(wakeup: SocketWakeup) {
        self.wakeup = wakeup
    }

    /// Queues `item` and wakes the socket thread (any thread); `wake` false when the socket thread
    /// itself posts, and takes it before it polls again.
    @inlinable
    package func post(_ item: Item, wake: Bool = true) {
        items.withLock { $0.append(item) }
        if wake { wakeup.wake() }
    }

    /// Takes everything queued (on the socket thread).
    @inlinable
    package func take() -> [Item] {
        items.withLock { items in
            defer { items.removeAll(keepingCapacity: true) }
            return items
        }
    }
}
