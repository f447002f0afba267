"""Consent per sink (docs/DELIVERY.md, "Routes and consent per sink") fed by Segment's own Python
library, `segment-analytics-python`, through ferryd's local HTTP API: events carry the user's
choices as `context.consent.categoryPreferences`; the advertising partner's sink
(`requiresConsent: ["advertising"]`) skips the one whose preferences say `advertising: false`,
counted as `ferry_sink_skipped_total{sink="ads",reason="category_preferences"}`, while the
archive (the file sink) gets every event.
"""
from __future__ import annotations

import subprocess

import segment.analytics as segment_analytics
from prometheus_client.parser import text_string_to_metric_families

from conftest import wait_for
from test_http_ingest import ferry_cli, http_agent
from test_segment_side_by_side import Collector


def test_segment_library_preferences_skip_the_advertising_sink_only(make_agent) -> None:
    partner = Collector()
    try:
        agent, port = http_agent(make_agent, {
            "sinks": [
                {"name": "archive", "type": "file", "batch": {"maxWaitMilliseconds": 20}},
                {"name": "ads", "type": "http", "url": partner.url + "/v1/events", "requiresConsent": ["advertising"],
                 "batch": {"maxWaitMilliseconds": 20}},
            ]})
        for category in ("analytics", "advertising"):
            granted = subprocess.run([ferry_cli(agent), "consent", "set", category, "granted"], env=agent.environment,
                                     capture_output=True, text=True, timeout=30)
            assert granted.returncode == 0, granted.stderr

        analytics = segment_analytics.Client(write_key="key-consent", host="http://127.0.0.1:%d" % port, sync_mode=True,
                                             max_retries=0)
        analytics.track(user_id="u-42", event="Order Completed", properties={"total": 30}, message_id="m-order",
                        context={"consent": {"categoryPreferences": {"analytics": True, "advertising": True}}})
        analytics.track(user_id="u-42", event="Newsletter Opened", properties={}, message_id="m-news",
                        context={"consent": {"categoryPreferences": {"advertising": False}}})
        analytics.track(user_id="u-42", event="Page Scrolled", properties={}, message_id="m-plain")

        # The archive has all three, once each.
        archived = wait_for("the three events in the archive", lambda: (lambda ids: ids if {"m-order", "m-news", "m-plain"} <= set(ids) else None)(
            [event.get("message_id") for event in agent.delivered()]))
        assert sorted(i for i in archived if i is not None and i.startswith("m-")) == ["m-news", "m-order", "m-plain"], archived

        def ads_names():
            with partner.lock:
                bodies = [body for _, body in partner.requests]
            return [event.get("name") for body in bodies for event in body.get("events", [])]

        # The partner: the two the user's preferences allow; the newsletter skipped and counted.
        wait_for("the partner's two events", lambda: ads_names() if {"Order Completed", "Page Scrolled"} <= set(ads_names()) else None)

        def skipped():
            text = subprocess.run([ferry_cli(agent), "metrics"], env=agent.environment, capture_output=True, text=True,
                                  timeout=30).stdout
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name == "ferry_sink_skipped_total" and sample.labels == {"sink": "ads", "reason": "category_preferences"}:
                        return sample.value
            return None

        assert wait_for("the newsletter's skip counted", lambda: skipped() if skipped() == 1 else None) == 1
        assert "Newsletter Opened" not in ads_names()
        assert sorted(n for n in ads_names() if n != "consent_updated") == ["Order Completed", "Page Scrolled"]
    finally:
        partner.close()
