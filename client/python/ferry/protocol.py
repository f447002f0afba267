"""Codecs of Ferry's ingest and control protocols, as docs/PROTOCOL.md specifies them.

Only the standard library is used here, so the codecs can be imported and tested without pyzmq.
Every integer on the wire is little-endian except the 16 bytes of an event id (a UUID in its
usual big-endian order).

    >>> frame = encode_event(bytes.fromhex("0190f5c27a3b7c4d8e5f0123456789ab"), 1700000000000, 1, 4242,
    ...                      "track", "app", "Signed Up", properties=b'{"plan":"pro"}')
    >>> decode_event(frame).name
    'Signed Up'
"""
from __future__ import annotations

import json
import math
import os
import random
import re
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

__all__ = [
    "PROTOCOL_VERSION", "SUPPORTED_VERSIONS", "KIND_EVENTS", "KIND_ACK", "KIND_ERROR", "HEADER_SIZE",
    "EVENT_FIXED_SIZE", "ACK_ENTRY_SIZE", "MAX_EVENTS_PER_MESSAGE", "MAX_TEXT_BYTES", "MAX_ID_FIELD_BYTES",
    "EVENT_TYPES", "EVENT_TYPE_NAMES", "FLAG_LOCAL_ONLY", "FLAG_EXTENDED", "TAG_SESSION", "TAG_ANONYMOUS_ID",
    "TAG_GROUP_ID", "TAG_PREVIOUS_ID", "TAG_CONTEXT", "TAG_CRITICAL", "STATUSES", "REASONS", "ERROR_CODES",
    "CATEGORIES", "ProtocolError", "Header", "encode_header", "decode_header", "WireEvent", "encode_event",
    "decode_event", "strip_extensions", "AckEntry", "encode_ack", "decode_ack", "ErrorReply", "encode_error",
    "decode_error", "UUIDv7", "format_id", "json_string", "encode_json_object", "encode_control_request",
    "category_code",
]

#: The newest protocol version this package speaks (version 2 adds the extension block).
PROTOCOL_VERSION = 2
#: The versions this package can send and read.
SUPPORTED_VERSIONS = (1, 2)

#: Message kinds (header byte 1).
KIND_EVENTS, KIND_ACK, KIND_ERROR = 1, 2, 3

HEADER_SIZE = 8
EVENT_FIXED_SIZE = 52
ACK_ENTRY_SIZE = 18
#: Most event frames in one message.
MAX_EVENTS_PER_MESSAGE = 4096
#: Longest source, name, user id or once key, in UTF-8 bytes (a u16 length).
MAX_TEXT_BYTES = 0xFFFF
#: Longest anonymous id, group id or previous id, in UTF-8 bytes.
MAX_ID_FIELD_BYTES = 1024

#: Event type names and their wire codes.
EVENT_TYPES: Dict[str, int] = {"track": 1, "screen": 2, "identify": 3, "group": 4, "alias": 5, "page": 6}
EVENT_TYPE_NAMES: Dict[int, str] = {code: name for name, code in EVENT_TYPES.items()}

#: Event flag bit 0: record locally, never deliver.
FLAG_LOCAL_ONLY = 1 << 0
#: Event flag bit 15: an extension block follows the properties (version 2 only).
FLAG_EXTENDED = 1 << 15

#: Extension tags (docs/PROTOCOL.md, "Extension block").
TAG_SESSION = 0x0001
TAG_ANONYMOUS_ID = 0x0002
TAG_GROUP_ID = 0x0003
TAG_PREVIOUS_ID = 0x0004
TAG_CONTEXT = 0x0005
#: A tag with this bit set is critical: an agent that does not know it rejects the event.
TAG_CRITICAL = 0x8000

