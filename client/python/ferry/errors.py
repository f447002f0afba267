"""The errors of the ferry package: one base class, `FerryError`, with a subclass per kind."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

__all__ = ["FerryError", "FerryTimeout", "ClientClosed", "SocketError", "AgentNotRunning", "Refused",
           "AccessDenied", "BadReply"]


class FerryError(Exception):
    """Every error this package raises (besides `TypeError`/`ValueError` for bad arguments).

    `code` names the kind: `timeout`, `closed`, `socket`, `agent_not_running`, `refused`,
    `access_denied`, `bad_reply`.
    """

    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class FerryTimeout(FerryError):
    """`flush()` or `send()` ran out of time; the events stay queued."""

    code = "timeout"


class ClientClosed(FerryError):
    """The client was closed."""

    code = "closed"


class SocketError(FerryError):
    """A ZeroMQ or socket error while setting up a connection."""

    code = "socket"


class AgentNotRunning(FerryError):
    """No agent answered on `endpoint` (no socket file, a stale one, or no reply in time)."""

    code = "agent_not_running"

    def __init__(self, message: str, endpoint: str) -> None:
        super().__init__(message)
        self.endpoint = endpoint


class Refused(FerryError):
    """The agent refused a control request; `valid` lists the values it accepts for the field it
    named, when it sent them; `reply` is the whole reply object (e.g. the `sink` and `id` of a
    failed `deadletter_replay`)."""

    code = "refused"

    def __init__(self, message: str, valid: Optional[Sequence[str]] = None,
                 reply: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(message if not valid else "%s (valid: %s)" % (message, ", ".join(valid)))
        self.message = message
        self.valid: List[str] = list(valid or [])
        self.reply: Dict[str, Any] = dict(reply or {})


class AccessDenied(FerryError):
    """The agent's access policy refused the caller (a refusal with code `access_denied`)."""

    code = "access_denied"


class BadReply(FerryError):
    """The agent's reply could not be read."""

    code = "bad_reply"
