"""Where the agent is (docs/PROTOCOL.md, "Where the agent is")."""
from __future__ import annotations

import fcntl
import os
from typing import Mapping, Optional

__all__ = ["SYSTEM_RUNTIME_DIR", "personal_runtime_dir", "agent_running", "runtime_dir", "ingest_endpoint",
           "control_endpoint"]

#: The system agent's runtime directory.
SYSTEM_RUNTIME_DIR = "/run/ferry"


def personal_runtime_dir(environ: Optional[Mapping[str, str]] = None) -> str:
    """The per-user agent's directory: `$XDG_RUNTIME_DIR/ferry`, else `/tmp/ferry-<uid>`."""
    env = os.environ if environ is None else environ
    if env.get("XDG_RUNTIME_DIR"):
        return env["XDG_RUNTIME_DIR"] + "/ferry"
    return "/tmp/ferry-%d" % os.getuid()


def agent_running(directory: str) -> bool:
    """Whether an agent holds `<directory>/ferryd.lock` (socket files survive a kill -9; the lock
    does not). An unreadable lock counts as not running for this caller."""
    try:
        fd = os.open(directory + "/ferryd.lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def runtime_dir(environ: Optional[Mapping[str, str]] = None) -> str:
    """The agent to talk to: `$FERRY_RUNTIME_DIR`; else the per-user agent's directory if an agent
    runs there; else `/run/ferry` if the system agent runs; else the per-user directory (where a
    per-user agent started later will be found)."""
    env = os.environ if environ is None else environ
    if env.get("FERRY_RUNTIME_DIR"):
        return env["FERRY_RUNTIME_DIR"]
    personal = personal_runtime_dir(env)
    if agent_running(personal):
        return personal
    if agent_running(SYSTEM_RUNTIME_DIR):
        return SYSTEM_RUNTIME_DIR
    return personal


def ingest_endpoint(directory: str) -> str:
    """`ipc://<directory>/ingest`."""
    return "ipc://%s/ingest" % directory


def control_endpoint(directory: str) -> str:
    """`ipc://<directory>/control`."""
    return "ipc://%s/control" % directory