#: Ack statuses by code.
STATUSES: Dict[int, str] = {0: "accepted", 1: "duplicate", 2: "rejected", 3: "blocked", 4: "suppressed"}
#: Ack reasons by code: 1-8 and 20 (`plan_violation`: the host's tracking plan refused it) with
#: `rejected`, 9 (`local_only`) with `suppressed`, 10-17 (the consent state's verdict) with
#: `blocked`, 18 (`once_key`) with `duplicate`, 19 (`held`: held until consent for its category
#: is decided) and 21 (`quarantined`: it breaks the tracking plan and is kept in the agent's
#: quarantine, not delivered unless released) with `accepted`; 0 otherwise, and for
#: `blocked`/`suppressed`/held events from agents older than these reasons. A client treats an unknown reason
#: code as `malformed`.
REASONS: Dict[int, str] = {
    0: "none", 1: "malformed", 2: "too_large", 3: "full", 4: "storage", 5: "shutting_down", 6: "invalid_utf8",
    7: "unsupported_field", 8: "invalid_field", 9: "local_only", 10: "no_op", 11: "kill_switch",
    12: "tracking_disabled", 13: "gdpr_data_usage_denied", 14: "unknown_category", 15: "feature_disabled",
    16: "consent_denied", 17: "consent_undetermined", 18: "once_key", 19: "held", 20: "plan_violation",
    21: "quarantined",
}
#: Error reply codes by code.
ERROR_CODES: Dict[int, str] = {
    1: "malformed_message", 2: "unsupported_version", 3: "unknown_kind", 4: "message_too_large",
    5: "shutting_down", 6: "access_denied",
}
#: The built-in consent categories and their wire codes (0 = derive from the event type).
CATEGORIES: Dict[str, int] = {
    "analytics": 1, "advertising": 2, "personalization": 3, "diagnostics": 4, "push": 5, "consent": 255,
}

_HEADER = struct.Struct("<BBHI")                 # version, kind, flags, request id
_EVENT_FIXED = struct.Struct("<16sQQIBBHHHHHI")  # id .. properties length: the 52-byte fixed header
_EXTENSION = struct.Struct("<HI")                # tag, length
_ID_TAGS = {TAG_ANONYMOUS_ID: "anonymous_id", TAG_GROUP_ID: "group_id", TAG_PREVIOUS_ID: "previous_id"}


class ProtocolError(ValueError):
    """A frame that does not follow docs/PROTOCOL.md.

    `reason` names the ack reason the agent would answer for such an event frame
    (`malformed`, `invalid_utf8`, `unsupported_field`).
    """

    def __init__(self, message: str, reason: str = "malformed") -> None:
        super().__init__(message)
        self.reason = reason


# --- message header ------------------------------------------------------------------------------

class Header(NamedTuple):
    """The 8-byte header frame of every ingest message."""

    version: int
    kind: int
    flags: int
    request_id: int


def encode_header(kind: int, request_id: int, version: int = PROTOCOL_VERSION, flags: int = 0) -> bytes:
    """The header frame of a message of `kind` (`KIND_EVENTS`, …) with `request_id` (a u32)."""
    return _HEADER.pack(version, kind, flags, request_id & 0xFFFF_FFFF)


def decode_header(frame: bytes) -> Header:
    """Reads a header frame; raises `ProtocolError` if it is not 8 bytes long."""
    if len(frame) != HEADER_SIZE:
        raise ProtocolError("header frame is %d bytes, expected %d" % (len(frame), HEADER_SIZE))
    return Header(*_HEADER.unpack(frame))


# --- event frame ---------------------------------------------------------------------------------

def _utf8(label: str, text: str, limit: int) -> bytes:
    if not isinstance(text, str):
        raise TypeError("%s must be a str, not %s" % (label, type(text).__name__))
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError("%s is not valid Unicode text: %s" % (label, error)) from None
    if len(data) > limit:
        raise ValueError("%s is %d bytes in UTF-8; the limit is %d" % (label, len(data), limit))
    return data


