"""Fixtures: a real ferryd per test, in a directory of its own, killed when the test ends.

The agent binary is $FERRYD, else built with `swift build --product ferryd` in this checkout.
Every wait is on a condition with a deadline (`wait_for`); nothing sleeps a fixed time.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, TypeVar

import pytest

REPO = Path(__file__).resolve().parents[3]
T = TypeVar("T")


def wait_for(what: str, condition: Callable[[], Optional[T]], timeout: float = 30.0, interval: float = 0.01) -> T:
    """Polls `condition` until it returns a true value, or fails the test after `timeout` s."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= end:
            pytest.fail("timed out after %.1f s waiting for %s" % (timeout, what))
        time.sleep(interval)


@pytest.fixture(scope="session")
def ferryd() -> str:
    """The ferryd binary: $FERRYD, else a `swift build --product ferryd` of this checkout."""
    path = os.environ.get("FERRYD")
    if path:
        if not os.access(path, os.X_OK):
            pytest.fail("FERRYD=%s is not an executable" % path)
        return path
    build = subprocess.run(["swift", "build", "--product", "ferryd"], cwd=REPO, capture_output=True, text=True)
    if build.returncode != 0:
        pytest.fail("swift build --product ferryd failed:\n%s%s" % (build.stdout[-4000:], build.stderr[-4000:]))
    bin_dir = subprocess.run(["swift", "build", "--show-bin-path"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.strip()
    return os.path.join(bin_dir, "ferryd")


class Agent:
    """One ferryd with its own runtime, data and sink directories under `root`."""

    def __init__(self, binary: str, root: str, config: Optional[Dict[str, Any]] = None) -> None:
        self.binary = binary
        self.root = root
        self.runtime_dir = os.path.join(root, "rt")
        self.data_dir = os.path.join(root, "data")
        self.sink_dir = os.path.join(root, "sink")
        self.log_path = os.path.join(root, "ferryd.log")
        self.arguments = ["--data-dir", self.data_dir, "--runtime-dir", self.runtime_dir, "--sink-dir", self.sink_dir]
        if config is not None:
            path = os.path.join(root, "ferryd.json")
            with open(path, "w") as file:
                json.dump(config, file)
            self.arguments += ["--config", path]
        self.process: Optional[subprocess.Popen] = None
        self.runs: List[subprocess.Popen] = []

    @property
    def environment(self) -> Dict[str, str]:
        """The environment of a process that should find this agent."""
        return dict(os.environ, FERRY_RUNTIME_DIR=self.runtime_dir)

    def start(self) -> "Agent":
        """Starts ferryd (it must not be running)."""
        assert self.process is None or self.process.poll() is not None, "ferryd is already running"
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen([self.binary] + self.arguments, stdout=log, stderr=log,
                                        stdin=subprocess.DEVNULL)
        log.close()
        self.runs.append(self.process)
        return self

    def wait_ready(self, timeout: float = 30.0) -> Dict[str, Any]:
        """Waits until this run of the agent answers `status` (its pid), failing with its log if
        it exits first."""
        import ferry

        control = ferry.Control(self.runtime_dir, timeout=0.5)
        process = self.process
        assert process is not None

        def ready() -> Optional[Dict[str, Any]]:
            if process.poll() is not None:
                pytest.fail("ferryd exited (%s) before it was ready\n%s" % (process.returncode, self.log()))
            try:
                status = control.status()
            except ferry.FerryError:
                return None
            return status if status.get("pid") == process.pid else None

        return wait_for("ferryd to answer status", ready, timeout)

    def kill9(self) -> None:
        """SIGKILL (a crash) and reap."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def terminate(self, timeout: float = 20.0) -> None:
        """SIGTERM and wait for the exit."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout)

    def log(self) -> str:
        """The agent's output so far (the end of it)."""
        try:
            with open(self.log_path, "rb") as file:
                return file.read()[-6000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def delivered(self) -> List[Dict[str, Any]]:
        """Every complete line the file sink has written, in order."""
        events = []
        for path in sorted(glob.glob(os.path.join(self.sink_dir, "events-*.jsonl"))):
            with open(path, "rb") as file:
                data = file.read()
            for line in data.split(b"\n")[:-1]:  # the last piece is empty or a line being written
                if line:
                    events.append(json.loads(line))
        return events

    def wait_delivered(self, count: int, source: Optional[str] = None, timeout: float = 30.0) -> List[Dict[str, Any]]:
        """Waits until the sink holds at least `count` events (of `source`), then returns them."""
        def enough() -> Optional[List[Dict[str, Any]]]:
            events = [e for e in self.delivered() if source is None or e.get("source") == source]
            return events if len(events) >= count else None

        return wait_for("%d events in the file sink" % count, enough, timeout)

    def cleanup(self) -> None:
        for process in self.runs:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture
def workdir():
    """A short temporary directory (socket paths must stay under 108 bytes), removed afterwards."""
    path = tempfile.mkdtemp(prefix="fpy-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_agent(ferryd: str, workdir: str):
    """Makes agents (not started) in the test's directory; kills every one at the end."""
    agents: List[Agent] = []

    def make(config: Optional[Dict[str, Any]] = None, name: str = "a") -> Agent:
        root = os.path.join(workdir, name)
        os.makedirs(root)
        agent = Agent(ferryd, root, config)
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        agent.cleanup()


@pytest.fixture
def agent(make_agent) -> Agent:
    """A running, ready agent with the default configuration."""
    agent = make_agent().start()
    agent.wait_ready()
    return agent


@pytest.fixture
def make_client():
    """Makes `ferry.Client`s that are closed when the test ends."""
    import ferry

    clients: List[ferry.Client] = []

    def make(*args: Any, **kwargs: Any) -> "ferry.Client":
        client = ferry.Client(*args, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def pytest_report_header(config) -> str:
    return "python %s at %s" % (sys.version.split()[0], sys.executable)
