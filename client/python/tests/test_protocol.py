"""The codecs of ferry.protocol against the bytes of docs/PROTOCOL.md; no agent needed."""
from __future__ import annotations

import json
import struct

import pytest

from ferry import protocol as wire

EXAMPLE_ID = bytes.fromhex("0190f5c27a3b7c4d8e5f0123456789ab")
EXAMPLE_SESSION = bytes.fromhex("7f3c2a1e9b8d4c6fa5e4d3c2b1a09f8e")
# docs/PROTOCOL.md, "Worked example" (the Swift tests check the same strings).
V1_EVENT_HEX = ("0190f5c27a3b7c4d8e5f0123456789ab0068e5cf8b0100000100000000000000921000000100000003000900000000000e000000"
                "6170705369676e65642055707b22706c616e223a2270726f227d")
V2_EVENT_HEX = ("0190f5c27a3b7c4d8e5f0123456789ab0068e5cf8b0100000100000000000000921000000100008003000900000000000e000000"
                "6170705369676e65642055707b22706c616e223a2270726f227d"
                "010010000000" "7f3c2a1e9b8d4c6fa5e4d3c2b1a09f8e")
ACK_HEX = ("03000000" "0190f5c27a3b7c4d8e5f0123456789ab0000" "000000000000000000000000000000000201"
           "0190f5c27a3b7c4d8e5f0123456789ab0100")


def example(**fields):
    base = dict(event_id=EXAMPLE_ID, timestamp=1_700_000_000_000, sequence=1, pid=4242, type="track", source="app",
                name="Signed Up", properties=b'{"plan":"pro"}')
    base.update(fields)
    return wire.encode_event(**base)


def test_worked_example_version_1():
    assert example().hex() == V1_EVENT_HEX
    assert wire.encode_header(wire.KIND_EVENTS, 7, version=1).hex() == "0101000007000000"


def test_worked_example_version_2_with_session():
    assert example(session=EXAMPLE_SESSION).hex() == V2_EVENT_HEX
    assert wire.encode_header(wire.KIND_EVENTS, 7).hex() == "0201000007000000"
    event = wire.decode_event(bytes.fromhex(V2_EVENT_HEX))
    assert (event.session, event.name, event.pid, event.properties) == (EXAMPLE_SESSION, "Signed Up", 4242,
                                                                        b'{"plan":"pro"}')
    assert wire.strip_extensions(bytes.fromhex(V2_EVENT_HEX)).hex() == V1_EVENT_HEX


def test_ack_and_error_examples():
    assert wire.decode_ack(bytes.fromhex(ACK_HEX)) == [
        (EXAMPLE_ID, "accepted", "none"), (bytes(16), "rejected", "malformed"), (EXAMPLE_ID, "duplicate", "none")]
    assert wire.encode_ack([(EXAMPLE_ID, 0, 0), (bytes(16), 2, 1), (EXAMPLE_ID, 1, 0)]).hex() == ACK_HEX
    assert wire.decode_error(bytes.fromhex("02007632")) == (2, "unsupported_version", "v2")
    assert wire.encode_error(2, "v2").hex() == "02007632"


def test_event_model_extensions_in_tag_order():
    frame = example(session=EXAMPLE_SESSION, context=b'{"app":{"v":"1"}}', previous_id="p", group_id="g",
                    anonymous_id="a-1")
    event = wire.decode_event(frame)
    assert (event.anonymous_id, event.group_id, event.previous_id, event.context) == (
        "a-1", "g", "p", b'{"app":{"v":"1"}}')
    block = frame[len(bytes.fromhex(V1_EVENT_HEX)):]
    tags = []
    while block:
        tag, length = struct.unpack_from("<HI", block)
        tags.append(tag)
        block = block[6 + length:]
    assert tags == [1, 2, 3, 4, 5]


def test_empty_event_model_fields_are_not_sent():
    assert example(session=EXAMPLE_SESSION, anonymous_id="", context=b"").hex() == V2_EVENT_HEX


def test_unknown_extensions_survive_and_critical_ones_are_refused():
    base = bytearray(example())
    base[38:40] = struct.pack("<H", wire.FLAG_EXTENDED)
    ordinary = bytes(base) + struct.pack("<HI", 0x0042, 2) + b"hi"
    assert wire.decode_event(ordinary).extensions == {0x42: b"hi"}
    critical = bytes(base) + struct.pack("<HI", 0x8042, 0)
    with pytest.raises(wire.ProtocolError) as error:
        wire.decode_event(critical)
    assert error.value.reason == "unsupported_field"