@dataclass
class WireEvent:
    """One event frame with every field (docs/PROTOCOL.md, "Event frame").

    `properties` and `context` are the JSON text as bytes (`b""` or None for none). The session
    and the event-model fields (`anonymous_id`, `group_id`, `previous_id`, `context`) travel in
    the extension block, in tag order, each only when set (None and empty are unset). Extension
    entries this package does not know are kept in `extensions` (tag → value) and encoded after
    the known ones.
    """

    id: bytes
    timestamp: int
    sequence: int
    pid: int
    type: str
    source: str
    name: str
    user_id: str = ""
    once_key: str = ""
    properties: bytes = b""
    category: int = 0
    flags: int = 0
    session: Optional[bytes] = None
    anonymous_id: Optional[str] = None
    group_id: Optional[str] = None
    previous_id: Optional[str] = None
    context: Optional[bytes] = None
    extensions: Dict[int, bytes] = field(default_factory=dict)

    @property
    def local_only(self) -> bool:
        """Whether flag bit 0 (`localOnly`) is set."""
        return bool(self.flags & FLAG_LOCAL_ONLY)

    def extension_entries(self) -> List[Tuple[int, bytes]]:
        """The extension block's entries in the order they are encoded: known tags ascending,
        then the others ascending."""
        return _extension_entries(self.session, self.anonymous_id, self.group_id, self.previous_id, self.context,
                                  self.extensions)

    def encode(self) -> bytes:
        """The frame's bytes. Raises `ValueError`/`TypeError` for a field that cannot be sent."""
        if self.type not in EVENT_TYPES:
            raise ValueError("unknown event type %r; valid: %s" % (self.type, ", ".join(EVENT_TYPES)))
        return encode_event(self.id, self.timestamp, self.sequence, self.pid, self.type, self.source, self.name,
                            self.user_id, self.once_key, self.properties, self.category, self.flags, self.session,
                            self.anonymous_id, self.group_id, self.previous_id, self.context, self.extensions)

    @classmethod
    def decode(cls, frame: bytes, version: int = PROTOCOL_VERSION) -> "WireEvent":
        """Reads a frame as an agent speaking `version` would; raises `ProtocolError` (with the
        agent's reject reason) for a frame it would reject."""
        frame = bytes(frame)
        if len(frame) < EVENT_FIXED_SIZE:
            raise ProtocolError("event frame is %d bytes; the fixed header alone is %d" % (len(frame), EVENT_FIXED_SIZE))
        (event_id, timestamp, sequence, pid, type_code, category, flags,
         source_len, name_len, user_len, once_len, props_len) = _EVENT_FIXED.unpack_from(frame, 0)
        if type_code not in EVENT_TYPE_NAMES:
            raise ProtocolError("unknown event type %d" % type_code)
        end = EVENT_FIXED_SIZE + source_len + name_len + user_len + once_len + props_len
        extended = bool(flags & FLAG_EXTENDED)
        if extended and version < 2:
            raise ProtocolError("a version %d event may not carry an extension block" % version)
        if end > len(frame) or (end != len(frame) and not extended):
            raise ProtocolError("event frame is %d bytes but its header declares %d" % (len(frame), end))
        offset, texts = EVENT_FIXED_SIZE, []
        for label, length in (("source", source_len), ("name", name_len), ("user id", user_len),
                              ("once key", once_len)):
            texts.append(_decode_text(label, frame[offset:offset + length]))
            offset += length
        properties = frame[offset:end]
        try:
            properties.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("the properties are not valid UTF-8", "invalid_utf8") from None
        event = cls(id=event_id, timestamp=timestamp, sequence=sequence, pid=pid, type=EVENT_TYPE_NAMES[type_code],
                    source=texts[0], name=texts[1], user_id=texts[2], once_key=texts[3], properties=properties,
                    category=category, flags=flags)
        if extended:
            event._decode_extensions(frame, end)
        return event

    def _decode_extensions(self, frame: bytes, offset: int) -> None:
        seen = set()
        while offset < len(frame):
            if len(frame) - offset < _EXTENSION.size:
                raise ProtocolError("an extension entry header does not fit in the frame")
            tag, length = _EXTENSION.unpack_from(frame, offset)
            offset += _EXTENSION.size
            if length > len(frame) - offset:
                raise ProtocolError("extension %d declares %d bytes; %d are left" % (tag, length, len(frame) - offset))
            value = frame[offset:offset + length]
            offset += length
            if tag in seen:
                raise ProtocolError("extension %d appears twice" % tag)
            seen.add(tag)
            if tag == TAG_SESSION:
                if length != 16:
                    raise ProtocolError("the session extension is %d bytes, not 16" % length)
                self.session = value
            elif tag in _ID_TAGS:
                text = _decode_text(_ID_TAGS[tag], value)
                if length > MAX_ID_FIELD_BYTES:
                    raise ProtocolError("%s is %d bytes; the limit is %d" % (_ID_TAGS[tag], length, MAX_ID_FIELD_BYTES),
                                        "invalid_field")
                setattr(self, _ID_TAGS[tag], text or None)
            elif tag == TAG_CONTEXT:
                text = _decode_text("context", value)
                if text:
                    try:
                        is_object = isinstance(json.loads(text), dict)
                    except ValueError:
                        is_object = False
                    if not is_object:
                        raise ProtocolError("the context is not a JSON object", "invalid_field")
                self.context = value or None
            elif tag & TAG_CRITICAL:
                raise ProtocolError("critical extension 0x%04x is unknown" % tag, "unsupported_field")
            else:
                self.extensions[tag] = value


