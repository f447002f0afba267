"""The agent's metrics read by the official Prometheus client's parser (`prometheus-client`):
`ferry metrics` (the control socket's `metrics` reply, and the `ferry` CLI when it sits beside
ferryd) and `GET /metrics`, each a family per metric with its type and help text."""
from __future__ import annotations

import os
import socket
import subprocess
import urllib.request
from typing import Dict, List, Tuple

import ferry
from prometheus_client.parser import text_string_to_metric_families

# Each metric's OpenMetrics family name (a counter's without `_total`) and its type.
EXPECTED = {
    "ferry_events_accepted": "counter",
    "ferry_events_duplicate": "counter",
    "ferry_events_rejected": "counter",
    "ferry_events_blocked": "counter",
    "ferry_events_suppressed": "counter",
    "ferry_events_held": "counter",
    "ferry_events_quarantined": "counter",
    "ferry_plan_violations": "counter",
    "ferry_events_redacted": "counter",
    "ferry_quarantined_events": "gauge",
    "ferry_events_dropped": "counter",
    "ferry_messages_refused": "counter",
    "ferry_messages_denied": "counter",
    "ferry_client_events_lost": "counter",
    "ferry_held_events": "gauge",
    "ferry_queue_events": "gauge",
    "ferry_queue_bytes": "gauge",
    "ferry_queue_oldest_age_seconds": "gauge",
    "ferry_clients_connected": "gauge",
    "ferry_ack_latency_seconds": "histogram",
    "ferry_commit_events": "histogram",
    "ferry_fsync_seconds": "histogram",
    "ferry_http_requests": "counter",
    "ferry_http_events": "counter",
    "ferry_http_connections": "gauge",
    "ferry_sink_delivered": "counter",
    "ferry_sink_failures": "counter",
    "ferry_sink_retried": "counter",
    "ferry_sink_dead_lettered": "counter",
    "ferry_sink_skipped": "counter",
    "ferry_sink_backlog_events": "gauge",
    "ferry_sink_circuit_open": "gauge",
    "ferry_delivery_latency_seconds": "histogram",
    "ferry_erasures_pending": "gauge",
    "ferry_erasure_requests": "counter",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def families(text: str) -> List[Tuple[str, str, str]]:
    return [(family.name, family.type, family.documentation) for family in text_string_to_metric_families(text)]


def test_prometheus_client_reads_both_expositions(make_agent, ferryd):
    port = free_port()
    agent = make_agent({"metrics": {"listen": "127.0.0.1:%d" % port}}).start()
    agent.wait_ready()
    with ferry.Client(source="metrics-py", runtime_dir=agent.runtime_dir) as client:
        for index in range(5):
            client.track("Metric %d" % index)
        client.flush(timeout=30)

    texts: Dict[str, str] = {"metrics reply": ferry.Control(agent.runtime_dir, timeout=30).metrics()}
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        texts["GET /metrics"] = response.read().decode("utf-8")
    cli = os.path.join(os.path.dirname(ferryd), "ferry")
    if os.access(cli, os.X_OK):
        texts["ferry metrics"] = subprocess.run([cli, "metrics"], env=agent.environment, check=True,
                                                capture_output=True, text=True, timeout=60).stdout

    for origin, text in texts.items():
        parsed = families(text)
        by_name: Dict[str, List[str]] = {}
        for name, kind, documentation in parsed:
            by_name.setdefault(name, []).append(kind)
            assert documentation, "%s: %s has no help text" % (origin, name)
        for name, kind in EXPECTED.items():
            assert kind in by_name.get(name, []), "%s: %s is %s, not %s" % (origin, name, by_name.get(name), kind)
        # One family per name: the deprecated gauge `ferry_events_held`, which the parser read as a
        # second family named like the held counter's, is gone (docs/METRICS.md).
        for name, kinds in by_name.items():
            assert kinds == [EXPECTED[name]], "%s: %s read as %s" % (origin, name, kinds)
        samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
                   for family in text_string_to_metric_families(text) for sample in family.samples}
        assert samples[("ferry_events_accepted_total", ())] == 5, origin
        assert samples[("ferry_client_events_lost_total", (("source", ""),))] == 0, origin
        assert samples[("ferry_held_events", ())] == 0, origin
        assert ("ferry_events_held", ()) not in samples, origin
