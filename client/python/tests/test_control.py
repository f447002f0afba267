"""ferry.Control against a real ferryd: consent state and every change, erasure, start, status."""
from __future__ import annotations

import time

import pytest

import ferry

from conftest import wait_for


def control_for(agent, **kwargs):
    return ferry.Control(agent.runtime_dir, timeout=30, **kwargs)


def test_consent_state(agent):
    state = control_for(agent).consent_state()
    assert isinstance(state, ferry.ConsentState)
    assert {"analytics", "advertising", "personalization", "diagnostics", "push"} <= set(state.categories)
    assert state.consent["analytics"] == "granted" and state.tracking_enabled and state.network_tracking
    assert state.gdpr == ferry.GDPR() and state.delivery_started and not state.is_no_op
    assert state.raw["anonymous_id"] == state.anonymous_id


def test_per_category_consent_blocks_and_allows(agent, make_client):
    control = control_for(agent, actor="pytest")
    client = make_client(source="consent", runtime_dir=agent.runtime_dir)
    update = control.set_consent("advertising", "denied")
    assert update.consent.consent["advertising"] == "denied" and update.consent.consent["analytics"] == "granted"
    ad = client.send(ferry.Event(name="Ad Shown", category="advertising"), timeout=30)
    assert (ad.status, ad.reason) == (ferry.Status.BLOCKED, "consent_denied")
    assert client.send(ferry.Event(name="Page"), timeout=30).status is ferry.Status.ACCEPTED
    control.set_consent("advertising", "granted")
    assert client.send(ferry.Event(name="Ad Shown", category=2), timeout=30).status is ferry.Status.ACCEPTED
    assert client.statistics.blocked == 1

    log = control.consent_log()
    assert log.verified and log.problem is None
    assert [e.actor for e in log.entries[-2:]] == ["pytest", "pytest"]
    assert log.entries[-1].seq > log.entries[-2].seq and log.entries[-1].prev == log.entries[-2].hash
    assert len(control.consent_log(limit=1).entries) == 1


def test_refusals_name_the_valid_values(agent):
    control = control_for(agent)
    with pytest.raises(ferry.Refused) as refused:
        control.set_consent("analytcs", "granted")
    assert "analytics" in refused.value.valid and "analytcs" in refused.value.message
    with pytest.raises(ferry.Refused) as refused:
        control.set_consent("analytics", "maybe")
    assert set(refused.value.valid) == {"undetermined", "granted", "denied"}
    with pytest.raises(ferry.Refused) as refused:
        control.set_gdpr({"data_use": "granted"})
    assert "data_usage" in refused.value.valid
    with pytest.raises(ferry.Refused):
        control.request("no_such_op")
    with pytest.raises(ValueError):
        control.forget("")
    with pytest.raises(TypeError):
        control.set_tracking("off")


def test_tracking_toggle(agent, make_client):
    control = control_for(agent)
    client = make_client(source="toggle", runtime_dir=agent.runtime_dir)
    assert control.set_tracking(False).tracking_enabled is False
    off = client.send(ferry.Event(name="While Off"), timeout=30)
    assert (off.status, off.reason) == (ferry.Status.BLOCKED, "tracking_disabled")
    assert control.set_tracking(True).tracking_enabled is True
    assert client.send(ferry.Event(name="While On"), timeout=30).status is ferry.Status.ACCEPTED


def test_persistence_gdpr_and_features(agent, make_client):
    control = control_for(agent)
    assert control.set_persistence("denied").persistence == "denied"

    update = control.set_gdpr(subject_to_gdpr="granted", data_usage="granted", ad_storage="denied")
    assert update.consent.gdpr == ferry.GDPR("granted", "granted", "unset", "denied")
    assert control.set_gdpr({"ads_personalization": "granted"}).consent.gdpr.ads_personalization == "granted"

    update = control.disable_features(["advertising"])
    assert "advertising" not in update.consent.enabled_features
    client = make_client(source="features", runtime_dir=agent.runtime_dir)
    ad = client.send(ferry.Event(name="Ad", category="advertising"), timeout=30)
    assert (ad.status, ad.reason) == (ferry.Status.BLOCKED, "feature_disabled")
    assert control.disable_features("all").consent.is_no_op
    nothing = client.send(ferry.Event(name="Nothing"), timeout=30)
    assert (nothing.status, nothing.reason) == (ferry.Status.BLOCKED, "no_op")
    state = control.enable_features("all")
    assert set(state.enabled_features) == set(state.categories)
    assert client.send(ferry.Event(name="Back"), timeout=30).status is ferry.Status.ACCEPTED


def test_purge_forget_and_start_on_an_agent_waiting_to_deliver(make_agent, make_client):
    agent = make_agent(config={"consent": {"autoStart": False}}).start()
    agent.wait_ready()
    control = control_for(agent)
    assert control.consent_state().delivery_started is False
    client = make_client(source="erase", runtime_dir=agent.runtime_dir)
    for i in range(5):
        client.track("Mine", user_id="u-1")
    for i in range(3):
        client.track("Theirs", user_id="u-2")
    for i in range(4):
        client.track("Ads", category="advertising")
    client.flush(timeout=30)
    assert client.statistics.accepted == 12

    assert control.forget("u-1") == ferry.PurgeReport(queued=5, held=0)
    assert control.purge("advertising").queued == 4

    state = control.start()
    assert state.delivery_started is True
    events = agent.wait_delivered(3, source="erase")
    # Nothing else arrives: once the queue is drained the sink holds only u-2's events.
    wait_for("the queue to drain", lambda: control.status()["queue"]["events"] == 0)
    assert sorted(e.get("user_id") for e in agent.delivered()) == ["u-2"] * 3
    assert len(events) == 3


def test_purge_everything_pending(make_agent, make_client):
    agent = make_agent(config={"consent": {"autoStart": False}}).start()
    agent.wait_ready()
    client = make_client(source="purge-all", runtime_dir=agent.runtime_dir)
    for _ in range(7):
        client.track("Pending")
    client.flush(timeout=30)
    assert control_for(agent).purge() == ferry.PurgeReport(queued=7, held=0)
    assert control_for(agent).status()["queue"]["events"] == 0


def test_status_whoami_and_metrics(agent):
    control = control_for(agent)
    status = control.status()
    assert status["pid"] == agent.process.pid and status["runtime_dir"] == agent.runtime_dir
    assert control.whoami()["mode"] == "user"
    assert "ferry_" in control.metrics()


def test_no_agent_is_reported_at_once(workdir):
    control = ferry.Control(workdir, timeout=30)
    started = time.monotonic()
    with pytest.raises(ferry.AgentNotRunning) as error:
        control.consent_state()
    assert time.monotonic() - started < 5
    assert error.value.endpoint == "ipc://%s/control" % workdir


def test_a_crashed_agent_is_reported_at_once(agent):
    agent.kill9()  # its socket file stays behind
    started = time.monotonic()
    with pytest.raises(ferry.AgentNotRunning, match="stale"):
        control_for(agent).status()
    assert time.monotonic() - started < 5
