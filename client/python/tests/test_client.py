"""ferry.Client against a real ferryd: delivery, exactly once across a crash, the outbox, threads."""
from __future__ import annotations

import contextlib
import sys
import threading
import time
import uuid

import pytest
import zmq

import ferry
from ferry import protocol as wire

from conftest import wait_for


def assert_exactly_once(events, count, session=None):
    ids = [e["id"] for e in events]
    assert len(ids) == len(set(ids)), "an event was delivered twice"
    assert sorted(e["seq"] for e in events) == list(range(1, count + 1))
    if session is not None:
        assert {e.get("session") for e in events} == {str(session)}


def test_agent_started_after_the_client(make_agent, make_client):
    agent = make_agent()
    client = make_client(source="early", runtime_dir=agent.runtime_dir, resend_after=0.5)
    ids = [client.track("Before Agent", {"i": i}) for i in range(50)]
    with pytest.raises(ferry.FerryTimeout):
        client.flush(timeout=0.2)
    assert client.statistics.pending == 50

    agent.start().wait_ready()
    client.flush(timeout=30)
    stats = client.statistics
    assert (stats.accepted, stats.pending, stats.rejected) == (50, 0, 0)
    events = agent.wait_delivered(50, source="early")
    assert_exactly_once(events, 50, client.session)
    assert [e["id"] for e in sorted(events, key=lambda e: e["seq"])] == [str(i) for i in ids]
    assert events[0]["properties"] == {"i": events[0]["seq"] - 1}


@pytest.mark.parametrize("stop", ["kill -9", "SIGTERM"])
def test_agent_stopped_mid_stream_then_restarted_stores_every_event_exactly_once(agent, make_client, stop):
    total = 3000
    client = make_client(source="crashy", runtime_dir=agent.runtime_dir, batch_max_events=10,
                         max_in_flight_batches=2, resend_after=0.3)
    for i in range(total):
        client.track("Stream", {"i": i})
    wait_for("the first 300 acks", lambda: client.statistics.accepted >= 300)
    agent.kill9() if stop == "kill -9" else agent.terminate()
    at_kill = client.statistics
    assert at_kill.pending > 0, "the agent was killed after the stream, not in the middle of it"

    agent.start().wait_ready()
    client.flush(timeout=60)
    stats = client.statistics
    assert stats.accepted + stats.duplicate == total and stats.rejected == 0, stats
    events = agent.wait_delivered(total, source="crashy", timeout=60)
    assert_exactly_once(events, total, client.session)
    assert len(agent.delivered()) == total


def test_send_returns_the_final_status(agent, make_client):
    client = make_client(source="send", runtime_dir=agent.runtime_dir)
    receipt = client.send(ferry.Event(name="Signed Up", properties={"plan": "pro"}), timeout=30)
    assert receipt.status is ferry.Status.ACCEPTED and receipt.ok and receipt.reason is None
    private = client.send(ferry.Event(name="Private", local_only=True), timeout=30)
    assert (private.status, private.reason) == (ferry.Status.SUPPRESSED, "local_only")
    huge = client.send(ferry.Event(name="Huge", properties={"blob": "x" * 70_000}), timeout=30)
    assert (huge.status, huge.reason) == (ferry.Status.REJECTED, "too_large")
    first = client.send(ferry.Event(name="Welcome", once_key="welcome-1"), timeout=30)
    again = client.send(ferry.Event(name="Welcome", once_key="welcome-1"), timeout=30)
    assert (first.status, first.reason) == (ferry.Status.ACCEPTED, None)
    assert (again.status, again.reason) == (ferry.Status.DUPLICATE, "once_key") and again.id != first.id
    stats = client.statistics
    assert (stats.accepted, stats.duplicate, stats.suppressed, stats.rejected) == (2, 1, 1, 1)


