#!/usr/bin/env python3
"""Send events to ferryd using nothing but docs/PROTOCOL.md and pyzmq (Debian: python3-zmq).

    ferry_emit.py --count 100 --name "Signed Up" --props '{"plan": "pro"}'

Prints `accepted=N duplicate=N rejected=N` (plus `blocked=N suppressed=N` when the agent answers
those); exits 1 if anything was rejected or blocked, 2 on timeout. The agent may start after this:
unacknowledged batches are re-sent every 2 s until the timeout.

The encoders and decoders need only the standard library and can be imported:
encode_header/decode_header, encode_event/decode_event, decode_ack/encode_ack,
decode_error/encode_error, UUIDv7, runtime_dir, emit.
"""
import argparse
import json
import os
import secrets
import struct
import sys
import time

VERSION = 1
KIND_EVENTS, KIND_ACK, KIND_ERROR = 1, 2, 3
TYPES = {"track": 1, "screen": 2, "identify": 3, "group": 4, "alias": 5, "page": 6}
TYPE_NAMES = {code: name for name, code in TYPES.items()}
FLAG_LOCAL_ONLY = 1 << 0
STATUSES = {0: "accepted", 1: "duplicate", 2: "rejected", 3: "blocked", 4: "suppressed"}
REASONS = {0: "none", 1: "malformed", 2: "too_large", 3: "full", 4: "storage", 5: "shutting_down", 6: "invalid_utf8"}
ERROR_CODES = {1: "malformed_message", 2: "unsupported_version", 3: "unknown_kind", 4: "message_too_large",
               5: "shutting_down"}

HEADER_SIZE = 8
EVENT_FIXED_SIZE = 52
ACK_ENTRY_SIZE = 18
MAX_EVENTS_PER_MESSAGE = 4096
RESEND_AFTER = 2.0  # seconds without a reply before a batch is sent again (as the Swift client)

_HEADER = struct.Struct("<BBHI")                # version, kind, flags, request id
_EVENT_FIXED = struct.Struct("<16sQQIBBHHHHHI")  # id .. properties length: the 52-byte header

# The worked example of docs/PROTOCOL.md, as produced by the Swift encoder (checked by the Swift
# tests in Tests/FerryProtocolTests too).
SELFTEST_EVENT_HEX = (
    "0190f5c27a3b7c4d8e5f0123456789ab0068e5cf8b0100000100000000000000921000000100000003000900000000000e000000"
    "6170705369676e65642055707b22706c616e223a2270726f227d"
)
SELFTEST_HEADER_HEX = "0101000007000000"
SELFTEST_ACK_HEX = (
    "03000000"
    "0190f5c27a3b7c4d8e5f0123456789ab0000"
    "000000000000000000000000000000000201"
    "0190f5c27a3b7c4d8e5f0123456789ab0100"
)
SELFTEST_ERROR_HEX = "02007632"


class ProtocolError(ValueError):
    """A frame that does not follow docs/PROTOCOL.md."""


class UUIDv7:
    """Time-ordered 16-byte ids, strictly increasing within one generator (RFC 9562, method 1):
    48-bit Unix ms, version 7, a 12-bit counter seeded randomly (at most 0x3FF) each new
    millisecond and incremented within one, the 10 variant, 62 random bits. On counter
    overflow the timestamp moves on by one millisecond."""

    def __init__(self):
        self.last_ms = 0
        self.counter = 0

    def next(self, unix_ms=None):
        ms = int(time.time() * 1000) if unix_ms is None else unix_ms
        if ms <= self.last_ms:
            ms = self.last_ms
            self.counter += 1
            if self.counter > 0xFFF:
                ms += 1
                self.counter = secrets.randbits(10)
        else:
            self.counter = secrets.randbits(10)
        self.last_ms = ms
        high = (ms << 16) | 0x7000 | self.counter
        low = secrets.randbits(62) | 0x8000_0000_0000_0000
        return struct.pack(">QQ", high, low)


def format_id(event_id):
    """The canonical 8-4-4-4-12 text of a 16-byte id."""
    h = event_id.hex()
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


SYSTEM_RUNTIME_DIR = "/run/ferry"


def personal_runtime_dir(environ=None):
    """The per-user agent's directory: $XDG_RUNTIME_DIR/ferry, else /tmp/ferry-<uid>."""
    env = os.environ if environ is None else environ
    if env.get("XDG_RUNTIME_DIR"):
        return env["XDG_RUNTIME_DIR"] + "/ferry"
    return "/tmp/ferry-%d" % os.getuid()


