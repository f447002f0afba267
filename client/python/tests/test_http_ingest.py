"""The local Segment-compatible HTTP API (docs/HTTP-INGEST.md), driven by the real libraries.

`segment-analytics-python` and `rudder-sdk-python` (from PyPI, installed by scripts/test-python)
are pointed at ferryd's loopback TCP listener, and raw requests (http.client, sockets, curl) go to
its Unix socket: events arrive in the file sink exactly once, across a kill -9 of the agent and a
full queue; bad input gets a clear status and stores nothing while ZeroMQ clients keep being acked.
"""
from __future__ import annotations

import gzip
import http.client
import json
import os
import pwd
import resource
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

import pytest

from conftest import Agent, wait_for


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def http_agent(make_agent, config: Optional[Dict[str, Any]] = None, name: str = "a") -> Tuple[Agent, int]:
    """A ready agent serving the HTTP API on its Unix socket and on 127.0.0.1:<port>."""
    port = free_port()
    agent = make_agent(config, name=name)
    agent.arguments += ["--http-listen", "127.0.0.1:%d" % port]
    agent.start()
    agent.wait_ready()
    return agent, port


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over the agent's Unix socket (`<runtime dir>/http`)."""

    def __init__(self, path: str, timeout: float = 30.0) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def post(agent: Agent, path: str, body: bytes, headers: Optional[Dict[str, str]] = None) -> Tuple[int, Dict[str, str], Any]:
    """POSTs `body` over the Unix socket; returns status, headers and the JSON body."""
    connection = UnixHTTPConnection(os.path.join(agent.runtime_dir, "http"))
    try:
        connection.request("POST", path, body=body, headers=headers if headers is not None else {"Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read()
        return response.status, dict(response.getheaders()), json.loads(data) if data else None
    finally:
        connection.close()


def ferry_cli(agent: Agent) -> str:
    return os.path.join(os.path.dirname(agent.binary), "ferry")


def track(message_id: str, event: str = "Clicked", **extra: Any) -> Dict[str, Any]:
    message = {"type": "track", "event": event, "userId": "u1", "messageId": message_id, "properties": {"n": 1}}
    message.update(extra)
    return message


def sink_message_ids(agent: Agent) -> Counter:
    return Counter(e["message_id"] for e in agent.delivered() if "message_id" in e)


# A producer process: one library, `count` events with messageIds "<name>-<i>", then flush and
# shut down. Every batch the library got a 2xx for is appended to `acked` (its own `post` wrapped:
# it returns only on success and raises otherwise), so a test knows what was promised durable.
PRODUCER = textwrap.dedent(r"""
    import json, sys, threading, time
    library, host, name, count, acked_path = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    pace = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
    lock = threading.Lock()
    errors = []
    if library == "segment":
        import segment.analytics as analytics
        from segment.analytics import request as request_module, consumer as consumer_module
    else:
        import rudderstack.analytics as analytics
        from rudderstack.analytics import request as request_module, consumer as consumer_module
    original = request_module.post
    def recording_post(*args, **kwargs):
        batch = kwargs.get("batch", [])
        response = original(*args, **kwargs)
        with lock, open(acked_path, "a") as file:
            for message in batch:
                file.write(message["messageId"] + "\n")
        return response
    consumer_module.post = recording_post
    analytics.write_key = "key-" + library
    analytics.host = host
    analytics.on_error = lambda error, batch: errors.append(str(error))
    analytics.max_retries = 20
    if library == "segment":
        analytics.upload_size = 100
    for i in range(count):
        analytics.track("user-%d" % (i % 7), "Produced", {"i": i, "producer": name}, message_id="%s-%d" % (name, i))
        if pace:
            time.sleep(pace)
    analytics.flush()
    analytics.shutdown()
    print(json.dumps({"errors": errors}))
""")


def run_producers(workdir: str, host: str, specs: List[Tuple[str, str, int]], pace: float = 0.0) -> List[subprocess.Popen]:
    script = os.path.join(workdir, "producer.py")
    with open(script, "w") as file:
        file.write(PRODUCER)
    processes = []
    for library, name, count in specs:
        acked = os.path.join(workdir, name + ".acked")
        processes.append(subprocess.Popen([sys.executable, script, library, host, name, str(count), acked, str(pace)],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return processes


def finish(processes: List[subprocess.Popen], timeout: float = 240.0) -> None:
    for process in processes:
        out, err = process.communicate(timeout=timeout)
        assert process.returncode == 0, err[-3000:]
        report = json.loads(out.strip().splitlines()[-1])
        assert report["errors"] == [], report["errors"][:5]


def acked_ids(workdir: str, names: List[str]) -> List[str]:
    ids: List[str] = []
    for name in names:
        path = os.path.join(workdir, name + ".acked")
        if os.path.exists(path):
            with open(path) as file:
                ids += file.read().split()
    return ids


def test_both_libraries_10000_events_from_4_processes_arrive_exactly_once(make_agent, workdir: str) -> None:
    agent, port = http_agent(make_agent)
    specs = [("segment", "s1", 2500), ("segment", "s2", 2500), ("rudder", "r1", 2500), ("rudder", "r2", 2500)]
    finish(run_producers(workdir, "http://127.0.0.1:%d" % port, specs))
    expected = {"%s-%d" % (name, i) for _, name, count in specs for i in range(count)}
    events = agent.wait_delivered(len(expected), timeout=120)
    ids = sink_message_ids(agent)
    assert set(ids) == expected
    assert max(ids.values()) == 1
    sample = next(e for e in events if e.get("message_id") == "r1-5")
    assert sample["type"] == "track" and sample["name"] == "Produced" and sample["user_id"] == "user-5"
    assert sample["properties"]["producer"] == "r1"
    assert sample["origin"]["uid"] == os.getuid()
    assert sample["context"]["library"]["name"]  # the library's context is kept


def test_kill9_mid_flush_loses_no_acked_event_and_stores_none_twice(make_agent, workdir: str) -> None:
    agent, port = http_agent(make_agent)
    specs = [("segment", "s1", 1500), ("rudder", "r1", 1500)]
    processes = run_producers(workdir, "http://127.0.0.1:%d" % port, specs, pace=0.001)
    # Killed once both libraries have had batches acked: in the middle of their flushes.
    wait_for("both libraries to get 2xx answers",
             lambda: all(len(acked_ids(workdir, [name])) >= 200 for _, name, _ in specs), timeout=120)
    before = set(acked_ids(workdir, ["s1", "r1"]))
    agent.kill9()
    assert len(before) < 3000, "the producers finished before the kill: nothing was mid-flush"
    agent.start()
    agent.wait_ready()
    finish(processes)
    acked = acked_ids(workdir, ["s1", "r1"])
    expected = {"%s-%d" % (name, i) for _, name, count in specs for i in range(count)}
    agent.wait_delivered(len(expected), timeout=120)
    ids = sink_message_ids(agent)
    assert before <= set(ids), "events acked before the kill are missing"
    assert set(acked) <= set(ids)
    assert set(ids) == expected
    assert max(ids.values()) == 1, [k for k, v in ids.items() if v > 1][:5]


def test_a_full_queue_makes_the_libraries_retry_not_drop(make_agent, workdir: str) -> None:
    # Delivery waits for `start`: the log fills to its cap and the agent answers 429 (full).
    config = {"consent": {"autoStart": False},
              "log": {"segmentMaxBytes": 16384, "retentionMaxBytes": 65536, "fullPolicy": "reject"}}
    agent, port = http_agent(make_agent, config)
    specs = [("segment", "s1", 600), ("rudder", "r1", 600)]
    processes = run_producers(workdir, "http://127.0.0.1:%d" % port, specs)

    def refused_full() -> bool:
        text = subprocess.run([ferry_cli(agent), "metrics"], env=agent.environment,
                              capture_output=True, text=True).stdout
        return 'ferry_http_requests_total{listener="tcp",status="429"}' in text

    wait_for("the agent to answer 429 full", refused_full, timeout=60)
    import ferry

    ferry.Control(agent.runtime_dir).start()
    finish(processes)
    expected = {"%s-%d" % (name, i) for _, name, count in specs for i in range(count)}
    agent.wait_delivered(len(expected), timeout=120)
    ids = sink_message_ids(agent)
    assert set(ids) == expected
    assert max(ids.values()) == 1


def test_curl_on_the_unix_socket_and_a_batch_retried_in_another_mix(agent: Agent) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("needs curl")
    socket_path = os.path.join(agent.runtime_dir, "http")
    body = json.dumps({"batch": [track("c-1"), track("c-2")]})
    out = subprocess.run([curl, "-s", "-w", "\n%{http_code}", "--unix-socket", socket_path, "-H", "Content-Type: application/json",
                          "-d", body, "http://localhost/v1/batch"], capture_output=True, text=True, check=True).stdout
    text, code = out.rsplit("\n", 1)
    assert code == "200"
    assert json.loads(text)["accepted"] == 2
    # A retry that re-batches: one old, one new.
    status, _, answer = post(agent, "/v1/batch", json.dumps({"batch": [track("c-2"), track("c-3")]}).encode())
    assert status == 200 and [r["status"] for r in answer["results"]] == ["duplicate", "accepted"]
    # /v1/identify with a long, non-UUID messageId.
    long_id = "order:" + "x" * 90
    status, _, answer = post(agent, "/v1/identify", json.dumps({"userId": "u1", "traits": {"plan": "pro"}, "messageId": long_id}).encode())
    assert status == 200, answer
    events = agent.wait_delivered(4)
    assert Counter(e.get("message_id") for e in events) == Counter({"c-1": 1, "c-2": 1, "c-3": 1, long_id: 1})
    curl_event = next(e for e in events if e["message_id"] == "c-1")
    assert curl_event["origin"]["comm"] == "curl" and curl_event["origin"]["uid"] == os.getuid()


def test_a_refused_message_does_not_drop_the_good_ones(agent: Agent) -> None:
    big = track("big", properties={"p": "x" * (40 << 10)})
    status, _, answer = post(agent, "/v1/batch", json.dumps({"batch": [track("good-1"), {"type": "track", "userId": "u"}, big, track("good-2")]}).encode())
    assert status == 200
    assert [r["status"] for r in answer["results"]] == ["accepted", "refused", "refused", "accepted"]
    assert answer["results"][2]["code"] == "too_large"
    agent.wait_delivered(2)
    assert sink_message_ids(agent) == Counter({"good-1": 1, "good-2": 1})
    # Every message refused: 400 with {"code","message"}.
    status, _, answer = post(agent, "/v1/batch", json.dumps({"batch": [{"type": "nope"}]}).encode())
    assert status == 400 and answer["code"] == "invalid_message" and "unknown type" in answer["message"]


def test_a_message_nested_too_deep_is_refused_alone(agent: Agent) -> None:
    deep: Any = 1
    for _ in range(100):
        deep = {"a": deep}
    status, _, answer = post(agent, "/v1/batch", json.dumps({"batch": [track("deep-good-1"), track("deep", properties=deep),
                                                                          track("deep-good-2")]}).encode())
    assert status == 200, answer
    assert [r["status"] for r in answer["results"]] == ["accepted", "refused", "accepted"]
    assert answer["results"][1]["messageId"] == "deep" and answer["results"][1]["code"] == "invalid_json"
    agent.wait_delivered(2)
    assert sink_message_ids(agent) == Counter({"deep-good-1": 1, "deep-good-2": 1})


RUDDER_IDENTIFY = textwrap.dedent(r"""
    import sys
    import rudderstack.analytics as analytics
    analytics.write_key = "key-rudder"
    analytics.host = sys.argv[1]
    analytics.identify("user-7", {"plan": "pro", "seats": 3}, message_id="rudder-identify-1")
    analytics.flush()
    analytics.shutdown()
""")


def test_rudder_identify_traits_become_properties(make_agent) -> None:
    agent, port = http_agent(make_agent)
    subprocess.run([sys.executable, "-c", RUDDER_IDENTIFY, "http://127.0.0.1:%d" % port], check=True, timeout=120)
    [event] = agent.wait_delivered(1)
    assert event["message_id"] == "rudder-identify-1" and event["type"] == "identify"
    # rudder-sdk-python sends them in context.traits only: taken as RudderStack's data plane does.
    assert event["properties"] == {"plan": "pro", "seats": 3}
    assert event["context"]["traits"] == {"plan": "pro", "seats": 3}


def raw_tcp_post(port: int, headers: Dict[str, str], message_id: str) -> Tuple[int, Any]:
    """POSTs one track to the TCP listener with exactly `headers` (http.client adds no Host)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.putrequest("POST", "/v1/track", skip_host=True, skip_accept_encoding=True)
        body = json.dumps(track(message_id)).encode()
        for name, value in dict({"Content-Type": "application/json", "Content-Length": str(len(body))}, **headers).items():
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def test_dns_rebinding_other_hosts_and_origins_are_refused(make_agent) -> None:
    agent, port = http_agent(make_agent, {"http": {"allowedHosts": ["ferry.internal"], "allowedOrigins": ["http://app.local:3000"]}})
    # What a page that rebound its own name to 127.0.0.1 sends: its Host, its Origin.
    status, answer = raw_tcp_post(port, {"Host": "evil.example"}, "r-1")
    assert (status, answer["code"]) == (421, "host_not_allowed") and answer["message"]
    assert raw_tcp_post(port, {"Host": "evil.example:%d" % port, "Origin": "http://evil.example:%d" % port}, "r-2")[0] == 421
    status, answer = raw_tcp_post(port, {"Host": "127.0.0.1:%d" % port, "Origin": "http://evil.example"}, "r-3")
    assert (status, answer["code"]) == (403, "origin_not_allowed")
    # The listener's own names, the listed name and origin, and no Host at all are served.
    for message_id, headers in [("ok-1", {"Host": "127.0.0.1:%d" % port}), ("ok-2", {"Host": "localhost"}),
                                ("ok-3", {"Host": "ferry.internal:%d" % port}),
                                ("ok-4", {"Host": "localhost:%d" % port, "Origin": "http://app.local:3000"}), ("ok-5", {})]:
        status, answer = raw_tcp_post(port, headers, message_id)
        assert status == 200, (message_id, answer)
    # The Unix socket serves any Host but checks Origin.
    body = json.dumps(track("ok-unix")).encode()
    assert post(agent, "/v1/track", body, {"Content-Type": "application/json", "Host": "evil.example"})[0] == 200
    status, _, answer = post(agent, "/v1/track", json.dumps(track("r-unix")).encode(),
                             {"Content-Type": "application/json", "Origin": "http://evil.example"})
    assert (status, answer["code"]) == (403, "origin_not_allowed")
    agent.wait_delivered(6)
    assert sink_message_ids(agent) == Counter({"ok-1": 1, "ok-2": 1, "ok-3": 1, "ok-4": 1, "ok-5": 1, "ok-unix": 1})


def gzip_bomb() -> bytes:
    out = gzip.compress(b"", 9)
    chunk = b"\0" * (1 << 20)
    import zlib
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [compressor.compress(chunk) for _ in range(64)]
    return b"".join(parts) + compressor.flush()


BAD_INPUTS = [
    ("malformed JSON", "/v1/batch", b'{"batch": [', {"Content-Type": "application/json"}, 400, "invalid_json"),
    ("10 MB body", "/v1/batch", b"[" + b" " * (10 << 20) + b"]", {"Content-Type": "application/json"}, 413, "too_large"),
    ("gzip bomb", "/v1/batch", None, {"Content-Type": "application/json", "Content-Encoding": "gzip"}, 413, "too_large"),
    ("non-UTF-8", "/v1/track", b'{"event":"\xff\xfe","userId":"u"}', {"Content-Type": "application/json"}, 400, "invalid_utf8"),
    ("text/plain", "/v1/track", b'{"event":"e","userId":"u"}', {"Content-Type": "text/plain"}, 415, "unsupported_media_type"),
    ("form", "/v1/track", b"event=e", {"Content-Type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"),
    ("no content type", "/v1/track", b'{"event":"e","userId":"u"}', {}, 415, "unsupported_media_type"),
    ("unknown path", "/v2/track", b"{}", {"Content-Type": "application/json"}, 404, "not_found"),
    ("not an object", "/v1/track", b"[1,2]", {"Content-Type": "application/json"}, 400, "invalid_request"),
    ("corrupt gzip", "/v1/batch", b"\x1f\x8b garbage", {"Content-Type": "application/json", "Content-Encoding": "gzip"}, 400, "invalid_gzip"),
]


def test_bad_input_gets_a_clear_status_stores_nothing_and_zeromq_clients_keep_being_acked(agent: Agent, make_client) -> None:
    client = make_client(source="zmq-app", runtime_dir=agent.runtime_dir)
    sent = 0
    for name, path, body, headers, status, code in BAD_INPUTS:
        got, response_headers, answer = post(agent, path, body if body is not None else gzip_bomb(), headers)
        assert (got, answer["code"]) == (status, code), name
        assert answer["message"], name
        client.track("During Abuse", {"case": name})
        sent += 1
    client.flush(timeout=30)
    events = agent.wait_delivered(sent, source="zmq-app")
    assert len(events) == sent
    assert [e for e in agent.delivered() if e.get("source") == "http"] == []
    metrics = subprocess.run([ferry_cli(agent), "metrics"], env=agent.environment,
                             capture_output=True, text=True).stdout
    assert 'ferry_http_requests_total{listener="unix",status="415"} 3' in metrics


def test_slow_loris_gets_408_and_idle_connections_are_bounded(make_agent, make_client) -> None:
    agent, port = http_agent(make_agent, {"http": {"maxConnections": 64}})
    client = make_client(source="zmq-app", runtime_dir=agent.runtime_dir)
    # Slow-loris: a head that never ends.
    slow = socket.create_connection(("127.0.0.1", port))
    slow.sendall(b"POST /v1/track HTTP/1.1\r\nHost: x\r\n")
    slow.settimeout(20)
    started = time.monotonic()
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
        chunk = slow.recv(4096)
        if not chunk:
            break
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert 8 <= time.monotonic() - started <= 20
    slow.close()
    # 1000 idle connections: 64 are held, the rest answered 503 and closed; ZeroMQ unaffected.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip("needs 1200 file descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    idle = []
    refused = 0
    try:
        for _ in range(1000):
            connection = socket.create_connection(("127.0.0.1", port))
            idle.append(connection)
        client.track("Beside Idle Connections")
        client.flush(timeout=30)
        for connection in idle:
            connection.settimeout(0.05)
            try:
                data = connection.recv(4096)
            except socket.timeout:
                continue
            if data.startswith(b"HTTP/1.1 503"):
                refused += 1
        assert refused >= 900
        agent.wait_delivered(1, source="zmq-app")
    finally:
        for connection in idle:
            connection.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (throwaway users with useradd/runuser)")
    if shutil.which("useradd") is None or shutil.which("runuser") is None or shutil.which("curl") is None:
        pytest.skip("needs useradd, runuser and curl")


@pytest.fixture
def throwaway_users():
    """Two throwaway users, deleted at the end (root only)."""
    needs_root()
    names = ["fhttp%d%d" % (os.getpid() % 10000, i) for i in range(2)]
    for name in names:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    yield names
    for name in names:
        subprocess.run(["userdel", name], check=False)


def test_the_tcp_peer_uid_comes_from_the_kernel_and_the_policy_is_checked(make_agent, throwaway_users) -> None:
    allowed, refused = throwaway_users
    agent, port = http_agent(make_agent, {"access": {"ingest": {"users": [allowed]}}})
    url = "http://127.0.0.1:%d/v1/track" % port

    def curl_as(user: str, message_id: str) -> Tuple[int, Dict[str, Any]]:
        body = json.dumps({"event": "Hello", "userId": "u", "messageId": message_id})
        out = subprocess.run(["runuser", "-u", user, "--", "curl", "-s", "-w", "\n%{http_code}", "-H", "Content-Type: application/json",
                              "-H", "X-Ferry-Uid: 0", "-d", body, url], capture_output=True, text=True, check=True).stdout
        text, code = out.rsplit("\n", 1)
        return int(code), json.loads(text)

    status, answer = curl_as(refused, "r-1")
    assert status == 403 and answer["code"] == "access_denied"
    assert 'access.ingest' in answer["message"] and "uid %d" % pwd.getpwnam(refused).pw_uid in answer["message"]
    status, answer = curl_as(allowed, "a-1")
    assert status == 200, answer
    event = agent.wait_delivered(1)[0]
    assert event["origin"]["uid"] == pwd.getpwnam(allowed).pw_uid
    assert event["message_id"] == "a-1"


def test_the_unix_socket_of_a_system_agent_checks_each_users_credentials(make_agent, workdir: str, throwaway_users) -> None:
    allowed, refused = throwaway_users
    os.chmod(workdir, 0o755)  # the users must reach the system agent's runtime directory
    config = {"mode": "system", "access": {"ingest": {"users": [allowed]}, "events": {"users": ["*"]}}}
    agent = make_agent(config).start()
    agent.wait_ready()
    socket_path = os.path.join(agent.runtime_dir, "http")
    assert os.stat(socket_path).st_mode & 0o777 == 0o666

    def curl_as(user: str, message_id: str) -> Tuple[int, Dict[str, Any]]:
        body = json.dumps({"event": "Hello", "userId": "u", "messageId": message_id})
        out = subprocess.run(["runuser", "-u", user, "--", "curl", "-s", "-w", "\n%{http_code}", "--unix-socket", socket_path,
                              "-H", "Content-Type: application/json", "-d", body, "http://localhost/v1/track"],
                             capture_output=True, text=True, check=True).stdout
        text, code = out.rsplit("\n", 1)
        return int(code), json.loads(text)

    status, answer = curl_as(refused, "r-1")
    assert status == 403 and answer["code"] == "access_denied"
    assert '"access.ingest" policy allows users %s' % allowed in answer["message"]
    status, answer = curl_as(allowed, "a-1")
    assert status == 200, answer
    event = agent.wait_delivered(1)[0]
    assert event["origin"]["uid"] == pwd.getpwnam(allowed).pw_uid and event["origin"]["comm"] == "curl"
    assert [e["message_id"] for e in agent.delivered()] == ["a-1"]
