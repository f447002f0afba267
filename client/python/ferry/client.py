"""`Client`: sends events to the local ferryd without ever blocking the caller."""
from __future__ import annotations

import atexit
import collections
import ctypes
import enum
import itertools
import logging
import math
import os
import select
import sys
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Tuple, Union

import zmq

from . import protocol as wire
from .errors import ClientClosed, FerryTimeout, SocketError
from .paths import ingest_endpoint, runtime_dir as default_runtime_dir

__all__ = ["Client", "Event", "Receipt", "Status", "Statistics", "OverflowPolicy"]

_log = logging.getLogger("ferry")

Properties = Optional[Mapping[str, Any]]


class Status(str, enum.Enum):
    """What finally became of an event."""

    #: Durable in the agent's queue.
    ACCEPTED = "accepted"
    #: The agent already had it (a re-send); the first copy is durable.
    DUPLICATE = "duplicate"
    #: The agent refused it (see `Receipt.reason`).
    REJECTED = "rejected"
    #: Refused by the agent's consent state.
    BLOCKED = "blocked"
    #: Recorded locally by the agent, never delivered.
    SUPPRESSED = "suppressed"
    #: Dropped by the client's outbox overflow policy; it never reached the agent.
    DROPPED_FROM_OUTBOX = "dropped_from_outbox"
    #: The client was closed before the agent acked it.
    CLIENT_CLOSED = "client_closed"
    #: The agent refused the whole message it travelled in (`Receipt.reason` holds the error code
    #: name, e.g. `access_denied`); nothing of it was stored.
    REFUSED_BY_AGENT = "refused_by_agent"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Receipt:
    """The final status of one event."""

    id: uuid.UUID
    status: Status
    #: Why the agent gave that status, as its ack said (a name of `ferry.protocol.REASONS`, as
    #: docs/PROTOCOL.md lists them): the reject reason of `rejected` (`too_large`, …), the consent
    #: state's verdict for `blocked` (`tracking_disabled`, `consent_denied`, …), `local_only` for
    #: `suppressed`, `once_key` for a `duplicate` of an already used once-key. None when the agent
    #: gave none (reason 0, and agents older than the consent reasons); for `refused_by_agent`
    #: the error code's name (`access_denied`, …). The Swift client's `Receipt.reason`.
    reason: Optional[str] = None

    @property
    def ok(self) -> bool:
        """True when the agent settled the event as already had or now durable (`accepted` or
        `duplicate`). A `duplicate` with reason `once_key` stored nothing: the earlier event with
        that once-key was judged, and may have been blocked or suppressed."""
        return self.status in (Status.ACCEPTED, Status.DUPLICATE)


@dataclass
class Statistics:
    """Counters of a `Client` (a copy; read `Client.statistics` again for fresh values)."""

    #: Events handed to the client.
    enqueued: int = 0
    #: Events acked `accepted`.
    accepted: int = 0
    #: Events acked `duplicate`.
    duplicate: int = 0
    #: Events acked `rejected` or `blocked`, or refused with an error reply.
    rejected: int = 0
    #: Events acked `suppressed`.
    suppressed: int = 0
    #: Of `rejected`, events acked `blocked` by the agent's consent state.
    blocked: int = 0
    #: Events dropped by the overflow policy.
    dropped_from_outbox: int = 0
    #: Messages sent again after no ack came.
    resent_batches: int = 0
    #: Messages of events sent (re-sends not counted): fewer than the events acked when events
    #: travel together (a full batch, events gathered by the send delay, or queued while a message
    #: was in flight).
    sent_messages: int = 0
    #: Of `sent_messages`, those sent by the thread that queued, sent or flushed the events (the
    #: socket was free), not by the client's I/O thread.
    sent_by_caller: int = 0
    #: Events waiting for an ack (sent or not).
    pending: int = 0


class OverflowPolicy(str, enum.Enum):
    """What to drop when the outbox is full."""

    #: Drop the oldest event not yet sent (fresh data wins). If every held event is already in
    #: flight, the new one is dropped instead.
    DROP_OLDEST = "drop-oldest"
    #: Drop the new event.
    DROP_NEWEST = "drop-newest"


@dataclass
class Event:
    """An event to send: what the app knows. The client fills in the id, timestamp, sequence
    number, pid, session and source.

    `category` is a consent category: 0 (derive from the type), a code, or a built-in name
    (`"analytics"`, `"advertising"`, `"personalization"`, `"diagnostics"`, `"push"`).
    """

    type: str = "track"
    name: str = ""
    properties: Properties = None
    user_id: str = ""
    anonymous_id: Optional[str] = None
    group_id: Optional[str] = None
    previous_id: Optional[str] = None
    context: Properties = None
    once_key: str = ""
    category: Union[int, str] = 0
    local_only: bool = False


class _Entry:
    __slots__ = ("index", "id", "frame", "queued_at")

    def __init__(self, index: int, event_id: bytes, frame: bytes, queued_at: float = 0.0) -> None:
        self.index = index
        self.id = event_id
        self.frame = frame
        self.queued_at = queued_at  # time.monotonic() when queued (read only with a send_delay)


class _Batch:
    __slots__ = ("entries", "message", "sent_at")

    def __init__(self, entries: List[_Entry], message: List[bytes], sent_at: float) -> None:
        self.entries = entries
        self.message = message
        self.sent_at = sent_at


_ReceiptCallback = Callable[[Receipt], None]

# Every client alive in this process, for the fork handlers and the exit handler.
_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()
# Sockets and contexts inherited from the parent through fork(): kept referenced forever in the
# child so that nothing in the child ever closes or terminates them (they are the parent's).
_inherited: List[Any] = []


