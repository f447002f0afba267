"""Side by side with Segment's own library: the same track/identify/page/screen/group/alias calls
sent through `segment-analytics-python` (PyPI) and through Ferry (the Python client, ferryd, its
`segment` HTTP sink) to one collector; each message's field names and value types are compared.

The differences that remain are the ones docs/HTTP-SINK.md lists ("Side by side with Segment's
library"), each with why; this test fails when another appears or a listed one goes away, and when
the document stops naming one.
"""
from __future__ import annotations

import base64
import copy
import gzip
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, List, Set, Tuple

import ferry
import pytest
from conftest import REPO, wait_for

import segment.analytics as segment_analytics

WRITE_KEY = "wk_side_by_side"
CONTEXT = {"locale": "de-DE", "app": {"name": "shop", "version": "1.2"}}


def context() -> Dict[str, Any]:
    """A fresh copy of CONTEXT for each call (Segment's library adds `library` to the one it gets)."""
    return copy.deepcopy(CONTEXT)

# Where each message differs, as (path, what Segment's library sends, what Ferry sends); a type
# name, or None where the field is absent. docs/HTTP-SINK.md explains each.
COMMON = {
    ("integrations", "object", None),
    ("context.library", "object", None),
    ("context.library.name", "string", None),
    ("context.library.version", "string", None),
    ("context.ferry", None, "object"),
    ("context.ferry.source", None, "string"),
    ("context.ferry.accepted_at", None, "number"),
}
EXPECTED = {
    "track": COMMON | {("anonymousId", "null", None)},
    "identify": COMMON | {("anonymousId", "null", None)},
    "page": COMMON | {("anonymousId", "null", None), ("category", "null", None)},
    "screen": COMMON | {("anonymousId", "null", None), ("category", "null", None)},
    "group": COMMON | {("anonymousId", "null", None)},
    "alias": COMMON | {("anonymousId", "null", None)},
}
# The request bodies around the messages.
EXPECTED_BODY = {("writeKey", "string", None), ("context", None, "object"), ("context.consent", None, "object")}


class Collector:
    """A `/v1/batch` endpoint on 127.0.0.1 that answers 200 and keeps every request."""

    def __init__(self) -> None:
        self.requests: List[Tuple[Dict[str, str], Dict[str, Any]]] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                with collector.lock:
                    collector.requests.append(({k.lower(): v for k, v in self.headers.items()}, json.loads(body)))
                answer = b'{"success":true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def bodies(self, user_agent: str) -> List[Dict[str, Any]]:
        with self.lock:
            return [body for headers, body in self.requests if headers.get("user-agent", "").startswith(user_agent)]

    def messages(self, user_agent: str) -> List[Dict[str, Any]]:
        return [message for body in self.bodies(user_agent) for message in body["batch"]]

    def authorizations(self) -> Set[str]:
        with self.lock:
            return {headers.get("authorization", "") for headers, _ in self.requests}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def shape(value: Dict[str, Any], prefix: str = "") -> Dict[str, str]:
    """Every key path of `value` (objects followed, arrays not) with its JSON type."""
    paths: Dict[str, str] = {}
    for key, item in value.items():
        path = prefix + key
        paths[path] = type_name(item)
        if isinstance(item, dict):
            paths.update(shape(item, path + "."))
    return paths


def differences(segment: Dict[str, Any], ferry_message: Dict[str, Any]) -> Set[Tuple[str, Any, Any]]:
    a, b = shape(segment), shape(ferry_message)
    return {(path, a.get(path), b.get(path)) for path in set(a) | set(b) if a.get(path) != b.get(path)}


@pytest.fixture
def collector():
    collector = Collector()
    yield collector
    collector.close()


