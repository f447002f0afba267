#!/usr/bin/env python3
"""Send events to ferryd from the command line: a thin example over the `ferry` package's codecs.

    ferry_emit.py --count 100 --name "Signed Up" --props '{"plan": "pro"}'

Runs from a checkout without installing anything but pyzmq (Debian: python3-zmq, for
/usr/bin/python3): it imports `ferry` from the directory next to it. For applications, install
the package instead (`pip install ./client/python`, then `ferry.Client`).

Prints `accepted=N duplicate=N rejected=N` (plus `blocked=N suppressed=N` when the agent answers
those); exits 1 if anything was rejected or blocked, 2 on timeout. The agent may start after this:
unacknowledged batches are re-sent every 2 s until the timeout. It speaks protocol version 1 (no
session), one message per `--batch` events, which is what scripts/callgrind-ingest measures.

Importable names (the codecs come from `ferry.protocol`): encode_header/decode_header,
encode_event/decode_event, decode_ack/encode_ack, decode_error/encode_error, UUIDv7, format_id,
runtime_dir, ingest_endpoint, emit.
"""
import argparse
import json
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ferry import protocol as _wire  # noqa: E402
from ferry.paths import ingest_endpoint, runtime_dir  # noqa: E402,F401
from ferry.protocol import (ProtocolError, UUIDv7, decode_ack, encode_ack, encode_error,  # noqa: E402,F401
                            format_id)

VERSION = 1
KIND_EVENTS, KIND_ACK, KIND_ERROR = _wire.KIND_EVENTS, _wire.KIND_ACK, _wire.KIND_ERROR
TYPES = dict(_wire.EVENT_TYPES)
TYPE_NAMES = dict(_wire.EVENT_TYPE_NAMES)
FLAG_LOCAL_ONLY = _wire.FLAG_LOCAL_ONLY
STATUSES = dict(_wire.STATUSES)
MAX_EVENTS_PER_MESSAGE = _wire.MAX_EVENTS_PER_MESSAGE
RESEND_AFTER = 2.0  # seconds without a reply before a batch is sent again (as the Swift client)

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


def encode_header(kind, request_id, version=VERSION, flags=0):
    """The 8-byte header frame (version 1 unless told)."""
    return _wire.encode_header(kind, request_id, version=version, flags=flags)


def decode_header(frame):
    """(version, kind, request_id) of an 8-byte header frame."""
    header = _wire.decode_header(frame)
    return header.version, header.kind, header.request_id


def encode_event(event_id, timestamp, sequence, pid, type_code, source, name,
                 user_id="", once_key="", properties=b"", category=0, flags=0):
    """One event frame without extensions. Flags are kept as given (a caller may set bit 15 and
    append its own extension block)."""
    frame = _wire.encode_event(event_id, timestamp, sequence, pid, type_code, source, name, user_id=user_id,
                               once_key=once_key, properties=properties, category=category,
                               flags=flags & ~_wire.FLAG_EXTENDED)
    return frame[:38] + struct.pack("<H", flags) + frame[40:]


def decode_event(frame):
    """A dict of the event's fields; raises ProtocolError as the agent would reject the frame."""
    event = _wire.decode_event(frame, version=1)
    return {"id": event.id, "timestamp": event.timestamp, "sequence": event.sequence, "pid": event.pid,
            "type": event.type, "category": event.category, "flags": event.flags, "source": event.source,
            "name": event.name, "user_id": event.user_id, "once_key": event.once_key,
            "properties": event.properties}


def decode_error(frame):
    """(code name, message) of an error body frame."""
    reply = _wire.decode_error(frame)
    return reply.name, reply.message


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
    parser.add_argument("--resend-after", type=float, default=RESEND_AFTER,
                        help="seconds without a reply before a batch is sent again (default %(default)s)")
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
        counts, unanswered = emit(socket, events, batch_size=args.batch, timeout=args.timeout,
                                   resend_after=args.resend_after)
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