def test_event_helpers_and_the_event_model_fields(agent, make_client):
    client = make_client(source="model", runtime_dir=agent.runtime_dir)
    client.track("Order Completed", {"total": 42.5}, user_id="u-1", anonymous_id="anon-1",
                 context={"app": {"version": "1.2"}})
    client.screen("Home", anonymous_id="anon-1")
    client.page("Pricing", {"path": "/pricing"}, user_id="u-1")
    client.identify("u-1", {"plan": "pro"}, anonymous_id="anon-1")
    client.group("g-1", {"seats": 5}, user_id="u-1")
    client.alias("u-1", previous_id="anon-1")
    client.flush(timeout=30)
    assert client.statistics.accepted == 6
    events = sorted(agent.wait_delivered(6, source="model"), key=lambda e: e["seq"])
    assert [e["type"] for e in events] == ["track", "screen", "page", "identify", "group", "alias"]
    assert events[0]["properties"] == {"total": 42.5} and events[0]["user_id"] == "u-1"
    assert events[2]["name"] == "Pricing" and events[3]["properties"] == {"plan": "pro"}
    assert events[0]["anonymous_id"] == "anon-1" and events[0]["context"] == {"app": {"version": "1.2"}}
    assert events[4]["group_id"] == "g-1" and events[5]["previous_id"] == "anon-1"
    assert "group_id" not in events[0] and "previous_id" not in events[0]


def test_bad_input_is_refused_at_the_call_and_queues_nothing(make_client, workdir):
    client = make_client(source="bad", runtime_dir=workdir)
    with pytest.raises(TypeError, match="properties"):
        client.track("x", {"when": object()})
    with pytest.raises(ValueError, match="JSON"):
        client.track("x", {"ratio": float("inf")})
    with pytest.raises(ValueError, match="anonymous_id"):
        client.track("x", anonymous_id="a" * 2000)
    with pytest.raises(ValueError, match="category"):
        client.track("x", category="sports")
    with pytest.raises(ValueError, match="event type"):
        client.enqueue(ferry.Event(type="click", name="x"))
    with pytest.raises(TypeError, match="context"):
        client.track("x", context=["not", "an", "object"])
    with pytest.raises(ValueError):
        ferry.Client(source="s", runtime_dir=workdir, batch_max_events=5000)
    assert client.statistics == ferry.Statistics()


@pytest.mark.parametrize("policy, kept", [("drop-oldest", range(16, 26)), ("drop-newest", range(1, 11))])
def test_the_outbox_is_bounded(make_agent, make_client, policy, kept):
    agent = make_agent()
    client = make_client(source="bounded", runtime_dir=agent.runtime_dir, outbox_capacity=10, overflow_policy=policy)
    receipts = {}
    lock = threading.Lock()

    def remember(receipt):
        with lock:
            receipts[receipt.id] = receipt.status

    ids = [client.enqueue(ferry.Event(name="E%d" % i), remember) for i in range(1, 26)]
    stats = client.statistics
    assert (stats.enqueued, stats.dropped_from_outbox, stats.pending) == (25, 15, 10)
    dropped = [i for n, i in enumerate(ids, start=1) if n not in kept]
    assert all(receipts.get(i) is ferry.Status.DROPPED_FROM_OUTBOX for i in dropped)

    agent.start().wait_ready()
    client.flush(timeout=30)
    events = agent.wait_delivered(10, source="bounded")
    assert sorted(e["seq"] for e in events) == list(kept)
    assert all(receipts[ids[n - 1]] is ferry.Status.ACCEPTED for n in kept)