@pytest.mark.parametrize("damage, reason", [
    ("short", "malformed"), ("long", "malformed"), ("repeated tag", "malformed"), ("overrun", "malformed"),
    ("bad session", "malformed"), ("v1 with block", "malformed"), ("unknown type", "malformed"),
    ("bad utf8", "invalid_utf8"), ("long anonymous id", "invalid_field"), ("context not an object", "invalid_field"),
    ("context not utf8", "invalid_utf8"),
])
def test_malformed_frames_are_refused_like_the_agent(damage, reason):
    frame = example(session=EXAMPLE_SESSION)
    version = 2
    if damage == "short":
        frame = frame[:51]
    elif damage == "long":
        frame = example() + b" "
    elif damage == "repeated tag":
        frame = frame + frame[-22:]
    elif damage == "overrun":
        frame = frame[:-1]
    elif damage == "bad session":
        frame = frame[:-22] + struct.pack("<HI", 1, 15) + bytes(15)
    elif damage == "v1 with block":
        version = 1
    elif damage == "unknown type":
        frame = frame[:36] + b"\x09" + frame[37:]
    elif damage == "bad utf8":
        frame = example(name="Signed Up")
        frame = frame.replace(b"Signed", b"Sign\xff\xfe")
    elif damage == "long anonymous id":
        frame += struct.pack("<HI", 2, 1025) + b"a" * 1025
    elif damage == "context not an object":
        frame += struct.pack("<HI", 5, 2) + b"[]"
    elif damage == "context not utf8":
        frame += struct.pack("<HI", 5, 2) + b"\xff{"
    with pytest.raises(wire.ProtocolError) as error:
        wire.decode_event(frame, version)
    assert error.value.reason == reason


def test_uuidv7_is_strictly_increasing_with_the_counter():
    ids = wire.UUIDv7()
    previous = b""
    for _ in range(10_000):  # one millisecond: the counter overflows and the millisecond moves on
        current = ids.next(1000)
        assert current > previous and current[6] >> 4 == 7 and current[8] >> 6 == 2
        previous = current
    assert 1000 < int.from_bytes(previous[:6], "big") <= 1004
    assert ids.next(5) > previous  # the clock stepping back never makes an id go down


def test_json_matches_the_swift_encoding():
    assert wire.encode_json_object({"b": 1, "a": [True, None, 2.5, "x\n\u0001\"\\/é"]}) == \
        '{"a":[true,null,2.5,"x\\n\\u0001\\"\\\\/é"],"b":1}'.encode()
    assert wire.encode_control_request("set_consent", {"category": "all", "status": "denied", "actor": None}) == \
        b'{"category":"all","op":"set_consent","status":"denied"}'
    assert json.loads(wire.encode_json_object({"k": "\b\f"})) == {"k": "\b\f"}


@pytest.mark.parametrize("value, error", [
    ({"x": {1, 2}}, TypeError), ({"x": float("nan")}, ValueError), ({1: "x"}, TypeError), (["x"], TypeError),
    ({"x": "\udc80"}, ValueError),
])
def test_json_refuses_what_json_cannot_hold(value, error):
    with pytest.raises(error):
        wire.encode_json_object(value)


def test_field_limits():
    with pytest.raises(ValueError, match="anonymous_id"):
        example(anonymous_id="x" * 1025)
    example(anonymous_id="x" * 1024)
    with pytest.raises(ValueError, match="name"):
        example(name="x" * 65536)
    with pytest.raises(ValueError):
        example(type="click")
    with pytest.raises(ValueError):
        wire.category_code("sports")
    assert wire.category_code("advertising") == 2 and wire.category_code(17) == 17


def test_worked_example_of_the_event_model_fields():
    """docs/PROTOCOL.md, "Worked example: event-model fields" (the Swift ExtensionBlockTests check it too)."""
    expected = ("0190f5c27a3b7c4d8e5f0123456789ab0068e5cf8b010000020000000000000092100000" "04000080"
                "0300000000000000" "00000000" "617070"
                "010010000000" "7f3c2a1e9b8d4c6fa5e4d3c2b1a09f8e"
                "020006000000" "616e6f6e2d37"
                "030004000000" "61636d65"
                "050012000000" "7b226c6f63616c65223a2266722d4652227d")
    frame = example(sequence=2, type="group", name="", properties=b"", session=EXAMPLE_SESSION,
                    anonymous_id="anon-7", group_id="acme", context=wire.encode_json_object({"locale": "fr-FR"}))
    assert frame.hex() == expected
    event = wire.decode_event(bytes.fromhex(expected))
    assert (event.type, event.anonymous_id, event.group_id, event.previous_id, event.context) == (
        "group", "anon-7", "acme", None, b'{"locale":"fr-FR"}')