def _decode_text(label: str, data: bytes) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("%s is not valid UTF-8" % label, "invalid_utf8") from None


def encode_event(event_id: bytes, timestamp: int, sequence: int, pid: int, type: str, source: str, name: str,
                 user_id: str = "", once_key: str = "", properties: bytes = b"", category: int = 0, flags: int = 0,
                 session: Optional[bytes] = None, anonymous_id: Optional[str] = None, group_id: Optional[str] = None,
                 previous_id: Optional[str] = None, context: Optional[bytes] = None,
                 extensions: Optional[Mapping[int, bytes]] = None) -> bytes:
    """One event frame (see `WireEvent`, whose `encode` this is). `type` is a name (`"track"`)
    or a wire code. Raises `ValueError`/`TypeError` for a field that cannot be sent."""
    if isinstance(type, int):
        if type not in EVENT_TYPE_NAMES:
            raise ValueError("unknown event type code %d" % type)
        type = EVENT_TYPE_NAMES[type]
    if len(event_id) != 16:
        raise ValueError("an event id is 16 bytes, not %d" % len(event_id))
    code = EVENT_TYPES.get(type)
    if code is None:
        raise ValueError("unknown event type %r; valid: %s" % (type, ", ".join(EVENT_TYPES)))
    if not 0 <= category <= 255:
        raise ValueError("category code %d is not 0-255" % category)
    source_bytes = _utf8("source", source, MAX_TEXT_BYTES)
    name_bytes = _utf8("name", name, MAX_TEXT_BYTES)
    user_bytes = _utf8("user id", user_id, MAX_TEXT_BYTES)
    once_bytes = _utf8("once key", once_key, MAX_TEXT_BYTES)
    if not isinstance(properties, bytes):
        properties = bytes(properties)
    if len(properties) > 0xFFFF_FFFF:
        raise ValueError("properties are limited to 2^32-1 bytes")
    block = _extension_block(session, anonymous_id, group_id, previous_id, context, extensions)
    flags = flags | FLAG_EXTENDED if block else flags & ~FLAG_EXTENDED
    return b"".join((_EVENT_FIXED.pack(bytes(event_id), timestamp, sequence, pid, code, category, flags,
                                       len(source_bytes), len(name_bytes), len(user_bytes), len(once_bytes),
                                       len(properties)),
                     source_bytes, name_bytes, user_bytes, once_bytes, properties, block))


def _extension_entries(session: Optional[bytes], anonymous_id: Optional[str], group_id: Optional[str],
                       previous_id: Optional[str], context: Optional[bytes],
                       extensions: Optional[Mapping[int, bytes]]) -> List[Tuple[int, bytes]]:
    entries: List[Tuple[int, bytes]] = []
    if session is not None:
        if len(session) != 16:
            raise ValueError("a session is 16 bytes, not %d" % len(session))
        entries.append((TAG_SESSION, bytes(session)))
    if anonymous_id:
        entries.append((TAG_ANONYMOUS_ID, _utf8("anonymous_id", anonymous_id, MAX_ID_FIELD_BYTES)))
    if group_id:
        entries.append((TAG_GROUP_ID, _utf8("group_id", group_id, MAX_ID_FIELD_BYTES)))
    if previous_id:
        entries.append((TAG_PREVIOUS_ID, _utf8("previous_id", previous_id, MAX_ID_FIELD_BYTES)))
    if context:
        entries.append((TAG_CONTEXT, bytes(context)))
    for tag in sorted(extensions or ()):
        if tag in (TAG_SESSION, TAG_CONTEXT) or tag in _ID_TAGS or not 0 <= tag <= 0xFFFF:
            raise ValueError("extension tag %d is a known field or out of range" % tag)
        entries.append((tag, bytes(extensions[tag])))  # type: ignore[index]
    return entries


