"""`Control`: reads and changes the agent's consent state and status over its control socket."""
from __future__ import annotations

import errno
import json
import os
import socket
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Union

import zmq

from . import protocol as wire
from .errors import AccessDenied, AgentNotRunning, BadReply, Refused, SocketError
from .paths import control_endpoint, runtime_dir as default_runtime_dir

__all__ = ["Control", "ConsentState", "GDPR", "ConsentUpdate", "PurgeReport", "AuditEntry", "AuditLog",
           "CONSENT_STATUSES", "GDPR_VALUES", "GDPR_FIELDS", "parse_reply", "decode_reply"]

#: The values of a category's (and persistence) consent.
CONSENT_STATUSES = ("undetermined", "granted", "denied")
#: The values of a GDPR field.
GDPR_VALUES = ("unset", "granted", "denied")
#: The GDPR fields by wire name.
GDPR_FIELDS = ("subject_to_gdpr", "data_usage", "ads_personalization", "ad_storage")


@dataclass(frozen=True)
class GDPR:
    """The GDPR record (Consent Mode v2 style); each field `unset`, `granted` or `denied`."""

    subject_to_gdpr: str = "unset"
    data_usage: str = "unset"
    ads_personalization: str = "unset"
    ad_storage: str = "unset"


@dataclass(frozen=True)
class ConsentState:
    """The agent's whole consent state (`consent_state`; docs/CONSENT.md). `raw` is the JSON
    object as received, with any fields this version does not know."""

    network_tracking: bool
    tracking_enabled: bool
    categories: List[str]
    enabled_features: List[str]
    consent: Dict[str, str]
    persistence: str
    gdpr: GDPR
    delivery_started: bool
    anonymous_id: str
    held_events: int
    audit_entries: int
    audit_head: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_no_op(self) -> bool:
        """True when no feature category is enabled: the agent stores and sends nothing."""
        return not self.enabled_features

    @classmethod
    def from_json(cls, obj: Any) -> "ConsentState":
        """Reads a `consent` object; raises `BadReply` naming what is missing."""
        try:
            gdpr = obj["gdpr"]
            return cls(
                network_tracking=bool(obj["network_tracking"]), tracking_enabled=bool(obj["tracking_enabled"]),
                categories=list(obj["categories"]), enabled_features=list(obj["enabled_features"]),
                consent=dict(obj["consent"]), persistence=str(obj["persistence"]),
                gdpr=GDPR(**{name: str(gdpr.get(name, "unset")) for name in GDPR_FIELDS}),
                delivery_started=bool(obj["delivery_started"]), anonymous_id=str(obj["anonymous_id"]),
                held_events=int(obj["held_events"]), audit_entries=int(obj["audit_entries"]),
                audit_head=str(obj["audit_head"]), raw=dict(obj))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise BadReply("cannot read the consent state: %s: %r" % (type(error).__name__, error)) from None


@dataclass(frozen=True)
class PurgeReport:
    """What an erasure removed: pending events from the queue, events from the held area and
    events from the quarantine (`quarantined`, absent from the reply when zero)."""

    queued: int = 0
    held: int = 0
    quarantined: int = 0

    @property
    def total(self) -> int:
        """`queued + held + quarantined`."""
        return self.queued + self.held + self.quarantined


@dataclass(frozen=True)
class ConsentUpdate:
    """The reply to a consent change: the whole new state and, when it erased events, how many."""

    consent: ConsentState
    purged: Optional[PurgeReport] = None


@dataclass(frozen=True)
class AuditEntry:
    """One consent audit entry (who changed what, hash-chained)."""

    seq: int
    at: int
    uid: Optional[int]
    pid: Optional[int]
    process: Optional[str]
    actor: Optional[str]
    change: str
    old: str
    new: str
    prev: str
    hash: str


@dataclass(frozen=True)
class AuditLog:
    """The consent audit log: entries oldest first, and whether the whole hash chain verifies."""

    entries: List[AuditEntry]
    verified: bool
    problem: Optional[str] = None


def _purge_report(obj: Any) -> Optional[PurgeReport]:
    if obj is None:
        return None
    try:
        return PurgeReport(queued=int(obj.get("queued", 0)), held=int(obj.get("held", 0)),
                           quarantined=int(obj.get("quarantined", 0)))
    except (TypeError, ValueError, AttributeError):
        raise BadReply("cannot read \"purged\": %r" % (obj,)) from None