def agent_running(directory):
    """Whether an agent holds <directory>/ferryd.lock (socket files survive a kill -9; the lock
    does not). An unreadable lock counts as not running for this caller."""
    import fcntl
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


def runtime_dir(environ=None):
    """The agent to talk to, as docs/PROTOCOL.md ("Where the agent is") says: $FERRY_RUNTIME_DIR;
    else the per-user agent's directory if it runs; else /run/ferry if the system agent runs;
    else the per-user directory."""
    env = os.environ if environ is None else environ
    if env.get("FERRY_RUNTIME_DIR"):
        return env["FERRY_RUNTIME_DIR"]
    personal = personal_runtime_dir(env)
    if agent_running(personal):
        return personal
    if agent_running(SYSTEM_RUNTIME_DIR):
        return SYSTEM_RUNTIME_DIR
    return personal


def ingest_endpoint(directory):
    return "ipc://%s/ingest" % directory


# --- message header ------------------------------------------------------------------------

def encode_header(kind, request_id, version=VERSION, flags=0):
    return _HEADER.pack(version, kind, flags, request_id)


def decode_header(frame):
    """(version, kind, request_id) of an 8-byte header frame."""
    if len(frame) != HEADER_SIZE:
        raise ProtocolError("header frame is %d bytes, expected %d" % (len(frame), HEADER_SIZE))
    version, kind, _flags, request_id = _HEADER.unpack(frame)
    return version, kind, request_id


# --- event frame ---------------------------------------------------------------------------

def encode_event(event_id, timestamp, sequence, pid, type_code, source, name,
                 user_id="", once_key="", properties=b"", category=0, flags=0):
    """One event frame. Text fields are str (UTF-8 on the wire, at most 65535 bytes each);
    properties is bytes holding a UTF-8 JSON object, or b"" for none."""
    if len(event_id) != 16:
        raise ValueError("an event id is 16 bytes")
    texts = [s.encode("utf-8") for s in (source, name, user_id, once_key)]
    for label, text in zip(("source", "name", "user id", "once key"), texts):
        if len(text) > 0xFFFF:
            raise ValueError("%s is %d bytes; the limit is 65535" % (label, len(text)))
    if len(properties) > 0xFFFF_FFFF:
        raise ValueError("properties are limited to 2^32-1 bytes")
    fixed = _EVENT_FIXED.pack(bytes(event_id), timestamp, sequence, pid, type_code, category, flags,
                              *(len(t) for t in texts), len(properties))
    return fixed + b"".join(texts) + bytes(properties)


def decode_event(frame):
    """A dict of the event's fields; raises ProtocolError as the agent would reject the frame."""
    if len(frame) < EVENT_FIXED_SIZE:
        raise ProtocolError("event frame is %d bytes, the fixed header alone is 52" % len(frame))
    (event_id, timestamp, sequence, pid, type_code, category, flags,
     source_len, name_len, user_len, once_len, props_len) = _EVENT_FIXED.unpack_from(frame, 0)
    if type_code not in TYPE_NAMES:
        raise ProtocolError("unknown event type %d" % type_code)
    declared = EVENT_FIXED_SIZE + source_len + name_len + user_len + once_len + props_len
    if declared != len(frame):
        raise ProtocolError("event frame is %d bytes but its header declares %d" % (len(frame), declared))
    offset, texts = EVENT_FIXED_SIZE, []
    for label, length in (("source", source_len), ("name", name_len), ("user_id", user_len), ("once_key", once_len)):
        try:
            texts.append(bytes(frame[offset:offset + length]).decode("utf-8"))
        except UnicodeDecodeError:
            raise ProtocolError("%s is not valid UTF-8" % label) from None
        offset += length
    return {
        "id": bytes(event_id), "timestamp": timestamp, "sequence": sequence, "pid": pid,
        "type": TYPE_NAMES[type_code], "category": category, "flags": flags,
        "source": texts[0], "name": texts[1], "user_id": texts[2], "once_key": texts[3],
        "properties": bytes(frame[offset:]),
    }


# --- replies -------------------------------------------------------------------------------

def encode_ack(entries):
    """entries: (16-byte id, status code, reason code) tuples. (The agent's side; for tests.)"""
    return struct.pack("<I", len(entries)) + b"".join(bytes(i) + bytes([s, r]) for i, s, r in entries)


