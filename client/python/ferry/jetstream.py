"""Reading the events of a JetStream message published by ferryd's `jetstream` sink.

A message carries one event (its body is the event's JSON object) or, with the sink's
`eventsPerMessage` above 1, several: the objects joined by newlines, oldest first, with the
header `Ferry-Events` giving their count (docs/JETSTREAM.md, "Several events per message").
`events()` reads both kinds::

    from ferry.jetstream import events
    for event in events(msg.data, msg.headers):   # a nats-py message
        handle(event)
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional

__all__ = ["events", "MalformedMessage"]


class MalformedMessage(ValueError):
    """A message body that is not what the sink publishes (a line that is not a JSON object, or
    a line count that disagrees with `Ferry-Events`)."""


def events(data: bytes, headers: Optional[Mapping[str, str]] = None) -> List[Dict[str, Any]]:
    """The events of one message, oldest first: `data` is its body, `headers` its headers (any
    mapping; `None` or without `Ferry-Events` means one event)."""
    declared = (headers or {}).get("Ferry-Events")
    lines = data.split(b"\n") if declared is not None else [data]
    if declared is not None:
        try:
            expected = int(declared)
        except ValueError:
            raise MalformedMessage("Ferry-Events is not a number: %r" % declared) from None
        if expected != len(lines):
            raise MalformedMessage("Ferry-Events says %d events, the body has %d lines" % (expected, len(lines)))
    result = []
    for number, line in enumerate(lines, 1):
        try:
            event = json.loads(line)
        except ValueError as error:
            raise MalformedMessage("line %d is not JSON: %s" % (number, error)) from None
        if not isinstance(event, dict):
            raise MalformedMessage("line %d is not a JSON object" % number)
        result.append(event)
    return result