def _status(label: str, value: str, valid: Iterable[str]) -> str:
    value = getattr(value, "value", value)
    if not isinstance(value, str):
        raise TypeError("%s must be a str, not %s" % (label, type(value).__name__))
    return value


def _names(label: str, names: Union[str, Iterable[str]]) -> List[str]:
    if isinstance(names, str):
        names = [names]
    result = list(names)
    if not result or not all(isinstance(name, str) for name in result):
        raise TypeError("%s must be a non-empty list of str" % label)
    return result


class Control:
    """Reads and changes the agent's state: consent, tracking, features, GDPR, purge and erasure,
    delivery start, the audit log and status (docs/PROTOCOL.md, "Control").

    >>> control = ferry.Control()                     # the same agent a Client would use
    >>> control.set_consent("analytics", "granted")
    >>> control.consent_state().consent["analytics"]
    'granted'

    Every call opens a fresh REQ socket, sends one JSON request, waits at most `timeout` seconds
    for the reply and closes the socket, so it is safe from any thread and after `fork()`. A
    missing or stale control socket (an agent that crashed) raises `AgentNotRunning` at once. A
    refusal raises `Refused` (with the accepted values in `valid` when the agent sent them) or
    `AccessDenied`. The agent records the caller of every change (from the socket) in its audit
    log, with `actor` beside it when set.
    """

    def __init__(self, runtime_dir: Optional[str] = None, *, timeout: float = 60.0,
                 actor: Optional[str] = None) -> None:
        """`runtime_dir`: the agent's runtime directory (default: as for `Client`). `timeout`:
        seconds to wait for each reply; generous by default, since a change that erases events
        answers once the erasure is on disk. `actor`: free text (at most 200 bytes) recorded in the
        audit log beside the caller, e.g. `"settings-ui"`."""
        self.runtime_dir = runtime_dir or default_runtime_dir()
        self.timeout = timeout
        self.actor = actor

    @property
    def endpoint(self) -> str:
        """`ipc://<runtime_dir>/control`."""
        return control_endpoint(self.runtime_dir)

    # --- consent -------------------------------------------------------------------------------

    def consent_state(self) -> ConsentState:
        """The whole consent state (`consent_state`)."""
        return _consent(self.request("consent_state"))

    def set_tracking(self, enabled: bool) -> ConsentState:
        """Turns the runtime tracking toggle on or off (`set_tracking`); returns the new state.
        While off, new events are blocked; queued events keep draining."""
        if not isinstance(enabled, bool):
            raise TypeError("enabled must be True or False")
        return _consent(self.request("set_tracking", enabled=enabled))

    def set_consent(self, category: str, status: str) -> ConsentUpdate:
        """Sets the consent of one category, or of every one with `"all"` (`set_consent`):
        `granted`, `denied` or `undetermined`. Denying erases the category's pending events
        (`ConsentUpdate.purged`). An unknown category raises `Refused` with the valid names."""
        if not isinstance(category, str):
            raise TypeError("category must be a str")
        return _consent_update(self.request("set_consent", category=category,
                                            status=_status("status", status, CONSENT_STATUSES)))

    def set_persistence(self, status: str) -> ConsentState:
        """Sets persistence consent (`set_persistence`): whether the agent may keep a stable
        anonymous id across restarts."""
        return _consent(self.request("set_persistence", status=_status("status", status, CONSENT_STATUSES)))

    def set_gdpr(self, fields: Optional[Mapping[str, str]] = None, *, subject_to_gdpr: Optional[str] = None,
                 data_usage: Optional[str] = None, ads_personalization: Optional[str] = None,
                 ad_storage: Optional[str] = None) -> ConsentUpdate:
        """Sets GDPR fields (`set_gdpr`), by wire name in `fields` or by keyword; fields not named
        keep their value. Data usage denied for a GDPR subject stops delivery and purges the queue
        (`ConsentUpdate.purged`)."""
        values: Dict[str, str] = dict(fields or {})
        for name, value in (("subject_to_gdpr", subject_to_gdpr), ("data_usage", data_usage),
                            ("ads_personalization", ads_personalization), ("ad_storage", ad_storage)):
            if value is not None:
                values[name] = value
        if not values:
            raise ValueError("set_gdpr needs at least one field: %s" % ", ".join(GDPR_FIELDS))
        values = {name: _status(name, value, GDPR_VALUES) for name, value in values.items()}
        return _consent_update(self.request("set_gdpr", fields=values))

    def enable_features(self, features: Union[str, Iterable[str]]) -> ConsentState:
        """Enables feature categories (`enable_features`); `"all"` enables every one."""
        return _consent(self.request("enable_features", features=_names("features", features)))

    def disable_features(self, features: Union[str, Iterable[str]]) -> ConsentUpdate:
        """Disables feature categories (`disable_features`); `"all"` disables every one (no-op
        mode: nothing stored, nothing sent). Their pending events are erased."""
        return _consent_update(self.request("disable_features", features=_names("features", features)))

    # --- erasure and delivery -------------------------------------------------------------------

    def purge(self, category: Optional[str] = None) -> PurgeReport:
        """Erases the pending events of `category`, or every pending and held event when None
        (`purge`). The bytes are overwritten on disk."""
        if category is not None and not isinstance(category, str):
            raise TypeError("category must be a str or None")
        return _purged(self.request("purge", category=category))

    def forget(self, user_id: str) -> PurgeReport:
        """Erases every pending and held event carrying `user_id` (`forget`), e.g. for a GDPR
        erasure request."""
        if not isinstance(user_id, str) or not user_id:
            raise ValueError("user_id must be a non-empty str")
        return _purged(self.request("forget", user_id=user_id))

    def forget_status(self) -> List[Dict[str, Any]]:
        """The upstream erasure requests `forget` recorded (`forget_status`), oldest first: each a
        dict with `id`, `requested_at`, `done` and `sinks` (each `sink`, `state` — `pending`,
        `sent` or `failed` —, `attempts`, `last_error`, `updated_at`, `reference`). Never the
        user id (docs/CONSENT.md, "Erasure upstream")."""
        return _erasures(self.request("forget_status"))

    def start(self) -> ConsentState:
        """Starts delivery (`start`) on an agent configured to wait for it (`autoStart: false`);
        starting an agent already delivering does nothing. Returns the state."""
        return _consent(self.request("start"))

    # --- inspection -----------------------------------------------------------------------------

    def consent_log(self, limit: Optional[int] = None) -> AuditLog:
        """The consent audit log (`consent_log`): the newest `limit` entries (all when None),
        oldest first, and whether the whole hash chain verifies."""
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
            raise ValueError("limit must be a non-negative int or None")
        return _audit_log(self.request("consent_log", limit=limit))

    def status(self) -> Dict[str, Any]:
        """The agent's status document (`status`): `pid`, `queue`, `sinks`, `consent`,
        `counters`, … (docs/PROTOCOL.md; fields may be added)."""
        return self.request("status")

    def metrics(self) -> str:
        """The agent's metrics in the Prometheus text exposition (`metrics`)."""
        return _metrics_text(self.request("metrics"))

    def whoami(self) -> Dict[str, Any]:
        """The caller as the agent sees it and what its access policy allows (`whoami`)."""
        return self.request("whoami")

    def deadletter_replay(self, id: str, sink: Optional[str] = None) -> Dict[str, Any]:
        """Hands dead letter `id` (of `sink`, needed only when several sinks hold it) to its sink
        once more (`deadletter_replay`); returns `{"sink", "id", "events"}`. A failed replay raises
        `Refused` with the sink's message (its `reply` holds `sink` and `id`)."""
        return self.request("deadletter_replay", id=id, sink=sink)

    # --- requests -------------------------------------------------------------------------------

    def request(self, op: str, **fields: Any) -> Dict[str, Any]:
        """Sends one request (`op` and its fields; None values are left out; `actor` is added
        when set) and returns the reply object of an `"ok": true` reply. Use it for ops the typed
        methods do not cover."""
        if self.actor is not None and "actor" not in fields:
            fields["actor"] = self.actor
        return parse_reply(self._exchange(wire.encode_control_request(op, fields)))

    def _exchange(self, body: bytes) -> bytes:
        """One REQ exchange on a fresh socket (linger 0): send, wait up to `timeout`, close."""
        path = self.runtime_dir + "/control"
        problem = _probe(path)
        if problem in (errno.ENOENT, errno.ENOTDIR):
            raise AgentNotRunning("ferryd is not running (no control socket at %s; endpoint %s)"
                                  % (path, self.endpoint), self.endpoint)
        if problem == errno.ECONNREFUSED:
            raise AgentNotRunning("ferryd is not running (nothing listens on %s: a stale socket; endpoint %s)"
                                  % (path, self.endpoint), self.endpoint)
        if problem is not None:
            raise SocketError("cannot connect to %s: %s" % (path, os.strerror(problem)))
        context = zmq.Context()
        try:
            sock = context.socket(zmq.REQ)
            try:
                sock.setsockopt(zmq.LINGER, 0)
                sock.connect(self.endpoint)
                try:
                    sock.send(body, flags=zmq.DONTWAIT)
                except zmq.Again:
                    raise AgentNotRunning("ferryd is not running (cannot send to %s)" % self.endpoint,
                                          self.endpoint) from None
                if not sock.poll(int(self.timeout * 1000), zmq.POLLIN):
                    raise AgentNotRunning("ferryd is not running (no answer within %ss; endpoint %s)"
                                          % (self.timeout, self.endpoint), self.endpoint)
                return sock.recv(flags=zmq.DONTWAIT)
            finally:
                sock.close(linger=0)
        except zmq.ZMQError as error:
            raise SocketError("control request on %s: %s" % (self.endpoint, error)) from None
        finally:
            context.term()

    def __repr__(self) -> str:
        return "<ferry.Control endpoint=%r>" % self.endpoint