def _extension_block(session: Optional[bytes], anonymous_id: Optional[str], group_id: Optional[str],
                     previous_id: Optional[str], context: Optional[bytes],
                     extensions: Optional[Mapping[int, bytes]]) -> bytes:
    if not (session is not None or anonymous_id or group_id or previous_id or context or extensions):
        return b""
    return b"".join(_EXTENSION.pack(tag, len(value)) + value for tag, value in
                    _extension_entries(session, anonymous_id, group_id, previous_id, context, extensions))


def decode_event(frame: bytes, version: int = PROTOCOL_VERSION) -> WireEvent:
    """Reads an event frame; raises `ProtocolError` as the agent would reject it."""
    return WireEvent.decode(frame, version)


def strip_extensions(frame: bytes) -> bytes:
    """The frame without its extension block and `extended` flag: what a version 1 agent accepts
    (a frame without a block is returned unchanged)."""
    if len(frame) < EVENT_FIXED_SIZE:
        return frame
    flags, = struct.unpack_from("<H", frame, 38)
    if not flags & FLAG_EXTENDED:
        return frame
    lengths = struct.unpack_from("<HHHHI", frame, 40)
    end = EVENT_FIXED_SIZE + sum(lengths)
    if end > len(frame):
        return frame
    return frame[:38] + struct.pack("<H", flags & ~FLAG_EXTENDED) + frame[40:end]


# --- replies -------------------------------------------------------------------------------------

class AckEntry(NamedTuple):
    """One entry of an ack body: the event id, its status name and reason name."""

    id: bytes
    status: str
    reason: str


def encode_ack(entries: Sequence[Tuple[bytes, int, int]]) -> bytes:
    """An ack body from (16-byte id, status code, reason code) tuples (the agent's side)."""
    return struct.pack("<I", len(entries)) + b"".join(bytes(i) + bytes([s, r]) for i, s, r in entries)


def decode_ack(frame: bytes) -> List[AckEntry]:
    """The entries of an ack body, one per event frame of the batch, in order. An unknown status
    is a `ProtocolError`; an unknown reason reads as `malformed`."""
    frame = bytes(frame)
    if len(frame) < 4:
        raise ProtocolError("ack frame is %d bytes" % len(frame))
    count, = struct.unpack_from("<I", frame, 0)
    if len(frame) != 4 + count * ACK_ENTRY_SIZE:
        raise ProtocolError("ack frame declares %d entries but is %d bytes" % (count, len(frame)))
    entries = []
    for index in range(count):
        base = 4 + ACK_ENTRY_SIZE * index
        status, reason = frame[base + 16], frame[base + 17]
        if status not in STATUSES:
            raise ProtocolError("unknown event status %d" % status)
        entries.append(AckEntry(frame[base:base + 16], STATUSES[status], REASONS.get(reason, "malformed")))
    return entries


class ErrorReply(NamedTuple):
    """An error body: the code, its name (`error_<code>` when unknown) and the agent's message."""

    code: int
    name: str
    message: str


def encode_error(code: int, message: str) -> bytes:
    """An error body (the agent's side)."""
    return struct.pack("<H", code) + message.encode("utf-8")


def decode_error(frame: bytes) -> ErrorReply:
    """Reads an error body; raises `ProtocolError` if it is shorter than its code."""
    frame = bytes(frame)
    if len(frame) < 2:
        raise ProtocolError("error frame is %d bytes" % len(frame))
    code, = struct.unpack_from("<H", frame, 0)
    return ErrorReply(code, ERROR_CODES.get(code, "error_%d" % code), frame[2:].decode("utf-8", "replace"))


# --- ids -----------------------------------------------------------------------------------------

