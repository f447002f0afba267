"""fork() safety: a child gets a fresh connection and session, never the parent's socket."""
from __future__ import annotations

import json
import os
import warnings

import ferry


def test_a_forked_child_sends_on_its_own_connection(agent, make_client):
    client = make_client(source="forky", runtime_dir=agent.runtime_dir)
    for _ in range(10):
        client.track("Parent Before")
    parent_session = client.session
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() of a process with threads
        pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's test teardown
        code = 1
        try:
            os.close(read_end)
            before = client.statistics
            for _ in range(10):
                client.track("Child")
            client.flush(timeout=30)
            report = {"session": str(client.session), "pending_at_fork": before.pending,
                      "enqueued_at_fork": before.enqueued, "accepted": client.statistics.accepted}
            os.write(write_end, json.dumps(report).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    for _ in range(10):
        client.track("Parent After")
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read_end, "rb") as pipe:
        report = json.loads(pipe.read() or b"{}")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, report
    assert report["enqueued_at_fork"] == 0 and report["pending_at_fork"] == 0  # the parent's events stay its own
    assert report["accepted"] == 10
    assert report["session"] != str(parent_session)

    client.flush(timeout=30)
    assert client.statistics.accepted == 20 and client.session == parent_session
    events = agent.wait_delivered(30, source="forky")
    parent = [e for e in events if e["pid"] == os.getpid()]
    child = [e for e in events if e["pid"] == pid]
    assert sorted(e["seq"] for e in parent) == list(range(1, 21))
    assert sorted(e["seq"] for e in child) == list(range(1, 11))
    assert {e["session"] for e in parent} == {str(parent_session)}
    assert {e["session"] for e in child} == {report["session"]}
    # The agent reads the sender from the connection's kernel credentials: the child's events came
    # over a connection the child made, not over the parent's socket.
    assert {e["origin"]["pid"] for e in child} == {pid}
    assert {e["origin"]["pid"] for e in parent} == {os.getpid()}


def test_a_child_that_never_uses_the_client_leaves_the_parent_alone(agent, make_client):
    client = make_client(source="idle-child", runtime_dir=agent.runtime_dir)
    client.track("Before")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            client.close()  # closing the child's copy must not close the parent's connection
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    client.track("After")
    client.flush(timeout=30)
    assert client.statistics.accepted == 2
    assert len(agent.wait_delivered(2, source="idle-child")) == 2
    assert isinstance(client, ferry.Client) and not client.closed