def parse_reply(data: bytes) -> Dict[str, Any]:
    """Reads a control reply: the object of an `"ok": true` reply, else raises `Refused`,
    `AccessDenied` or `BadReply`."""
    try:
        reply = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        reply = None
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        raise BadReply("not a JSON object with a boolean \"ok\": %r" % bytes(data)[:200])
    if reply["ok"]:
        return reply
    message = reply.get("error")
    if not isinstance(message, str):
        message = "no reason given"
    if reply.get("code") == "access_denied" or message.lower().startswith("access denied"):
        raise AccessDenied(message)
    valid = reply.get("valid")
    raise Refused(message, valid if isinstance(valid, list) else None, reply)


def _consent_update(reply: Dict[str, Any]) -> ConsentUpdate:
    return ConsentUpdate(ConsentState.from_json(reply.get("consent")), _purge_report(reply.get("purged")))


def _consent(reply: Dict[str, Any]) -> ConsentState:
    return _consent_update(reply).consent


def _purged(reply: Dict[str, Any]) -> PurgeReport:
    return _consent_update(reply).purged or PurgeReport()


def _audit_log(reply: Dict[str, Any]) -> AuditLog:
    try:
        entries = [AuditEntry(**{name: entry.get(name) for name in AuditEntry.__dataclass_fields__})
                   for entry in reply["entries"]]
        return AuditLog(entries, bool(reply["verified"]), reply.get("problem"))
    except (KeyError, TypeError, AttributeError) as error:
        raise BadReply("cannot read the audit log: %r" % (error,)) from None