def _process_name() -> str:
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name and name != "-c" else "python"


class Client:
    """Sends events to the local `ferryd`; `track()` and friends return at once.

    >>> import ferry
    >>> with ferry.Client(source="checkout") as client:
    ...     client.track("Order Completed", {"total": 42.5}, user_id="u-1")
    ...     client.flush(timeout=5)

    Each call encodes the event and puts it in a bounded in-memory outbox; the events gather for up
    to `send_delay` (5 ms by default) and go out together in one message (`send()`, `flush()` and
    `close()` never wait for it). The thread that queues an event that may go now sends it itself
    when the socket is free; a background I/O thread sends the rest, reads the acks as they arrive
    and re-sends (see `_send_from_caller`). An event leaves the outbox only when the agent acks it. Unacked batches are sent again after `resend_after` seconds and
    whenever the agent comes back, so the agent may start after the client, restart or crash: each
    client has a session and numbers its events, so the agent stores every event exactly once
    however late a re-send comes (docs/PROTOCOL.md, "Exactly once").

    The client is thread-safe. It is fork-safe: in a child process made by `fork()` it opens a
    fresh connection with a new session and an empty outbox (the parent's events stay the
    parent's) and never touches the parent's socket.

    Against an agent that speaks only protocol 1 it falls back to protocol 1 for the rest of its
    life (no session, no extension fields: `anonymous_id`, `group_id`, `previous_id` and
    `context` are then left out), as the Swift client does.
    """

    # Per-process state, made by `_fresh_state()` (again in a child after fork()).
    _lock: threading.Lock
    _cond: threading.Condition
    _pid: int
    _session: bytes
    _sequence: int
    _ids: wire.UUIDv7
    _pending: Deque[_Entry]
    _in_flight: Dict[int, _Batch]
    _in_flight_events: int
    _next_index: int
    _next_request_id: int
    _protocol_version: int
    _receipts: Dict[int, _ReceiptCallback]
    _stats: Statistics
    _sock_lock: threading.Lock
    _delivering: int
    _send_now_through: int
    _send_blocked: bool
    _retry_at: float
    _io_asleep: bool
    _io_wakes_at: Optional[float]
    _alarm: "_Alarm"
    _alarm_at: Optional[float]
    _thread: Optional[threading.Thread]
    _context: Optional[zmq.Context]
    _socket: Optional[zmq.Socket]
    _wake_r: int
    _wake_w: int

    def __init__(self, source: Optional[str] = None, *, runtime_dir: Optional[str] = None,
                 outbox_capacity: int = 10_000,
                 overflow_policy: Union[OverflowPolicy, str] = OverflowPolicy.DROP_OLDEST,
                 batch_max_events: int = 256, batch_max_bytes: int = 65536, max_in_flight_batches: int = 8,
                 resend_after: float = 2.0, exit_flush_timeout: float = 5.0,
                 partial_batches_in_flight: int = 1, send_delay: float = 0.005) -> None:
        """Creates a client and starts its I/O thread; works whether or not the agent runs.

        - `source`: the name events are stamped with (default: the program's name).
        - `runtime_dir`: the agent's runtime directory (default: `$FERRY_RUNTIME_DIR`, else the
          per-user agent's if it runs, else `/run/ferry` if the system agent runs, else the
          per-user directory).
        - `outbox_capacity`: most events held waiting for an ack; `overflow_policy` says which to
          drop beyond it (`"drop-oldest"`, the default, or `"drop-newest"`).
        - `batch_max_events` (1-4096), `batch_max_bytes`, `max_in_flight_batches`: events and
          bytes of event frames per message (a larger single event still goes alone), messages
          sent but not yet acked. A message that is not a full batch goes out only while fewer
          than `partial_batches_in_flight` messages (default 1) are in flight: the events queued
          meanwhile go out together, in one message, when the ack comes (an app sending rarely
          still sends each event at once).
        - `send_delay`: seconds an event nobody waits for may wait for more events before it goes
          out (default 0.005: 5 ms; 0: at once), as the Swift client's `sendDelay` (Kafka's
          `linger.ms`, whose default Kafka 4.0 raised from 0 to 5 ms): at a trickle several events
          then share one message, the wake-ups of this process's threads and the agent's work, for
          that much more latency before their acks. `track()` and the other helpers and
          `enqueue()` wait; `send()`, `flush()`, `close()` and a batch of `batch_max_events`
          never do (one filled by `batch_max_bytes` first waits at most the delay). Meanwhile the
          events live only in this process's memory, as every unacked event does (the delay plus
          the agent's commit, about a millisecond; Segment's libraries hold events 0.5 to 10 s).
        - `resend_after`: seconds without an ack before a message is sent again.
        - `exit_flush_timeout`: how long leaving a `with` block waits for the acks.
        """
        self.source = _process_name() if source is None else source
        wire._utf8("source", self.source, wire.MAX_TEXT_BYTES)
        if not isinstance(outbox_capacity, int) or outbox_capacity < 1:
            raise ValueError("outbox_capacity must be a positive int")
        if not isinstance(batch_max_events, int) or not 1 <= batch_max_events <= wire.MAX_EVENTS_PER_MESSAGE:
            raise ValueError("batch_max_events must be 1 to %d" % wire.MAX_EVENTS_PER_MESSAGE)
        if not isinstance(batch_max_bytes, int) or batch_max_bytes < 1:
            raise ValueError("batch_max_bytes must be a positive int")
        if not isinstance(max_in_flight_batches, int) or max_in_flight_batches < 1:
            raise ValueError("max_in_flight_batches must be a positive int")
        if not resend_after > 0:
            raise ValueError("resend_after must be positive")
        if not isinstance(partial_batches_in_flight, int) or partial_batches_in_flight < 1:
            raise ValueError("partial_batches_in_flight must be a positive int")
        if not send_delay >= 0:
            raise ValueError("send_delay must be zero or positive")
        self.runtime_dir = runtime_dir or default_runtime_dir()
        self.endpoint = ingest_endpoint(self.runtime_dir)
        self.outbox_capacity = outbox_capacity
        self.overflow_policy = OverflowPolicy(overflow_policy)
        self.batch_max_events = batch_max_events
        self.batch_max_bytes = batch_max_bytes
        self.max_in_flight_batches = max_in_flight_batches
        self.partial_batches_in_flight = partial_batches_in_flight
        self.send_delay = float(send_delay)
        self.resend_after = float(resend_after)
        self.exit_flush_timeout = exit_flush_timeout
        self._closed = False
        self._fresh_state()
        self._start()
        _clients.add(self)

    # --- emitting --------------------------------------------------------------------------------

    def track(self, name: str, properties: Properties = None, *, user_id: str = "", **fields: Any) -> uuid.UUID:
        """Queues a `track` event and returns its id at once. Further keyword fields:
        `anonymous_id`, `context`, `once_key`, `category`, `local_only` (see `Event`)."""
        return self.enqueue(Event("track", name, properties, user_id, **fields))

    def screen(self, name: str, properties: Properties = None, *, user_id: str = "", **fields: Any) -> uuid.UUID:
        """Queues a `screen` event (a screen of an app) and returns its id at once."""
        return self.enqueue(Event("screen", name, properties, user_id, **fields))

    def page(self, name: str, properties: Properties = None, *, user_id: str = "", **fields: Any) -> uuid.UUID:
        """Queues a `page` event (a web page) and returns its id at once."""
        return self.enqueue(Event("page", name, properties, user_id, **fields))

    def identify(self, user_id: str, traits: Properties = None, **fields: Any) -> uuid.UUID:
        """Queues an `identify` event: who the user is (`traits` travel as the properties)."""
        return self.enqueue(Event("identify", "", traits, user_id, **fields))

    def group(self, group_id: str, traits: Properties = None, *, user_id: str = "", **fields: Any) -> uuid.UUID:
        """Queues a `group` event: the user belongs to `group_id` (with the group's `traits`)."""
        return self.enqueue(Event("group", "", traits, user_id, group_id=group_id, **fields))

    def alias(self, user_id: str, previous_id: str, **fields: Any) -> uuid.UUID:
        """Queues an `alias` event: `previous_id` (an earlier user or anonymous id) is `user_id`."""
        return self.enqueue(Event("alias", "", None, user_id, previous_id=previous_id, **fields))

    def enqueue(self, event: Event, on_receipt: Optional[_ReceiptCallback] = None) -> uuid.UUID:
        """Queues any event and returns its id at once.

        `on_receipt`, if given, is called once with the event's final `Receipt`, on the thread
        that reads the agent's ack (the client's I/O thread, or a thread that sent events itself
        and found acks waiting), or on the caller's when the event is refused at once; it must be
        quick and must not wait for the client. Nobody waits for the event here, so it may wait
        for `send_delay`. Raises `TypeError`/`ValueError` for an event that cannot be
        encoded (nothing is queued then). After `close()` the event is dropped (receipt
        `client_closed`).
        """
        return self._enqueue(event, on_receipt, False)

    def _enqueue(self, event: Event, on_receipt: Optional[_ReceiptCallback], urgent: bool) -> uuid.UUID:
        properties = b"" if not event.properties else wire.encode_json_object(event.properties, "properties")
        context = None if event.context is None else wire.encode_json_object(event.context, "context")
        context = context if context != b"{}" else None
        category = wire.category_code(event.category)
        flags = wire.FLAG_LOCAL_ONLY if event.local_only else 0
        if event.type not in wire.EVENT_TYPES:
            raise ValueError("unknown event type %r; valid: %s" % (event.type, ", ".join(wire.EVENT_TYPES)))
        with self._lock:
            self._ensure_started()
            self._sequence += 1
            sequence, session, pid = self._sequence, self._session, self._pid
        event_id = self._ids.next()
        frame = wire.encode_event(
            event_id, int(time.time() * 1000), sequence, pid, event.type, self.source, event.name, event.user_id,
            event.once_key, properties, category, flags, session, event.anonymous_id, event.group_id,
            event.previous_id, context)
        return self._enqueue_frame(event_id, frame, on_receipt, urgent)

    def _enqueue_frame(self, event_id: bytes, frame: bytes, on_receipt: Optional[_ReceiptCallback],
                       urgent: bool = False) -> uuid.UUID:
        """Puts a frame in the outbox. If it may go now (no send delay, `urgent`: a caller waits
        for it, or it fills a batch) this thread sends it when the socket is free; if it waits for
        the send delay, the I/O thread's alarm is set for the delay's end."""
        dropped: Optional[Tuple[_Entry, Optional[_ReceiptCallback]]] = None
        refused: Optional[Status] = None
        action = None
        with self._lock:
            if self._closed:
                refused = Status.CLIENT_CLOSED
            else:
                self._stats.enqueued += 1
                if len(self._pending) + self._in_flight_events >= self.outbox_capacity:
                    self._stats.dropped_from_outbox += 1
                    if self.overflow_policy is OverflowPolicy.DROP_OLDEST and self._pending:
                        oldest = self._pending.popleft()
                        dropped = (oldest, self._receipts.pop(oldest.index, None))
                        self._cond.notify_all()
                    else:
                        refused = Status.DROPPED_FROM_OUTBOX
            if refused is None:
                index = self._next_index
                self._next_index += 1
                now = time.monotonic() if self.send_delay else 0.0
                self._pending.append(_Entry(index, event_id, frame, now))
                if on_receipt is not None:
                    self._receipts[index] = on_receipt
                if urgent:
                    self._send_now_through = index
                # While sends fail the I/O thread's retry sends this one too.
                if not self._send_blocked:
                    if self._next_batch_size():
                        action = "send"
                    elif (len(self._in_flight) < min(self.partial_batches_in_flight, self.max_in_flight_batches)
                          and self._io_must_wake_by(self._partial_due(), now)):
                        action = "wake"
        if dropped is not None and dropped[1] is not None:
            _call(dropped[1], Receipt(uuid.UUID(bytes=dropped[0].id), Status.DROPPED_FROM_OUTBOX))
        if refused is not None:
            if on_receipt is not None:
                _call(on_receipt, Receipt(uuid.UUID(bytes=event_id), refused))
        elif action == "send":
            self._send_from_caller()
        elif action == "wake":
            self._wake()
        return uuid.UUID(bytes=event_id)

    def send(self, event: Event, timeout: Optional[float] = None) -> Receipt:
        """Queues `event` and waits for its final `Receipt` (accepted, duplicate, rejected, …).
        Waits as long as it takes for the agent to come up unless `timeout` (seconds) is given;
        then raises `FerryTimeout` (the event stays queued). The event does not wait for the send
        delay: it goes out at once, with the events queued before it."""
        done = threading.Event()
        result: List[Receipt] = []

        def receive(receipt: Receipt) -> None:
            result.append(receipt)
            done.set()

        event_id = self._enqueue(event, receive, True)
        if not done.wait(timeout):
            raise FerryTimeout("no final status for event %s after %ss" % (event_id, timeout))
        return result[0]

    # --- waiting ---------------------------------------------------------------------------------

    def flush(self, timeout: Optional[float] = None) -> None:
        """Waits until every event queued before this call has a final status (acked, or dropped
        by the overflow policy). Raises `FerryTimeout` after `timeout` seconds (the events stay
        queued), `ClientClosed` if the client is closed meanwhile."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._next_index - 1
            if self._lowest_unresolved() > target and not self._delivering:
                return
            # A flush does not wait out the send delay: what it waits for goes now.
            self._send_now_through = max(self._send_now_through, target)
        self._send_from_caller()
        with self._cond:
            # Resolved, and the receipts of the events resolved meanwhile called.
            while self._lowest_unresolved() <= target or self._delivering:
                if self._closed:
                    raise ClientClosed("the client was closed with events unacknowledged")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise FerryTimeout("%d events still unacknowledged after %ss"
                                       % (len(self._pending) + self._in_flight_events, timeout))
                self._cond.wait(remaining)

    @property
    def statistics(self) -> Statistics:
        """A copy of the current counters."""
        with self._lock:
            stats = Statistics(**vars(self._stats))
            stats.pending = len(self._pending) + self._in_flight_events
            return stats

    @property
    def session(self) -> uuid.UUID:
        """This client's session in this process (a new one after `fork()`)."""
        with self._lock:
            return uuid.UUID(bytes=self._session)

    @property
    def protocol_version(self) -> int:
        """2, or 1 after an agent that speaks only protocol 1 refused version 2."""
        with self._lock:
            return self._protocol_version

    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
        return self._closed

    def close(self, flush_timeout: Optional[float] = None) -> None:
        """Sends the events still queued at once (none waits for the send delay), stops the I/O
        thread and closes the socket, which keeps trying to pass the last messages to the agent
        for up to a second. With `flush_timeout`, first waits up to that long for the acks.
        Events still unacked are abandoned (their `on_receipt` gets `client_closed`: the agent
        may still have stored them). Idempotent."""
        if flush_timeout is not None and not self._closed:
            try:
                self.flush(flush_timeout)
            except FerryTimeout:
                _log.warning("ferry client closing with %d events unacknowledged", self.statistics.pending)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        self._wake()
        if thread is not None and thread is not threading.current_thread():
            thread.join(10)
        with self._lock:
            receipts = self._receipts
            self._receipts = {}
            entries = list(self._pending) + [e for batch in self._in_flight.values() for e in batch.entries]
        ids = {entry.index: entry.id for entry in entries}
        for index, callback in receipts.items():
            _call(callback, Receipt(uuid.UUID(bytes=ids.get(index, bytes(16))), Status.CLIENT_CLOSED))
        self._close_wake_pipe()
        self._alarm.close()
        _clients.discard(self)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        """Waits up to `exit_flush_timeout` for the acks, then closes."""
        self.close(flush_timeout=self.exit_flush_timeout)

    def __repr__(self) -> str:
        return "<ferry.Client source=%r endpoint=%r%s>" % (self.source, self.endpoint, " closed" if self._closed else "")

    # --- state and start -------------------------------------------------------------------------

    def _fresh_state(self) -> None:
        """Everything that belongs to one process: a new session, sequence, ids and outbox."""
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._pid = os.getpid()
        self._session = os.urandom(16)
        self._sequence = 0
        self._ids = wire.UUIDv7()
        self._pending = collections.deque()
        self._in_flight = {}
        self._in_flight_events = 0
        self._next_index = 1
        self._next_request_id = 1
        self._protocol_version = wire.PROTOCOL_VERSION
        self._receipts = {}
        self._stats = Statistics()
        self._sock_lock = threading.Lock()
        self._delivering = 0
        self._send_now_through = 0
        self._send_blocked = False
        self._retry_at = 0.0
        self._io_asleep = False
        self._io_wakes_at = None
        self._alarm = _Alarm()
        self._alarm_at = None
        self._thread = None
        self._context = None
        self._socket = None
        self._wake_r = self._wake_w = -1

    def _start(self) -> None:
        """Creates the wake pipe, the ZeroMQ context and the I/O thread, and waits until the
        thread has its socket."""
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._context = zmq.Context()
        ready = threading.Event()
        failure: List[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(ready, failure), name="ferry-client", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._context.term()
            self._close_wake_pipe()
            self._alarm.close()
            raise SocketError("cannot connect to %s: %s" % (self.endpoint, failure[0]))

    def _ensure_started(self) -> None:
        """After fork(): the first use in the child starts its own connection. Called locked."""
        if self._thread is None and not self._closed:
            self._start()

    def _after_fork_in_child(self) -> None:
        _inherited.extend([self._context, self._socket])
        self._alarm.close()
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        closed = self._closed
        self._fresh_state()  # new locks: the parent's may be held by threads that do not exist here
        self._closed = closed

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):
            pass  # already signalled (a full pipe), or closed

    def _close_wake_pipe(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._wake_r = self._wake_w = -1

    def _lowest_unresolved(self) -> int:
        lowest = self._pending[0].index if self._pending else self._next_index
        for batch in self._in_flight.values():
            if batch.entries and batch.entries[0].index < lowest:
                lowest = batch.entries[0].index
        return lowest

    # --- the I/O thread --------------------------------------------------------------------------

    # The one DEALER socket is guarded by `_sock_lock`, not confined to the I/O thread: a ZeroMQ
    # socket is not thread safe, but it may move between threads with a full memory barrier
    # between uses, which the lock gives. Whoever holds the lock may send and receive:
    # - the thread that queues an event that may go now (no send delay, `send()`, `flush()`, a
    #   full batch) sends it itself when the socket is free (`acquire(blocking=False)`: it never
    #   waits for the lock, and sends never block: DONTWAIT). A thread that finds the lock taken
    #   leaves the work to the holder, which looks for sendable events again after releasing it.
    # - the I/O thread sleeps in one poll(2) on the socket's notification descriptor (ZMQ_FD, a
    #   plain descriptor, polled without the lock), the wake pipe and the alarm; it wakes when an
    #   ack arrives (once per message, whose receipts it completes in place), when a send delay
    #   ends (the alarm, which a queueing thread sets without waking it), to re-send or to retry.
    # So an event costs the app no wake-up of the I/O thread to send, only one per message for
    # the ack (before, it cost one for each). The rule that keeps the I/O thread's poll correct:
    # whoever holds the lock reads replies until the socket has none before releasing it. A
    # receive that finds nothing has processed the socket's commands and left its mailbox marked
    # asleep, so the next ack signals ZMQ_FD again; a send may have taken the descriptor's signal
    # for an ack that already came, and that read finds it. Receipts are called after the lock
    # is released, on the thread that read the ack (the Swift client works the same way).

    def _send_from_caller(self) -> None:
        """Sends what may go now from the calling thread if the socket is free, and reads the
        replies that came meanwhile."""
        while True:
            sock = self._socket
            if sock is None or not self._sock_lock.acquire(blocking=False):
                return  # not started yet, or the holder sends after releasing
            calls: List[Tuple[_ReceiptCallback, Receipt]] = []
            try:
                if sock.closed:
                    return
                self._send_pending(sock, time.monotonic(), True)
                self._read_replies(sock, calls)
            except zmq.ZMQError as error:  # e.g. the context terminated by close() meanwhile
                _log.debug("ferry client: send from the caller failed: %s", error)
                return
            finally:
                self._sock_lock.release()
                self._deliver(calls)
            # Events another thread queued while this one held the socket are this one's to send.
            with self._lock:
                if self._closed or self._send_blocked or not self._next_batch_size():
                    return

    def _deliver(self, calls: List[Tuple[_ReceiptCallback, Receipt]]) -> None:
        """Calls the receipts a pass over the socket resolved (after its lock is released), then
        lets flush() return: it waits for the receipts being called, too."""
        if not calls:
            return
        for callback, receipt in calls:
            _call(callback, receipt)
        with self._lock:
            self._delivering -= len(calls)
            self._cond.notify_all()

    def _io_must_wake_by(self, deadline: Optional[float], now: float) -> bool:
        """Makes sure the sleeping I/O thread wakes by `deadline`: sets the alarm (no wake-up now)
        if it would sleep longer. True if the wake pipe must be written instead (no alarm on this
        system). Called locked, so the thread cannot fall asleep meanwhile with an older deadline."""
        if deadline is None or not self._io_asleep:
            return False
        if self._io_wakes_at is not None and self._io_wakes_at <= deadline:
            return False
        self._io_wakes_at = deadline
        if self._alarm.set(deadline - now):
            self._alarm_at = deadline
            return False
        self._io_asleep = False
        return True

    def _block_sends(self, now: float) -> None:
        """After a refused send (no agent, or its pipe full): nobody sends until the I/O thread
        retries, 50 ms later. Called locked."""
        self._send_blocked = True
        self._retry_at = now + 0.05
        if self._io_must_wake_by(self._retry_at, now):
            self._wake()

    def _run(self, ready: threading.Event, failure: List[BaseException]) -> None:
        context, wake_r = self._context, self._wake_r
        assert context is not None
        sock = None
        try:
            sock = context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            # Without a connected agent, sends fail at once instead of queueing in a pipe the
            # agent may never read; the events wait in the outbox instead.
            sock.setsockopt(zmq.IMMEDIATE, 1)
            sock.setsockopt(zmq.RECONNECT_IVL, 50)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, 500)
            sock.connect(self.endpoint)
            notify = sock.getsockopt(zmq.FD)
        except zmq.ZMQError as error:
            if sock is not None:
                sock.close(linger=0)  # else terminating the context would wait for it
            failure.append(error)
            ready.set()
            return
        self._socket = sock
        ready.set()
        alarm = self._alarm
        waiter = select.poll()
        waiter.register(notify, select.POLLIN)
        waiter.register(wake_r, select.POLLIN)
        if alarm.fd >= 0:
            waiter.register(alarm.fd, select.POLLIN)
        try:
            while True:
                with self._lock:
                    if self._closed:
                        break
                    timeout = self._io_timeout()
                woken = rang = False
                if timeout != 0:
                    for fd, _ in waiter.poll(None if timeout is None else math.ceil(timeout * 1000)):
                        if fd == wake_r:
                            woken = True
                        elif fd == alarm.fd:
                            rang = True
                if woken:
                    try:
                        os.read(wake_r, 4096)
                    except (BlockingIOError, OSError):
                        pass
                if rang:
                    alarm.drain()
                now = time.monotonic()
                with self._lock:
                    self._io_asleep = False
                    self._io_wakes_at = None
                    if rang:
                        self._alarm_at = None
                    if self._closed:
                        break
                calls: List[Tuple[_ReceiptCallback, Receipt]] = []
                with self._sock_lock:
                    try:
                        self._read_replies(sock, calls)
                        with self._lock:
                            # While sends are blocked, only once the retry is due.
                            if self._send_blocked and now >= self._retry_at:
                                self._send_blocked = False
                            may_send = not self._send_blocked
                            overdue = any(now - b.sent_at >= self.resend_after for b in self._in_flight.values())
                        if may_send:
                            if not overdue or self._resend_overdue(sock, now):
                                self._send_pending(sock, now, False)
                            self._read_replies(sock, calls)  # anything a send took the signal for
                    except zmq.ContextTerminated:
                        raise
                    except Exception:  # a bug must not stop delivery for good: log it and go on
                        _log.exception("ferry client I/O error")
                        with self._lock:
                            self._block_sends(now)
                self._deliver(calls)
            self._close_socket(sock)
        except zmq.ContextTerminated:
            pass
        finally:
            with self._sock_lock:
                sock.close(linger=0)  # a no-op if the last pass closed it
            context.term()

    def _close_socket(self, sock: zmq.Socket) -> None:
        """The last pass: reads the replies already there, sends every event still queued (none
        waits for the send delay or the in-flight window once closed) and closes the socket with
        a linger, so that libzmq still passes those messages to the agent."""
        calls: List[Tuple[_ReceiptCallback, Receipt]] = []
        with self._sock_lock:
            try:
                self._read_replies(sock, calls)
                with self._lock:
                    self._send_blocked = False
                self._send_pending(sock, time.monotonic(), False)
            except zmq.ZMQError as error:
                _log.debug("ferry client: last send failed: %s", error)
            sock.close(linger=1000)
        self._deliver(calls)

    def _io_timeout(self) -> Optional[float]:
        """Seconds the I/O thread may sleep (called locked): 0 when a batch can go out; else
        until a blocked send is retried, the oldest in-flight batch is due for re-sending or a
        partial batch's send delay ends (if the in-flight window lets it go then), or None: until
        an ack, the alarm or the wake pipe. Marks the thread asleep with that deadline."""
        if not self._send_blocked and self._next_batch_size():
            return 0
        deadline: Optional[float] = None
        if self._send_blocked:
            deadline = self._retry_at  # nothing goes out (re-sends neither) before the retry
        else:
            if self._in_flight:
                deadline = min(batch.sent_at for batch in self._in_flight.values()) + self.resend_after
            partial_due = self._partial_due()
            if (partial_due is not None
                    and len(self._in_flight) < min(self.partial_batches_in_flight, self.max_in_flight_batches)):
                deadline = partial_due if deadline is None else min(deadline, partial_due)
        # An alarm set for a batch that went out earlier (full, awaited or flushed) would only
        # wake this thread for nothing.
        if self._alarm_at is not None and (deadline is None or self._alarm_at < deadline):
            self._alarm.clear()
            self._alarm_at = None
        self._io_asleep = True
        self._io_wakes_at = deadline
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _partial_due(self) -> Optional[float]:
        """When the partial batch at the head of the outbox may go out under `send_delay` (None:
        it need not wait — no delay, `send()` or a flush waits for one of its events, closing,
        nothing queued)."""
        if not self.send_delay or self._closed or not self._pending:
            return None
        first = self._pending[0]
        if first.index <= self._send_now_through:
            return None
        return first.queued_at + self.send_delay

    def _resend_overdue(self, sock: zmq.Socket, now: float) -> bool:
        """Re-sends batches whose ack is overdue. False if the socket refused (no agent)."""
        with self._lock:
            overdue = sorted(((rid, b) for rid, b in self._in_flight.items() if now - b.sent_at >= self.resend_after),
                             key=lambda item: item[0])
        for request_id, batch in overdue:
            try:
                sock.send_multipart(batch.message, flags=zmq.DONTWAIT)
            except zmq.Again:
                with self._lock:
                    self._block_sends(now)
                return False
            with self._lock:
                batch.sent_at = now
                self._stats.resent_batches += 1
        return True

    def _next_batch_size(self) -> int:
        """How many events the next message may carry now (0: none may go out). A full batch
        (batch_max_events, or as many as fit in batch_max_bytes) while the in-flight window has
        room; a partial one only once its send delay ended and while fewer than
        `partial_batches_in_flight` messages are in flight, so under load events gather into one
        message instead of one message each (as the Swift client does). Once closed, everything
        goes (the last pass before the socket closes)."""
        if not self._pending or (len(self._in_flight) >= self.max_in_flight_batches and not self._closed):
            return 0
        count = size = 0
        for entry in itertools.islice(self._pending, self.batch_max_events):
            if count and size + len(entry.frame) > self.batch_max_bytes:
                break
            size += len(entry.frame)
            count += 1
        full = count == self.batch_max_events or count < len(self._pending)
        if not full and not self._closed:
            if len(self._in_flight) >= self.partial_batches_in_flight:
                return 0
            due = self._partial_due()
            if due is not None and due > time.monotonic():
                return 0
        return count

    def _send_pending(self, sock: zmq.Socket, now: float, by_caller: bool) -> None:
        """Sends new batches from the outbox while they may go. A refused send (no agent, or the
        pipe is full) leaves the batch pending and blocks sends until the I/O thread retries."""
        while True:
            # The send happens under the lock (a non-blocking copy into libzmq), so an event is
            # either pending or in flight, never in between where the overflow policy misses it.
            with self._lock:
                count = 0 if self._send_blocked else self._next_batch_size()
                if not count:
                    return
                request_id = self._next_request_id
                entries = [self._pending[i] for i in range(count)]
                version = self._protocol_version
                message = [wire.encode_header(wire.KIND_EVENTS, request_id, version=version)]
                message += [e.frame if version >= 2 else wire.strip_extensions(e.frame) for e in entries]
                try:
                    sock.send_multipart(message, flags=zmq.DONTWAIT)
                except zmq.Again:
                    self._block_sends(now)
                    return
                self._next_request_id = request_id + 1 if request_id < 0xFFFF_FFFF else 1
                for _ in range(count):
                    self._pending.popleft()
                self._in_flight[request_id] = _Batch(entries, message, now)
                self._in_flight_events += count
                self._stats.sent_messages += 1
                if by_caller:
                    self._stats.sent_by_caller += 1
                    # The I/O thread may be asleep with no deadline (nothing was in flight when it
                    # fell asleep) and may never see this batch's ack: it must wake to re-send it
                    # by then. Usually the alarm is set (no wake-up now); the ack clears it.
                    if self._io_must_wake_by(now + self.resend_after, now):
                        self._wake()

    def _read_replies(self, sock: zmq.Socket, calls: List[Tuple[_ReceiptCallback, Receipt]]) -> None:
        """Reads every reply waiting (until there is none: the rule above), resolving their
        batches; the receipts to call are added to `calls`."""
        while True:
            try:
                message = sock.recv_multipart(flags=zmq.DONTWAIT)
            except zmq.Again:
                return
            try:
                if len(message) != 2:
                    raise wire.ProtocolError("reply has %d frames, expected 2" % len(message))
                header = wire.decode_header(message[0])
                if header.kind == wire.KIND_ACK:
                    body = message[1]
                    if _all_accepted(body) and self._complete_accepted(header.request_id, (len(body) - 4) // wire.ACK_ENTRY_SIZE, calls):
                        continue
                    entries = wire.decode_ack(body)
                    self._complete(header.request_id, lambda i: _ack_status(entries, i), calls)
                elif header.kind == wire.KIND_ERROR:
                    self._handle_error(header.request_id, wire.decode_error(message[1]), calls)
            except wire.ProtocolError as error:
                _log.warning("ferry client: ignoring an unreadable reply from the agent: %s", error)

    def _handle_error(self, request_id: int, error: wire.ErrorReply, calls: List[Tuple[_ReceiptCallback, Receipt]]) -> None:
        if error.name == "unsupported_version" and self._downgrade():
            _log.warning("ferry agent speaks protocol 1 only: sending without a session "
                         "(re-sends are then deduplicated by id only; extension fields are left out)")
            self._wake()  # the I/O thread re-sends the rebuilt batches
            return
        if error.name == "shutting_down":
            # Not a verdict on the events: the agent is stopping. The batch stays in flight and
            # is sent again (after resend_after) to the next agent.
            return
        _log.error("ferry agent refused a message: %s: %s", error.name, error.message)
        self._complete(request_id, lambda _: (Status.REFUSED_BY_AGENT, error.name), calls)

    def _downgrade(self) -> bool:
        """Switches to protocol 1 after an older agent refused version 2: the in-flight batches
        are rebuilt without extensions and go out again at once. False if already on 1."""
        with self._lock:
            if self._protocol_version <= 1:
                return False
            self._protocol_version = 1
            for request_id, batch in self._in_flight.items():
                batch.message = [wire.encode_header(wire.KIND_EVENTS, request_id, version=1)] + \
                    [wire.strip_extensions(entry.frame) for entry in batch.entries]
                batch.sent_at -= self.resend_after  # overdue: the next turn of the loop re-sends it
            return True

    def _complete_accepted(self, request_id: int, count: int, calls: List[Tuple[_ReceiptCallback, Receipt]]) -> bool:
        """Resolves an in-flight batch whose ack says `accepted` (reason none) for all its `count`
        events, the common case, without decoding each entry. False if the ack does not cover
        the batch event for event (the general path then judges it)."""
        with self._lock:
            batch = self._in_flight.get(request_id)
            if batch is None:
                return True  # a late reply to a batch already resolved
            if len(batch.entries) != count:
                return False
            del self._in_flight[request_id]
            self._in_flight_events -= count
            self._stats.accepted += count
            receipts = self._receipts
            if receipts:
                for entry in batch.entries:
                    callback = receipts.pop(entry.index, None)
                    if callback is not None:
                        calls.append((callback, Receipt(uuid.UUID(bytes=entry.id), Status.ACCEPTED)))
                        self._delivering += 1
            self._cond.notify_all()
        return True

    def _complete(self, request_id: int, status_of: Callable[[int], Tuple[Status, Optional[str]]],
                  calls: List[Tuple[_ReceiptCallback, Receipt]]) -> None:
        """Resolves every event of an in-flight batch (a late reply to a batch already resolved
        is ignored)."""
        with self._lock:
            batch = self._in_flight.pop(request_id, None)
            if batch is None:
                return
            self._in_flight_events -= len(batch.entries)
            stats = self._stats
            for offset, entry in enumerate(batch.entries):
                status, reason = status_of(offset)
                if status is Status.ACCEPTED:
                    stats.accepted += 1
                elif status is Status.DUPLICATE:
                    stats.duplicate += 1
                elif status is Status.SUPPRESSED:
                    stats.suppressed += 1
                else:
                    stats.rejected += 1
                    if status is Status.BLOCKED:
                        stats.blocked += 1
                callback = self._receipts.pop(entry.index, None)
                if callback is not None:
                    calls.append((callback, Receipt(uuid.UUID(bytes=entry.id), status, reason)))
                    self._delivering += 1
            self._cond.notify_all()


class _Alarm:
    """The I/O thread's alarm: a timerfd in its poll set, which another thread sets for the end
    of a send delay without waking the I/O thread (a write to the wake pipe would wake it now only
    for it to sleep again until the delay ends: one more context switch per batch). Where there
    is no timerfd (not Linux), `set()` returns False and the caller writes the wake pipe."""

    class _Spec(ctypes.Structure):
        _fields_ = [("interval_sec", ctypes.c_long), ("interval_nsec", ctypes.c_long),
                    ("value_sec", ctypes.c_long), ("value_nsec", ctypes.c_long)]

    _calls: Optional[Tuple[Any, Any]] = None
    _looked_up = False

    def __init__(self) -> None:
        self.fd = -1
        calls = _Alarm._lookup()
        if calls is not None:
            # CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC (O_NONBLOCK | O_CLOEXEC).
            fd = calls[0](time.CLOCK_MONOTONIC, os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            self.fd = fd if fd >= 0 else -1

    @staticmethod
    def _lookup() -> Optional[Tuple[Any, Any]]:
        if not _Alarm._looked_up:
            _Alarm._looked_up = True
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                create, settime = libc.timerfd_create, libc.timerfd_settime
            except (OSError, AttributeError):
                return None
            create.argtypes, create.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Alarm._Spec), ctypes.c_void_p]
            settime.restype = ctypes.c_int
            _Alarm._calls = (create, settime)
        return _Alarm._calls

    def set(self, delay: float) -> bool:
        """Rings once after `delay` seconds (replacing an earlier setting). False: no alarm."""
        if self.fd < 0 or _Alarm._calls is None:
            return False
        nanoseconds = max(1, int(delay * 1e9))  # zero would disarm it
        spec = _Alarm._Spec(0, 0, nanoseconds // 1_000_000_000, nanoseconds % 1_000_000_000)
        return _Alarm._calls[1](self.fd, 0, ctypes.byref(spec), None) == 0

    def clear(self) -> None:
        if self.fd >= 0 and _Alarm._calls is not None:
            _Alarm._calls[1](self.fd, 0, ctypes.byref(_Alarm._Spec(0, 0, 0, 0)), None)

    def drain(self) -> None:
        try:
            os.read(self.fd, 8)
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1


def _all_accepted(body: bytes) -> bool:
    """Whether an ack body is well formed and every entry is `accepted` with no reason (status
    and reason bytes 0), checked without decoding the entries."""
    if len(body) < 4 or (len(body) - 4) % wire.ACK_ENTRY_SIZE:
        return False
    count = int.from_bytes(body[:4], "little")
    if len(body) != 4 + count * wire.ACK_ENTRY_SIZE:
        return False
    verdicts = bytes(body[20::wire.ACK_ENTRY_SIZE]) + bytes(body[21::wire.ACK_ENTRY_SIZE])
    return verdicts.count(0) == len(verdicts)


def _ack_status(entries: List[wire.AckEntry], index: int) -> Tuple[Status, Optional[str]]:
    if index >= len(entries):
        return Status.REJECTED, "malformed"
    entry = entries[index]
    return Status(entry.status), (None if entry.reason == "none" else entry.reason)


def _call(callback: _ReceiptCallback, receipt: Receipt) -> None:
    try:
        callback(receipt)
    except Exception:
        _log.exception("ferry client: on_receipt callback raised")


# --- fork and exit -------------------------------------------------------------------------------

_held: List[Client] = []


def _before_fork() -> None:
    # Hold every client's lock across fork(), so the child never inherits one held by another
    # thread mid-change.
    for client in list(_clients):
        client._lock.acquire()
        _held.append(client)


def _after_fork_in_parent() -> None:
    while _held:
        _held.pop()._lock.release()


def _after_fork_in_child() -> None:
    _held.clear()
    for client in list(_clients):
        client._after_fork_in_child()


def _close_all_at_exit() -> None:
    for client in list(_clients):
        try:
            client.close()
        except Exception:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
atexit.register(_close_all_at_exit)