def test_many_threads_share_one_client(agent, make_client):
    client = make_client(source="threads", runtime_dir=agent.runtime_dir)
    threads = [threading.Thread(target=lambda: [client.track("T", {"n": n}) for n in range(250)]) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    client.flush(timeout=60)
    assert client.statistics.accepted == 2000
    assert_exactly_once(agent.wait_delivered(2000, source="threads"), 2000, client.session)


def test_context_manager_flushes_then_closes(agent):
    receipts = []
    with ferry.Client(source="ctx", runtime_dir=agent.runtime_dir) as client:
        for i in range(20):
            client.track("In Block", {"i": i})
    assert client.closed and client.statistics.accepted == 20
    late = client.enqueue(ferry.Event(name="Too Late"), receipts.append)
    assert receipts == [ferry.Receipt(late, ferry.Status.CLIENT_CLOSED)]
    client.close()  # idempotent
    assert len(agent.wait_delivered(20, source="ctx")) == 20


def test_close_abandons_unacked_events_with_a_receipt(make_client, workdir):
    client = make_client(source="abandon", runtime_dir=workdir)
    receipts = []
    client.enqueue(ferry.Event(name="Never Sent"), receipts.append)
    client.close()
    assert [r.status for r in receipts] == [ferry.Status.CLIENT_CLOSED]
    with pytest.raises(ferry.ClientClosed):
        client.flush(timeout=1)


def test_falls_back_to_protocol_1_for_an_older_agent(workdir, make_client):
    """A protocol-1 agent (no real one is left to run, so a ROUTER playing one) answers version 2
    with unsupported_version; the client sends the same events again as version 1, without
    their extension block, and keeps to version 1."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind("ipc://%s/ingest" % workdir)
    seen_versions = []
    stop = threading.Event()

    def old_agent():
        while not stop.is_set():
            if not router.poll(20):
                continue
            peer, header, *frames = router.recv_multipart()
            version, kind, _, request_id = wire.decode_header(header)
            seen_versions.append(version)
            if version != 1:
                router.send_multipart([peer, wire.encode_header(wire.KIND_ERROR, request_id, version=1),
                                       wire.encode_error(2, "unsupported protocol version %d" % version)])
                continue
            for frame in frames:
                assert not wire.decode_event(frame, version=1).flags & wire.FLAG_EXTENDED
            router.send_multipart([peer, wire.encode_header(wire.KIND_ACK, request_id, version=1),
                                   wire.encode_ack([(f[:16], 0, 0) for f in frames])])

    thread = threading.Thread(target=old_agent)
    thread.start()
    try:
        client = make_client(source="old", runtime_dir=workdir)
        first = client.send(ferry.Event(name="First", anonymous_id="a"), timeout=30)
        second = client.send(ferry.Event(name="Second"), timeout=30)
        assert (first.status, second.status) == (ferry.Status.ACCEPTED, ferry.Status.ACCEPTED)
        assert client.protocol_version == 1
        assert seen_versions == [2, 1, 1]
    finally:
        stop.set()
        thread.join()
        router.close()
        context.term()


@contextlib.contextmanager
def scripted_agent(workdir):
    """A ROUTER bound where the agent's ingest socket would be, that the test drives by hand."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind("ipc://%s/ingest" % workdir)
    try:
        yield router
    finally:
        router.close()
        context.term()


def ack_all(router, peer, request_id, frames):
    """Answers one message: every event accepted."""
    router.send_multipart([peer, wire.encode_header(wire.KIND_ACK, request_id),
                           wire.encode_ack([(f[:16], 0, 0) for f in frames])])


def test_an_agent_refusal_of_the_whole_message_is_final(workdir, make_client):
    with scripted_agent(workdir) as router:
        client = make_client(source="denied", runtime_dir=workdir)
        receipts = []
        client.enqueue(ferry.Event(name="x"), receipts.append)
        assert router.poll(10_000)
        peer, header, _ = router.recv_multipart()
        request_id = wire.decode_header(header).request_id
        router.send_multipart([peer, wire.encode_header(wire.KIND_ERROR, request_id),
                               wire.encode_error(6, "access denied: ingest is for root")])
        client.flush(timeout=10)
        assert [(r.status, r.reason) for r in receipts] == [(ferry.Status.REFUSED_BY_AGENT, "access_denied")]
        assert client.statistics.rejected == 1


def test_partial_batches_wait_while_one_message_is_in_flight(workdir, make_client):
    """By default, while one message is unacked, events that do not fill a batch wait, then go
    out together in one message when its ack comes (one wake-up and one message per burst); the
    ack of a message whose events were all accepted resolves each of them, receipts included."""
    with pytest.raises(ValueError):
        ferry.Client(source="bad", runtime_dir=workdir, partial_batches_in_flight=0)
    with scripted_agent(workdir) as router:
        def receive():
            assert router.poll(10_000)
            peer, header, *frames = router.recv_multipart()
            return peer, wire.decode_header(header).request_id, frames

        client = make_client(source="gather-one", runtime_dir=workdir, resend_after=600.0)
        receipts = []
        first_id = client.enqueue(ferry.Event(name="first"), receipts.append)
        first = receive()
        later = [client.enqueue(ferry.Event(name="later-%d" % i), receipts.append) for i in range(8)]
        assert not router.poll(200), "nothing else goes out while the first message is unacked"
        ack_all(router, *first)
        peer, request_id, frames = receive()
        assert [uuid.UUID(bytes=bytes(f[:16])) for f in frames] == later
        ack_all(router, peer, request_id, frames)
        client.flush(timeout=10)
        assert client.statistics.accepted == 9
        assert sorted(r.id for r in receipts) == sorted([first_id] + later)
        assert all(r.status is ferry.Status.ACCEPTED and r.reason is None for r in receipts)


def test_send_delay_gathers_a_trickle_and_never_holds_a_full_batch_or_a_flush(workdir, make_client):
    """With a send delay, events queued within it go out together once the oldest has waited it
    (not the first alone at once); a full batch goes out at once, and flush() does not wait the
    delay out (as the Swift client's sendDelay)."""
    with pytest.raises(ValueError):
        ferry.Client(source="bad", runtime_dir=workdir, send_delay=-1)
    with scripted_agent(workdir) as router:
        def receive():
            assert router.poll(10_000)
            peer, header, *frames = router.recv_multipart()
            return peer, wire.decode_header(header).request_id, frames

        def ids(frames):
            return [uuid.UUID(bytes=bytes(f[:16])) for f in frames]

        gather = make_client(source="linger", runtime_dir=workdir, resend_after=600.0, send_delay=2.0)
        trickle = [gather.enqueue(ferry.Event(name="trickle-%d" % i)) for i in range(3)]
        message = receive()
        assert ids(message[2]) == trickle, "one message with all three, not the first alone"
        ack_all(router, *message)
        gather.flush(timeout=10)
        # A delay far longer than any wait here: only a full batch or a flush can send.
        held = make_client(source="linger-full", runtime_dir=workdir, resend_after=600.0, send_delay=600.0,
                           batch_max_events=4)
        full = [held.enqueue(ferry.Event(name="full-%d" % i)) for i in range(4)]
        message = receive()
        assert ids(message[2]) == full
        ack_all(router, *message)
        rest = [held.enqueue(ferry.Event(name="rest-%d" % i)) for i in range(2)]
        flushed = threading.Thread(target=held.flush, kwargs={"timeout": 20})
        flushed.start()
        message = receive()
        assert ids(message[2]) == rest
        ack_all(router, *message)
        flushed.join(30)
        assert not flushed.is_alive()
        assert held.statistics.accepted == 6


def _receive(router):
    assert router.poll(10_000)
    peer, header, *frames = router.recv_multipart()
    return peer, wire.decode_header(header).request_id, frames


def _ids(frames):
    return [uuid.UUID(bytes=bytes(f[:16])) for f in frames]


def _connect(client, router):
    """An awaited send, answered: the client is connected to `router` afterwards."""
    sender = threading.Thread(target=lambda: client.send(ferry.Event(name="connect"), timeout=30))
    sender.start()
    ack_all(router, *_receive(router))
    sender.join(30)


def test_the_send_delay_is_5_ms_by_default(workdir, make_client):
    """Kafka's linger.ms default since 4.0, as the Swift client's sendDelay."""
    assert make_client(source="default", runtime_dir=workdir).send_delay == 0.005


def test_fire_and_forget_calls_gather_within_the_send_delay(workdir, make_client):
    """track() and the other helpers, enqueue() and enqueue() with a receipt wait for the send
    delay: queued within it, they go out in one message."""
    with scripted_agent(workdir) as router:
        client = make_client(source="gather", runtime_dir=workdir, resend_after=600.0, send_delay=2.0)
        receipts = []
        ids = [client.track("t-0"), client.screen("t-1"), client.enqueue(ferry.Event(name="t-2")),
               client.enqueue(ferry.Event(name="t-3"), receipts.append)]
        message = _receive(router)
        assert _ids(message[2]) == ids, "one message with all four"
        ack_all(router, *message)
        wait_for("the receipt", lambda: receipts)
        assert receipts == [ferry.Receipt(ids[3], ferry.Status.ACCEPTED)]
        assert client.statistics.sent_messages == 1


def test_send_does_not_wait_for_the_send_delay(workdir, make_client):
    """send() goes out at once, with the events queued before it; an event queued after it waits
    again."""
    with scripted_agent(workdir) as router:
        client = make_client(source="urgent", runtime_dir=workdir, resend_after=600.0, send_delay=600.0)
        before = [client.track("queued-0"), client.track("queued-1")]
        result = []
        sender = threading.Thread(target=lambda: result.append(client.send(ferry.Event(name="awaited"), timeout=30)))
        sender.start()
        message = _receive(router)
        assert len(message[2]) == 3 and _ids(message[2])[:2] == before
        ack_all(router, *message)
        sender.join(30)
        assert result and result[0].status is ferry.Status.ACCEPTED and result[0].id == _ids(message[2])[2]
        after = client.track("after")
        assert not router.poll(200), "an event queued after the send waits for the delay"
        sender = threading.Thread(target=lambda: result.append(client.send(ferry.Event(name="second"), timeout=30)))
        sender.start()
        message = _receive(router)
        assert _ids(message[2])[0] == after and len(message[2]) == 2
        ack_all(router, *message)
        sender.join(30)
        assert client.statistics.accepted == 5


def test_close_does_not_wait_for_the_send_delay_and_loses_nothing_queued_within_it(workdir, make_client):
    with scripted_agent(workdir) as router:
        client = make_client(source="close", runtime_dir=workdir, resend_after=600.0, send_delay=600.0)
        _connect(client, router)  # so that the last pass has an agent to send to
        receipts = []
        waiting = [client.enqueue(ferry.Event(name="waiting-%d" % i), receipts.append) for i in range(5)]
        assert not router.poll(100), "the five wait for the delay"
        client.close()
        message = _receive(router)
        assert _ids(message[2]) == waiting
        assert sorted(r.status for r in receipts) == [ferry.Status.CLIENT_CLOSED] * 5


def test_with_no_send_delay_track_sends_at_once_from_the_calling_thread(workdir, make_client):
    with scripted_agent(workdir) as router:
        client = make_client(source="at-once", runtime_dir=workdir, resend_after=600.0, send_delay=0)
        _connect(client, router)
        for i in range(5):
            event_id = client.track("at-once-%d" % i)
            message = _receive(router)  # no flush, no close: it goes by itself
            assert _ids(message[2]) == [event_id]
            ack_all(router, *message)
            wait_for("its ack", lambda: client.statistics.pending == 0)
        stats = client.statistics
        assert stats.sent_messages == 6
        # The I/O thread sleeps while nothing is in flight: the sends were the callers', unless the
        # I/O thread happened to hold the socket at that moment.
        assert stats.sent_by_caller >= 1, stats


def test_a_batch_the_caller_sent_arms_the_sleeping_io_threads_resend(workdir, make_client):
    """The I/O thread sleeps without a deadline while nothing is in flight. A batch the calling
    thread sends itself must still be re-sent if its ack never comes, so that send arms the I/O
    thread's alarm for the re-send; without it the thread woke only if libzmq's notification
    descriptor fired after the caller's own read (the Swift client hung once so under load).
    White-box: the alarm is the mechanism. Then black-box: the unanswered message comes again."""
    resend_after = 1.0
    with scripted_agent(workdir) as router:
        client = make_client(source="resend-wake", runtime_dir=workdir, resend_after=resend_after, send_delay=0)
        _connect(client, router)

        def asleep_without_deadline():
            with client._lock:
                return client._io_asleep and client._io_wakes_at is None and not client._in_flight

        wait_for("the I/O thread asleep without a deadline", asleep_without_deadline)
        before, sent_by_caller = time.monotonic(), client.statistics.sent_by_caller
        event_id = client.track("ack-lost")
        wait_for("the calling thread sent it", lambda: client.statistics.sent_by_caller > sent_by_caller)
        with client._lock:
            asleep, wakes_at, alarm_at = client._io_asleep, client._io_wakes_at, client._alarm_at
            sent_at = min(batch.sent_at for batch in client._in_flight.values())
        assert sent_at >= before
        assert not asleep or (wakes_at is not None and wakes_at <= sent_at + resend_after), (asleep, wakes_at)
        if sys.platform.startswith("linux"):
            assert alarm_at == sent_at + resend_after
        first = _receive(router)
        assert _ids(first[2]) == [event_id]
        again = _receive(router)  # not answered: sent again after resend_after
        assert again[1] == first[1] and _ids(again[2]) == [event_id]
        ack_all(router, *again)
        wait_for("its ack", lambda: client.statistics.pending == 0)


def test_partial_batches_wait_while_two_messages_are_in_flight(workdir, make_client):
    """With partial_batches_in_flight=2 and two messages unacked, events that do not fill a
    batch wait, then go out together."""
    with scripted_agent(workdir) as router:
        def receive():
            assert router.poll(10_000)
            peer, header, *frames = router.recv_multipart()
            return peer, wire.decode_header(header).request_id, frames

        client = make_client(source="gather", runtime_dir=workdir, resend_after=600.0, partial_batches_in_flight=2)
        client.enqueue(ferry.Event(name="first"))
        first = receive()
        client.enqueue(ferry.Event(name="second"))
        second = receive()
        later = [client.enqueue(ferry.Event(name="later-%d" % i)) for i in range(8)]
        ack_all(router, *first)
        peer, request_id, frames = receive()
        assert [uuid.UUID(bytes=bytes(f[:16])) for f in frames] == later
        ack_all(router, peer, request_id, frames)
        ack_all(router, *second)
        client.flush(timeout=10)
        assert client.statistics.accepted == 10


def test_batch_max_bytes_splits_messages_by_size(workdir, make_client):
    """At most batch_max_bytes of frames per message: six 1 KiB events go out two by two."""
    with pytest.raises(ValueError):
        ferry.Client(source="bad", runtime_dir=workdir, batch_max_bytes=0)
    # Queued while no agent listens, so all six are in the outbox when the first message forms.
    client = make_client(source="bytes", runtime_dir=workdir, batch_max_bytes=2500, resend_after=600.0)
    ids = [client.enqueue(ferry.Event(name="sized-%d" % i, properties={"pad": "p" * 1000})) for i in range(6)]
    with scripted_agent(workdir) as router:
        seen = []
        while sum(len(frames) for frames in seen) < 6:
            assert router.poll(10_000)
            peer, header, *frames = router.recv_multipart()
            seen.append(frames)
            ack_all(router, peer, wire.decode_header(header).request_id, frames)
        assert [[uuid.UUID(bytes=bytes(f[:16])) for f in frames] for frames in seen] == [ids[0:2], ids[2:4], ids[4:6]]
        client.flush(timeout=10)
        assert client.statistics.accepted == 6


def test_ids_are_uuids_and_sessions_differ_per_client(make_client, workdir):
    a = make_client(source="a", runtime_dir=workdir)
    b = make_client(source="b", runtime_dir=workdir)
    assert isinstance(a.track("x"), uuid.UUID)
    assert a.session != b.session


def test_an_unusable_runtime_directory_is_a_clear_error(workdir):
    too_long = workdir + "/" + "d" * 120  # longer than a Unix socket path may be
    with pytest.raises(ferry.SocketError, match="cannot connect"):
        ferry.Client(source="x", runtime_dir=too_long)
