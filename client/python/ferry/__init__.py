"""Ferry's Python client: send events to the local ferryd and manage consent.

    import ferry

    with ferry.Client(source="checkout") as client:      # works before the agent is up
        client.track("Order Completed", {"total": 42.5}, user_id="u-1")
        client.flush(timeout=5)                           # every event so far durable

    ferry.Control().consent_state().consent               # {"analytics": "granted", …}

`Client` queues events in a bounded outbox and a background thread sends them, re-sending until
the agent acks each one (exactly once, however often it is re-sent). `Control` speaks the control
protocol: consent, tracking, features, GDPR, purge, forget, start, status. `ferry.protocol` holds
the wire codecs (docs/PROTOCOL.md), usable without an agent.
"""
from . import protocol
from .client import Client, Event, OverflowPolicy, Receipt, Statistics, Status
from .control import (AuditEntry, AuditLog, ConsentState, ConsentUpdate, Control, GDPR, PurgeReport)
from .errors import (AccessDenied, AgentNotRunning, BadReply, ClientClosed, FerryError, FerryTimeout, Refused,
                     SocketError)
from .paths import runtime_dir

__version__ = "0.9.0"

__all__ = [
    "Client", "Event", "OverflowPolicy", "Receipt", "Statistics", "Status", "Control", "ConsentState",
    "ConsentUpdate", "GDPR", "PurgeReport", "AuditEntry", "AuditLog", "FerryError", "FerryTimeout",
    "ClientClosed", "SocketError", "AgentNotRunning", "Refused", "AccessDenied", "BadReply", "protocol",
    "runtime_dir", "__version__",
]