def test_same_calls_same_fields_and_types(make_agent, collector, workdir):
    # Segment's library, synchronous: one request per call, straight to the collector.
    analytics = segment_analytics.Client(write_key=WRITE_KEY, host=collector.url, sync_mode=True, max_retries=0)
    analytics.track(user_id="u1", event="Signed Up", properties={"plan": "pro", "seats": 3}, context=context())
    analytics.identify(user_id="u1", traits={"email": "a@example.com", "age": 41}, context=context())
    analytics.page(user_id="u1", name="Pricing", properties={"path": "/pricing"}, context=context())
    analytics.screen(user_id="u1", name="Home", properties={"tab": "feed"}, context=context())
    analytics.group(user_id="u1", group_id="g-1", traits={"plan": "team"}, context=context())
    analytics.alias(previous_id="anon-1", user_id="u1", context=context())
    reference = {message["type"]: message for message in collector.messages("analytics-python/")}
    assert set(reference) == {"track", "identify", "page", "screen", "group", "alias"}

    # Ferry: the Python client to ferryd, whose segment sink posts to the same collector.
    key_file = os.path.join(workdir, "segment.key")
    with open(key_file, "w") as file:
        file.write(WRITE_KEY + "\n")
    os.chmod(key_file, 0o600)
    agent = make_agent({"sink": {"type": "http", "url": collector.url + "/v1/batch", "format": "segment",
                                 "writeKeyFile": key_file}}).start()
    agent.wait_ready()
    with ferry.Client("side-by-side", runtime_dir=agent.runtime_dir) as client:
        client.track("Signed Up", {"plan": "pro", "seats": 3}, user_id="u1", context=context())
        client.identify("u1", {"email": "a@example.com", "age": 41}, context=context())
        client.page("Pricing", {"path": "/pricing"}, user_id="u1", context=context())
        client.screen("Home", {"tab": "feed"}, user_id="u1", context=context())
        client.group("g-1", {"plan": "team"}, user_id="u1", context=context())
        client.alias("u1", "anon-1", context=context())
    sent = wait_for("Ferry's six messages at the collector",
                    lambda: (lambda m: m if len(m) >= 6 else None)(collector.messages("ferryd/")))
    ours = {message["type"]: message for message in sent}
    assert set(ours) == set(reference)

    # Both authenticate with the write key as HTTP Basic, the key as the user name.
    assert collector.authorizations() == {"Basic " + base64.b64encode((WRITE_KEY + ":").encode()).decode()}
    found = {kind: differences(reference[kind], ours[kind]) for kind in reference}
    assert found == EXPECTED, json.dumps({kind: sorted(map(str, found[kind] ^ EXPECTED[kind])) for kind in found}, indent=1)
    # The values the app gave are the same on both sides.
    for kind in reference:
        for key in ("event", "name", "userId", "groupId", "previousId", "properties", "traits"):
            assert ours[kind].get(key) == reference[kind].get(key), (kind, key)
        assert ours[kind]["context"]["locale"] == "de-DE" and ours[kind]["context"]["app"] == CONTEXT["app"]
        # Segment's timestamp form: ISO 8601 with milliseconds (Ferry in UTC with Z, the library with +00:00).
        assert len(ours[kind]["timestamp"]) == len("2024-05-01T12:00:00.000Z")

    # The bodies around the messages (the consent stamp's own keys are docs/PROTOCOL.md's).
    reference_body = collector.bodies("analytics-python/")[0]
    our_body = collector.bodies("ferryd/")[0]
    assert isinstance(our_body["sentAt"], str) and isinstance(reference_body["sentAt"], str)
    body_found = {difference for difference in differences({k: v for k, v in reference_body.items() if k != "batch"},
                                                            {k: v for k, v in our_body.items() if k != "batch"})
                  if not difference[0].startswith("context.consent.")}
    assert body_found == EXPECTED_BODY

    # docs/HTTP-SINK.md lists every difference.
    text = (Path(REPO) / "docs" / "HTTP-SINK.md").read_text()
    section = text[text.index("### Side by side with Segment's library"):]
    section = section[:section.index("\n## ")]
    for path, _, _ in set().union(*EXPECTED.values(), EXPECTED_BODY):
        assert "`%s`" % path in section, "docs/HTTP-SINK.md does not name %s" % path
