"""The `jetstream` sink with several events per message, read back with `nats-py` (the NATS
project's Python client) from a real `nats-server -js` and expanded with `ferry.jetstream.events`."""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
from typing import Any, Dict, List, Tuple

import pytest

from ferry.jetstream import MalformedMessage, events


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_events_reads_one_and_several():
    assert events(b'{"id":"a"}') == [{"id": "a"}]
    assert events(b'{"id":"a"}', {"Nats-Msg-Id": "a"}) == [{"id": "a"}]
    assert events(b'{"id":"a"}\n{"id":"b"}', {"Ferry-Events": "2"}) == [{"id": "a"}, {"id": "b"}]
    with pytest.raises(MalformedMessage, match="says 3 events, the body has 2 lines"):
        events(b'{"id":"a"}\n{"id":"b"}', {"Ferry-Events": "3"})
    with pytest.raises(MalformedMessage, match="line 2 is not JSON"):
        events(b'{"id":"a"}\nnope', {"Ferry-Events": "2"})
    with pytest.raises(MalformedMessage, match="not a JSON object"):
        events(b'[1]')


async def read_stream(url: str, stream: str, expected: int) -> Tuple[List[Dict[str, Any]], int]:
    """Every event in `stream`, through a pull consumer, until `expected` events are read, and
    how many messages carried them."""
    import nats

    connection = await nats.connect(url)
    try:
        js = connection.jetstream()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        # The sink creates the stream on its first delivery, which comes after the client's
        # flush (acked means durable in ferryd, not yet delivered: batch.maxWaitMilliseconds).
        while True:
            try:
                await js.stream_info(stream)
                break
            except nats.js.errors.NotFoundError:
                if loop.time() >= deadline:
                    raise
                await asyncio.sleep(0.05)
        subscription = await js.pull_subscribe("ferry.events.>", durable=None, stream=stream)
        result: List[Dict[str, Any]] = []
        messages = 0
        while len(result) < expected and loop.time() < deadline:
            try:
                batch = await subscription.fetch(100, timeout=1)
            except nats.errors.TimeoutError:
                continue
            for message in batch:
                messages += 1
                result.extend(events(message.data, message.headers))
                await message.ack()
        return result, messages
    finally:
        await connection.close()


def test_combined_messages_read_with_nats_py(make_agent, make_client, workdir):
    server = shutil.which("nats-server") or "/usr/sbin/nats-server"
    port = free_port()
    store = os.path.join(workdir, "js")
    log = open(os.path.join(workdir, "nats.log"), "wb")
    nats_server = subprocess.Popen([server, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", store],
                                   stdout=log, stderr=log)
    try:
        url = "nats://127.0.0.1:%d" % port
        agent = make_agent({"sink": {"type": "jetstream", "servers": [url], "eventsPerMessage": 50}}).start()
        agent.wait_ready()
        client = make_client(runtime_dir=agent.runtime_dir, source="py-js")
        sent = [str(client.track("combined", {"i": i})) for i in range(300)]
        client.flush(timeout=30)
        received, messages = asyncio.run(read_stream(url, "FERRY", len(sent)))
        assert messages < len(sent), "several events share a message"
        assert len(received) == len(sent), "the stream holds %d events for %d sent\n%s" % (len(received), len(sent), agent.log())
        ids = [event["id"] for event in received]
        assert sorted(ids) == sorted(sent), "every event once"
        assert len(ids) == len(set(ids))
        assert all(event["source"] == "py-js" and event["name"] == "combined" for event in received)
    finally:
        nats_server.kill()
        nats_server.wait()
        log.close()