class UUIDv7:
    """Time-ordered 16-byte ids, strictly increasing within one generator (RFC 9562, method 1):
    48-bit Unix milliseconds, version 7, a 12-bit counter seeded randomly (at most 0x3FF) each new
    millisecond and incremented within one, the `10` variant, 62 random bits. When the counter
    passes 0xFFF the millisecond moves on by one; the clock stepping back never makes an id go
    down. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last_ms = 0
        self.counter = 0
        self._seed()

    def _seed(self) -> None:
        # Random bits from a generator seeded by the OS, not a getrandom() call per id; seeded
        # again in a process forked from this one, whose ids must differ from its parent's.
        self._pid = os.getpid()
        self._random = random.Random(os.urandom(32))

    def next(self, unix_ms: Optional[int] = None) -> bytes:
        """The next id (`unix_ms`: the time to use, for tests)."""
        ms = int(time.time() * 1000) if unix_ms is None else unix_ms
        with self._lock:
            if self._pid != os.getpid():
                self._seed()
            bits = self._random.getrandbits
            if ms <= self.last_ms:
                ms = self.last_ms
                self.counter += 1
                if self.counter > 0xFFF:
                    ms += 1
                    self.counter = bits(10)
            else:
                self.counter = bits(10)
            self.last_ms = ms
            counter = self.counter
            low = bits(62) | 0x8000_0000_0000_0000
        high = ((ms & 0xFFFF_FFFF_FFFF) << 16) | 0x7000 | counter
        return struct.pack(">QQ", high, low)


def format_id(event_id: bytes) -> str:
    """The canonical 8-4-4-4-12 text of a 16-byte id."""
    h = bytes(event_id).hex()
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


# --- JSON ----------------------------------------------------------------------------------------

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# The characters json_string escapes: found by the regex engine (C), so text with none of them,
# the common case, costs one scan instead of a Python loop over its characters.
_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\]')


def _escape(match: "re.Match[str]") -> str:
    char = match.group()
    return _ESCAPES.get(char) or "\\u%04x" % ord(char)


def json_string(text: str) -> str:
    """`text` as a JSON string, escaped exactly as the Swift side does (`\\"`, `\\\\`, `\\n`,
    `\\r`, `\\t`, other control characters as `\\u00xx`; everything else as is)."""
    if _NEEDS_ESCAPE.search(text) is None:
        return '"' + text + '"'
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


def _json_value(value: Any, label: str, depth: int = 0) -> str:
    kind = type(value)
    if kind is str:
        return json_string(value)
    if kind is int:
        return str(value)
    if kind is float and math.isfinite(value):
        return repr(value)
    if depth > 64:
        raise ValueError("%s is nested more than 64 levels deep" % label)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return json_string(value)
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("%s holds %r, which JSON cannot represent" % (label, value))
        return json.dumps(value)
    if isinstance(value, Mapping):
        return _json_object(value, label, depth + 1)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_json_value(item, label, depth + 1) for item in value) + "]"
    raise TypeError("%s holds a %s, which is not a JSON value (use str, int, float, bool, None, "
                    "dict, list)" % (label, type(value).__name__))


def _json_object(value: Mapping[str, Any], label: str, depth: int) -> str:
    for key in value:
        if not isinstance(key, str):
            raise TypeError("%s has a key %r that is not a str" % (label, key))
    return "{" + ",".join(json_string(key) + ":" + _json_value(value[key], label, depth)
                          for key in sorted(value)) + "}"


def encode_json_object(value: Mapping[str, Any], label: str = "properties") -> bytes:
    """A mapping as compact UTF-8 JSON with sorted keys (the form the Swift client sends).
    Raises `TypeError` for values JSON cannot hold and `ValueError` for NaN/infinity or text that
    is not valid Unicode."""
    if not isinstance(value, Mapping):
        raise TypeError("%s must be a dict, not %s" % (label, type(value).__name__))
    text = _json_object(value, label, 0)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError("%s holds text that is not valid Unicode: %s" % (label, error)) from None


def encode_control_request(op: str, fields: Optional[Mapping[str, Any]] = None) -> bytes:
    """A control request: a JSON object with `op` and `fields` (None values left out), keys
    sorted, compact, escaped as the Swift `ControlRequest` encodes it."""
    body: Dict[str, Any] = {key: value for key, value in (fields or {}).items() if value is not None}
    body["op"] = op
    return encode_json_object(body, "the request")


def category_code(category: "int | str") -> int:
    """The wire code of a category: a code (0-255) or a built-in name (`"analytics"`, …). A
    category declared only in the agent's configuration must be given by its code."""
    if isinstance(category, bool):
        raise TypeError("a category is a name or a code, not a bool")
    if isinstance(category, int):
        if not 0 <= category <= 255:
            raise ValueError("category code %d is not 0-255" % category)
        return category
    if isinstance(category, str):
        if category not in CATEGORIES:
            raise ValueError("unknown category %r; built-in: %s (give a configured category by its code)"
                             % (category, ", ".join(CATEGORIES)))
        return CATEGORIES[category]
    raise TypeError("a category is a name or a code, not %s" % type(category).__name__)