def _erasures(reply: Dict[str, Any]) -> List[Dict[str, Any]]:
    erasures = reply.get("erasures")
    if not isinstance(erasures, list) or not all(isinstance(e, dict) and isinstance(e.get("sinks"), list) for e in erasures):
        raise BadReply("the forget_status reply has no \"erasures\" list")
    return erasures


def _metrics_text(reply: Dict[str, Any]) -> str:
    text = reply.get("text")
    if not isinstance(text, str):
        raise BadReply("the metrics reply has no \"text\"")
    return text


#: How the reply of each op is read: what the `Control` method of that name returns.
_READERS: Dict[str, Callable[[Dict[str, Any]], Any]] = {
    "consent_state": _consent, "set_tracking": _consent, "set_consent": _consent_update, "set_persistence": _consent,
    "set_gdpr": _consent_update, "enable_features": _consent, "disable_features": _consent_update, "purge": _purged,
    "forget": _purged, "start": _consent, "consent_log": _audit_log, "metrics": _metrics_text, "forget_status": _erasures,
}


def decode_reply(op: str, data: bytes) -> Any:
    """Reads the reply to a request of `op` as the `Control` method of that name returns it
    (`ConsentState`, `ConsentUpdate`, `PurgeReport`, `AuditLog`, the metrics text; the reply
    object for `status`, `whoami`, `deadletter_replay` and ops without a method). A refusal
    raises as `parse_reply` does; a reply that lacks what the op promises raises `BadReply`."""
    reply = parse_reply(data)
    reader = _READERS.get(op)
    return reply if reader is None else reader(reply)


def _probe(path: str) -> Optional[int]:
    """A plain connect(2) to the control socket: None when something accepts (or it cannot
    tell), else the errno (ENOENT: no socket file; ECONNREFUSED: a file nobody listens on).
    libzmq would instead retry in the background until the reply timeout."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        probe.connect(path)
        return None
    except OSError as error:
        code = error.errno
        return code if code in (errno.ENOENT, errno.ECONNREFUSED, errno.EACCES, errno.ENOTDIR) else None
    finally:
        probe.close()