def decode_ack(frame):
    """[(16-byte id, status name, reason name)], one per event frame of the batch, same order."""
    if len(frame) < 4:
        raise ProtocolError("ack frame is %d bytes" % len(frame))
    (count,) = struct.unpack_from("<I", frame, 0)
    if len(frame) != 4 + count * ACK_ENTRY_SIZE:
        raise ProtocolError("ack frame declares %d entries but is %d bytes" % (count, len(frame)))
    entries = []
    for i in range(count):
        base = 4 + ACK_ENTRY_SIZE * i
        status, reason = frame[base + 16], frame[base + 17]
        if status not in STATUSES:
            raise ProtocolError("unknown event status %d" % status)
        entries.append((bytes(frame[base:base + 16]), STATUSES[status], REASONS.get(reason, "reason_%d" % reason)))
    return entries


def encode_error(code, message):
    return struct.pack("<H", code) + message.encode("utf-8")


def decode_error(frame):
    """(code name, message) of an error body frame."""
    if len(frame) < 2:
        raise ProtocolError("error frame is %d bytes" % len(frame))
    (code,) = struct.unpack_from("<H", frame, 0)
    return ERROR_CODES.get(code, "error_%d" % code), bytes(frame[2:]).decode("utf-8", "replace")


# --- sending -------------------------------------------------------------------------------

def emit(socket, events, batch_size=256, timeout=30.0, resend_after=RESEND_AFTER, log=None):
    """Sends encoded event frames on a connected DEALER socket until every batch has a reply or
    `timeout` seconds pass. Returns (counts by status, number of batches left unanswered)."""
    import zmq

    if not 1 <= batch_size <= MAX_EVENTS_PER_MESSAGE:
        raise ValueError("a batch holds 1 to %d events" % MAX_EVENTS_PER_MESSAGE)
    log = log or (lambda text: print(text, file=sys.stderr))
    pending = {}  # request id -> [frames, time of the last send or None]
    for request_id, start in enumerate(range(0, len(events), batch_size), start=1):
        pending[request_id] = [[encode_header(KIND_EVENTS, request_id)] + events[start:start + batch_size], None]
    counts = {name: 0 for name in STATUSES.values()}
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        now = time.monotonic()
        for request_id, entry in pending.items():
            frames, sent_at = entry
            if sent_at is None or now - sent_at >= resend_after:
                try:
                    socket.send_multipart(frames, flags=zmq.DONTWAIT)
                except zmq.Again:
                    break  # no agent connected (ZMQ_IMMEDIATE) or queue full: try again later
                entry[1] = now
        if not socket.poll(100):
            continue
        while True:
            try:
                reply = socket.recv_multipart(flags=zmq.DONTWAIT)
            except zmq.Again:
                break
            try:
                if len(reply) != 2:
                    raise ProtocolError("reply has %d frames, expected 2" % len(reply))
                version, kind, request_id = decode_header(reply[0])
                if version != VERSION:
                    raise ProtocolError("reply speaks protocol version %d" % version)
                if kind == KIND_ERROR:
                    code, message = decode_error(reply[1])
                    if request_id not in pending:
                        log("error %s for request %d: %s" % (code, request_id, message))
                    elif code == "shutting_down":
                        pass  # not a verdict on the events: the batch is re-sent on schedule
                    else:
                        log("error %s: %s" % (code, message))
                        counts["rejected"] += len(pending.pop(request_id)[0]) - 1
                    continue
                if kind != KIND_ACK:
                    raise ProtocolError("unexpected message kind %d" % kind)
                if request_id not in pending:
                    continue  # a late reply to a batch already answered
                batch = pending[request_id][0][1:]
                entries = decode_ack(reply[1])
                if len(entries) != len(batch):
                    raise ProtocolError("ack has %d entries for %d events" % (len(entries), len(batch)))
                for frame, (event_id, status, reason) in zip(batch, entries):
                    expected = bytes(frame[:16]) if len(frame) >= 16 else bytes(16)
                    if event_id != expected:
                        raise ProtocolError("ack entry %s does not match event %s"
                                            % (format_id(event_id), format_id(expected)))
                    counts[status] += 1
                    if status in ("rejected", "blocked"):
                        log("%s %s: %s" % (status, format_id(event_id), reason))
                del pending[request_id]
            except ProtocolError as error:
                log("ignoring a bad reply: %s" % error)
    return counts, len(pending)


