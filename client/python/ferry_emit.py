#!/usr/bin/env python3
"""Send events to ferryd using nothing but docs/PROTOCOL.md and pyzmq (Debian: python3-zmq).

    ferry_emit.py --count 100 --name "Signed Up" --props '{"plan": "pro"}'

Prints `accepted=N duplicate=N rejected=N`; exits 1 if anything was rejected, 2 on timeout.
Run the agent first, or start this first: unacked batches are re-sent until the timeout.
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
STATUSES = {0: "accepted", 1: "duplicate", 2: "rejected", 3: "blocked", 4: "suppressed"}
REASONS = {0: "none", 1: "malformed", 2: "too_large", 3: "full", 4: "storage", 5: "shutting_down", 6: "invalid_utf8"}
ERROR_CODES = {1: "malformed_message", 2: "unsupported_version", 3: "unknown_kind", 4: "message_too_large", 5: "shutting_down"}
SELFTEST_HEX = (
    "0190f5c27a3b7c4d8e5f0123456789ab0068e5cf8b0100000100000000000000921000000100000003000900000000000e000000"
    "6170705369676e65642055707b22706c616e223a2270726f227d"
)


class UUIDv7:
    """Time-ordered ids, increasing within a millisecond (RFC 9562, method 1)."""

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
        low = (secrets.randbits(62)) | 0x8000_0000_0000_0000
        return struct.pack(">QQ", high, low)


def runtime_dir():
    if os.environ.get("FERRY_RUNTIME_DIR"):
        return os.environ["FERRY_RUNTIME_DIR"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.environ["XDG_RUNTIME_DIR"] + "/ferry"
    return "/tmp/ferry-%d" % os.getuid()


def encode_header(kind, request_id, version=VERSION):
    return struct.pack("<BBHI", version, kind, 0, request_id)


def decode_header(frame):
    version, kind, _flags, request_id = struct.unpack("<BBHI", frame)
    return version, kind, request_id


def encode_event(event_id, timestamp, sequence, pid, type_code, source, name,
                 user_id="", once_key="", properties=b"", category=0, flags=0):
    src, nm, usr, once = (s.encode() for s in (source, name, user_id, once_key))
    fixed = event_id + struct.pack("<QQIBBHHHHHI", timestamp, sequence, pid, type_code, category, flags,
                                   len(src), len(nm), len(usr), len(once), len(properties))
    return fixed + src + nm + usr + once + properties


def decode_ack(frame):
    (count,) = struct.unpack_from("<I", frame, 0)
    entries = []
    for i in range(count):
        base = 4 + 18 * i
        event_id = frame[base:base + 16]
        status, reason = frame[base + 16], frame[base + 17]
        entries.append((event_id, STATUSES.get(status, str(status)), REASONS.get(reason, str(reason))))
    return entries


def decode_error(frame):
    (code,) = struct.unpack_from("<H", frame, 0)
    return ERROR_CODES.get(code, str(code)), frame[2:].decode("utf-8", "replace")


def selftest():
    event = encode_event(bytes.fromhex("0190f5c27a3b7c4d8e5f0123456789ab"), 1_700_000_000_000, 1, 4242,
                         TYPES["track"], "app", "Signed Up", properties=b'{"plan":"pro"}')
    assert event.hex() == SELFTEST_HEX, event.hex()
    assert encode_header(KIND_EVENTS, 7).hex() == "0101000007000000"
    ids = UUIDv7()
    a, b = ids.next(1000), ids.next(1000)
    assert a < b and a[6] >> 4 == 7 and a[8] >> 6 == 2
    print("selftest ok")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime-dir", default=runtime_dir())
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--name", default="python example")
    parser.add_argument("--type", default="track", choices=sorted(TYPES))
    parser.add_argument("--source", default="ferry_emit.py")
    parser.add_argument("--props", default="{}", help="JSON object of properties")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--selftest", action="store_true", help="check the encoder against the documented bytes")
    args = parser.parse_args()
    if args.selftest:
        selftest()
        return 0

    import zmq  # only needed to talk to the agent

    properties = json.dumps(json.loads(args.props), separators=(",", ":")).encode()
    if not properties.startswith(b"{"):
        parser.error("--props must be a JSON object")
    ids = UUIDv7()
    events = [encode_event(ids.next(), int(time.time() * 1000), seq, os.getpid(), TYPES[args.type],
                           args.source, args.name, properties=properties)
              for seq in range(1, args.count + 1)]

    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.IMMEDIATE, 1)  # no agent yet: fail the send, keep events ourselves
    socket.connect("ipc://%s/ingest" % args.runtime_dir)

    unacked = {}  # request id -> (frames, last send time or None)
    for index, start in enumerate(range(0, len(events), args.batch), start=1):
        unacked[index] = ([encode_header(KIND_EVENTS, index)] + events[start:start + args.batch], None)
    counts = {"accepted": 0, "duplicate": 0, "rejected": 0}
    deadline = time.monotonic() + args.timeout
    try:
        while unacked and time.monotonic() < deadline:
            now = time.monotonic()
            for request_id, (frames, sent_at) in list(unacked.items()):
                if sent_at is None or now - sent_at >= 2.0:  # re-send after 2 s without an ack
                    try:
                        socket.send_multipart(frames, flags=zmq.DONTWAIT)
                        unacked[request_id] = (frames, now)
                    except zmq.Again:
                        break  # no agent connected yet
            if not socket.poll(100):
                continue
            while True:
                try:
                    header, body = socket.recv_multipart(flags=zmq.DONTWAIT)
                except zmq.Again:
                    break
                _version, kind, request_id = decode_header(header)
                if request_id not in unacked:
                    continue  # late reply to a batch already settled
                if kind == KIND_ACK:
                    for _event_id, status, reason in decode_ack(body):
                        key = status if status in counts else "rejected"
                        counts[key] += 1
                        if key == "rejected":
                            print("rejected: %s" % reason, file=sys.stderr)
                    del unacked[request_id]
                elif kind == KIND_ERROR:
                    code, message = decode_error(body)
                    if code == "shutting_down":
                        continue  # re-sent to the next agent
                    print("error %s: %s" % (code, message), file=sys.stderr)
                    counts["rejected"] += len(unacked.pop(request_id)[0]) - 1
    finally:
        socket.close()
        context.term()

    print("accepted=%d duplicate=%d rejected=%d" % (counts["accepted"], counts["duplicate"], counts["rejected"]))
    if unacked:
        print("timed out with %d batches unacknowledged" % len(unacked), file=sys.stderr)
        return 2
    return 1 if counts["rejected"] else 0


if __name__ == "__main__":
    sys.exit(main())
