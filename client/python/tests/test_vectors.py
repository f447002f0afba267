"""The shared protocol vectors (Tests/Vectors/protocol-vectors.json, generated from the Swift
codecs) against this package's codecs: every vector is checked, and a kind of vector this file
does not know fails, so the Swift and Python sides cannot drift apart."""
from __future__ import annotations

import json
import uuid
from typing import Any, Callable, Dict

import pytest

import ferry
from ferry import protocol as wire
from ferry.control import parse_reply

from conftest import REPO

VECTORS = REPO / "Tests" / "Vectors" / "protocol-vectors.json"


def load() -> Dict[str, Any]:
    if not VECTORS.exists():
        pytest.skip("%s is not generated yet" % VECTORS.relative_to(REPO))
    return json.loads(VECTORS.read_text())


def unhex(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def event_id(text: str) -> bytes:
    return uuid.UUID(text).bytes if "-" in text else unhex(text)


def check_event_message(vector: Dict[str, Any]) -> None:
    frames = [unhex(frame) for frame in vector["frames"]]
    header = wire.decode_header(frames[0])
    assert (header.version, header.kind, header.request_id) == (
        vector["version"], wire.KIND_EVENTS, vector["request_id"])
    assert wire.encode_header(wire.KIND_EVENTS, vector["request_id"], version=vector["version"]) == frames[0]
    assert len(vector["events"]) == len(frames) - 1
    for fields, frame in zip(vector["events"], frames[1:]):
        event = wire.decode_event(frame, header.version)
        expected = wire.WireEvent(
            id=event_id(fields["id"]), timestamp=fields["timestamp"], sequence=fields["sequence"], pid=fields["pid"],
            type=fields["type"], category=fields.get("category", 0), flags=fields.get("flags", 0),
            source=fields["source"], name=fields["name"], user_id=fields.get("user_id", ""),
            once_key=fields.get("once_key", ""), properties=fields.get("properties", "").encode(),
            session=event_id(fields["session"]) if fields.get("session") else None,
            anonymous_id=fields.get("anonymous_id") or None, group_id=fields.get("group_id") or None,
            previous_id=fields.get("previous_id") or None,
            context=fields["context"].encode() if fields.get("context") else None)
        assert expected.encode() == frame
        event.flags &= ~wire.FLAG_EXTENDED
        expected.flags &= ~wire.FLAG_EXTENDED
        assert event == expected


def check_ack(vector: Dict[str, Any]) -> None:
    body = unhex(vector["body"])
    entries = wire.decode_ack(body)
    assert [(e.id, e.status, e.reason) for e in entries] == [
        (event_id(e["id"]), e["status"], e["reason"]) for e in vector["entries"]]
    codes = {name: code for code, name in wire.STATUSES.items()}
    reasons = {name: code for code, name in wire.REASONS.items()}
    assert wire.encode_ack([(event_id(e["id"]), codes[e["status"]], reasons[e["reason"]])
                            for e in vector["entries"]]) == body


def check_error_reply(vector: Dict[str, Any]) -> None:
    body = unhex(vector["body"])
    assert tuple(wire.decode_error(body)) == (vector["code"], vector["code_name"], vector["message"])
    assert wire.encode_error(vector["code"], vector["message"]) == body


def check_control_request(vector: Dict[str, Any]) -> None:
    request = dict(vector["request"])
    op = request.pop("op")
    assert wire.encode_control_request(op, request) == vector["json"].encode()


def check_control_reply(vector: Dict[str, Any]) -> None:
    data = vector["json"].encode()
    if vector["ok"]:
        reply = parse_reply(data)
        if "consent" in reply:
            ferry.ConsentState.from_json(reply["consent"])
        return
    with pytest.raises(ferry.FerryError) as error:
        parse_reply(data)
    assert error.value.message == vector["error"]
    if vector.get("valid"):
        assert error.value.valid == vector["valid"]


CHECKS: Dict[str, Callable[[Dict[str, Any]], None]] = {
    "event_message": check_event_message,
    "ack": check_ack,
    "error_reply": check_error_reply,
    "control_request": check_control_request,
    "control_reply": check_control_reply,
}


def test_every_vector_matches_the_python_codecs():
    document = load()
    assert document["format"] == 1
    kinds = {vector["kind"] for vector in document["vectors"]}
    unknown = kinds - set(CHECKS)
    assert not unknown, "vector kinds this test does not know: %s (teach it)" % sorted(unknown)
    assert set(CHECKS) <= kinds, "the vectors lack kinds: %s" % sorted(set(CHECKS) - kinds)
    for vector in document["vectors"]:
        try:
            CHECKS[vector["kind"]](vector)
        except AssertionError as error:
            raise AssertionError("vector %s %r: %s" % (vector["kind"], vector["name"], error)) from None