def selftest():
    event = encode_event(bytes.fromhex("0190f5c27a3b7c4d8e5f0123456789ab"), 1_700_000_000_000, 1, 4242,
                         TYPES["track"], "app", "Signed Up", properties=b'{"plan":"pro"}')
    assert event.hex() == SELFTEST_EVENT_HEX, event.hex()
    decoded = decode_event(bytes.fromhex(SELFTEST_EVENT_HEX))
    assert decoded["name"] == "Signed Up" and decoded["pid"] == 4242 and decoded["properties"] == b'{"plan":"pro"}'
    assert encode_header(KIND_EVENTS, 7).hex() == SELFTEST_HEADER_HEX
    assert decode_header(bytes.fromhex(SELFTEST_HEADER_HEX)) == (1, KIND_EVENTS, 7)

    example_id = bytes.fromhex("0190f5c27a3b7c4d8e5f0123456789ab")
    ack = decode_ack(bytes.fromhex(SELFTEST_ACK_HEX))
    assert ack == [(example_id, "accepted", "none"), (bytes(16), "rejected", "malformed"),
                   (example_id, "duplicate", "none")], ack
    assert encode_ack([(example_id, 0, 0), (bytes(16), 2, 1), (example_id, 1, 0)]).hex() == SELFTEST_ACK_HEX
    assert decode_error(bytes.fromhex(SELFTEST_ERROR_HEX)) == ("unsupported_version", "v2")
    assert encode_error(2, "v2").hex() == SELFTEST_ERROR_HEX

    unicode_event = encode_event(example_id, 1, 2, 3, TYPES["screen"], "ferry·app", "Écran 🇫🇷", user_id="ユーザー",
                                 once_key="", properties='{"ß":"😀"}'.encode(), category=7, flags=FLAG_LOCAL_ONLY)
    assert decode_event(unicode_event)["name"] == "Écran 🇫🇷"
    for bad in (unicode_event[:51], unicode_event[:-1], unicode_event + b" "):
        try:
            decode_event(bad)
        except ProtocolError:
            continue
        raise AssertionError("decode_event accepted a bad frame")

    ids = UUIDv7()
    previous = b""
    for _ in range(10_000):  # one millisecond: the counter overflows and the timestamp moves on
        current = ids.next(1000)
        assert current > previous and current[6] >> 4 == 7 and current[8] >> 6 == 2
        previous = current
    assert 1000 < int.from_bytes(previous[:6], "big") <= 1004
    print("selftest ok")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime-dir", default=None,
                        help="agent runtime directory (default: $FERRY_RUNTIME_DIR; else the per-user agent's "
                             "($XDG_RUNTIME_DIR/ferry or /tmp/ferry-<uid>) if it runs; else /run/ferry if the "
                             "system agent runs)")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--name", default="python example")
    parser.add_argument("--type", default="track", choices=sorted(TYPES))
    parser.add_argument("--source", default="ferry_emit.py")
    parser.add_argument("--user-id", default="")
    parser.add_argument("--props", default="{}", help="JSON object of properties")
    parser.add_argument("--batch", type=int, default=256, help="events per message (1-4096)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for every ack")
    parser.add_argument("--selftest", action="store_true",
                        help="check the codecs against the bytes in docs/PROTOCOL.md; needs no agent")
    args = parser.parse_args(argv)
    if args.selftest:
        selftest()
        return 0
    if not 1 <= args.batch <= MAX_EVENTS_PER_MESSAGE:
        parser.error("--batch must be 1 to %d" % MAX_EVENTS_PER_MESSAGE)
    if args.count < 0:
        parser.error("--count must not be negative")
    try:
        props = json.loads(args.props)
    except ValueError as error:
        parser.error("--props is not JSON: %s" % error)
    if not isinstance(props, dict):
        parser.error("--props must be a JSON object")
    properties = json.dumps(props, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    import zmq  # only needed to talk to the agent

    ids = UUIDv7()
    pid = os.getpid()
    events = [encode_event(ids.next(), int(time.time() * 1000), seq, pid, TYPES[args.type],
                           args.source, args.name, user_id=args.user_id, properties=properties)
              for seq in range(1, args.count + 1)]  # per-client sequence numbers start at 1

    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.IMMEDIATE, 1)  # no agent yet: sends fail, the events stay with us
    socket.connect(ingest_endpoint(args.runtime_dir or runtime_dir()))
    try:
        counts, unanswered = emit(socket, events, batch_size=args.batch, timeout=args.timeout)
    finally:
        socket.close()
        context.term()

    line = "accepted=%d duplicate=%d rejected=%d" % (counts["accepted"], counts["duplicate"], counts["rejected"])
    if counts["blocked"] or counts["suppressed"]:
        line += " blocked=%d suppressed=%d" % (counts["blocked"], counts["suppressed"])
    print(line)
    if unanswered:
        print("timed out with %d batches unacknowledged" % unanswered, file=sys.stderr)
        return 2
    return 1 if counts["rejected"] or counts["blocked"] else 0


if __name__ == "__main__":
    sys.exit(main())
