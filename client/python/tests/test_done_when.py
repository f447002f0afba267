"""Issue 14's "done when": in a fresh venv, `pip install ./client/python`, then the ten-line example
tracks 100 events, flushes, all 100 are in the file sink, and `ferry.Control().consent_state()`
returns the state. The example is the one client/python/README.md shows."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO

PACKAGE = REPO / "client" / "python"
EXAMPLE = PACKAGE / "examples" / "track100.py"


def base_python() -> str:
    """The interpreter this venv was made from (a venv is made from a real interpreter)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def test_the_readme_shows_the_example_verbatim():
    readme = (PACKAGE / "README.md").read_text()
    assert "```python\n" + EXAMPLE.read_text() + "```" in readme
    assert len(EXAMPLE.read_text().splitlines()) <= 10


def test_fresh_venv_pip_install_and_the_ten_line_example(agent, workdir):
    venv = os.path.join(workdir, "venv")
    subprocess.run([base_python(), "-m", "venv", venv], check=True)
    install = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--quiet", "--disable-pip-version-check",
                              str(PACKAGE)], capture_output=True, text=True)
    assert install.returncode == 0, install.stdout + install.stderr
    # Run from an empty directory, so `import ferry` can only find the installed package.
    run = subprocess.run([os.path.join(venv, "bin", "python"), str(EXAMPLE)], cwd=workdir, env=agent.environment,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "accepted: 100"
    assert lines[1].startswith("tracking: True consent: {") and "'analytics': 'granted'" in lines[1]

    events = agent.wait_delivered(100, source="quickstart")
    assert sorted(e["properties"]["item"] for e in events) == list(range(100))
    assert len({e["id"] for e in events}) == 100 and {e["user_id"] for e in events} == {"u-42"}
    where = subprocess.run([os.path.join(venv, "bin", "python"), "-c", "import ferry; print(ferry.__file__)"],
                           cwd=workdir, capture_output=True, text=True, check=True).stdout
    assert where.startswith(venv)
