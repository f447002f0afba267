"""The shared protocol vectors (Tests/Vectors/protocol-vectors.json, generated from the Swift
codecs; schema in docs/PROTOCOL.md, "Test vectors") against this package's codecs. Every vector
is checked both ways where the package does both: event messages, acks and error replies are
decoded and encoded again byte for byte, control requests are encoded to the exact JSON bytes,
control replies are read as the `Control` method of their op returns them. A kind of vector this
file does not know fails, so the Swift and Python sides cannot drift apart."""
from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any, Callable, Dict, List, Optional

import pytest

import ferry
from ferry import protocol as wire
from ferry.control import _READERS, decode_reply

from conftest import REPO

VECTORS = REPO / "Tests" / "Vectors" / "protocol-vectors.json"
DOCUMENT: Dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))
STATUS_CODES = {name: code for code, name in wire.STATUSES.items()}
REASON_CODES = {name: code for code, name in wire.REASONS.items()}
#: Every op a `Control` method sends: each must have a request vector and an `ok` reply vector.
CONTROL_OPS = set(_READERS) | {"status", "whoami", "deadletter_replay", "quarantine_replay", "quarantine_drop", "reload", "recipients"}


def frames(vector: Dict[str, Any]) -> List[bytes]:
    return [bytes.fromhex(frame) for frame in vector["frames_hex"]]


def uuid_bytes(text: str) -> Optional[bytes]:
    return uuid.UUID(text).bytes if text else None


def check_header(vector: Dict[str, Any], frame: bytes, kind: int) -> None:
    assert wire.decode_header(frame) == wire.Header(vector["version"], kind, 0, vector["request_id"])
    assert wire.encode_header(kind, vector["request_id"], version=vector["version"]) == frame


def check_event_message(vector: Dict[str, Any]) -> None:
    header, *events = frames(vector)
    check_header(vector, header, wire.KIND_EVENTS)
    assert [event["frame_hex"] for event in vector["events"]] == vector["frames_hex"][1:]
    for fields, frame in zip(vector["events"], events):
        assert wire.EVENT_TYPES[fields["type"]] == fields["type_code"]
        assert not fields["flags"] & wire.FLAG_EXTENDED
        expected = wire.WireEvent(
            id=uuid.UUID(fields["id"]).bytes, timestamp=fields["timestamp"], sequence=fields["sequence"],
            pid=fields["pid"], type=fields["type"], category=fields["category"], flags=fields["flags"],
            source=fields["source"], name=fields["name"], user_id=fields["user_id"], once_key=fields["once_key"],
            properties=fields["properties"].encode("utf-8"), session=uuid_bytes(fields["session"]),
            anonymous_id=fields["anonymous_id"] or None, group_id=fields["group_id"] or None,
            previous_id=fields["previous_id"] or None, context=fields["context"].encode("utf-8") or None,
            extensions={entry["tag"]: bytes.fromhex(entry["value_hex"]) for entry in fields["extensions"]})
        assert expected.local_only == fields["local_only"]
        assert expected.encode() == frame, "encoded\n  %s\nexpected\n  %s" % (expected.encode().hex(), frame.hex())
        decoded = wire.decode_event(frame, vector["version"])
        assert bool(decoded.flags & wire.FLAG_EXTENDED) == bool(expected.extension_entries())
        decoded.flags &= ~wire.FLAG_EXTENDED
        assert decoded == expected
        if vector["version"] >= 2:
            assert wire.decode_event(wire.strip_extensions(frame), 1).session is None


def check_ack(vector: Dict[str, Any]) -> None:
    header, body = frames(vector)
    check_header(vector, header, wire.KIND_ACK)
    for entry in vector["entries"]:
        assert wire.STATUSES[entry["status_code"]] == entry["status"]
        assert wire.REASONS[entry["reason_code"]] == entry["reason"]
    assert wire.decode_ack(body) == [wire.AckEntry(uuid.UUID(e["id"]).bytes, e["status"], e["reason"])
                                     for e in vector["entries"]]
    assert wire.encode_ack([(uuid.UUID(e["id"]).bytes, e["status_code"], e["reason_code"])
                            for e in vector["entries"]]) == body


def check_error_reply(vector: Dict[str, Any]) -> None:
    header, body = frames(vector)
    check_header(vector, header, wire.KIND_ERROR)
    assert wire.ERROR_CODES[vector["code"]] == vector["code_name"]
    assert wire.decode_error(body) == wire.ErrorReply(vector["code"], vector["code_name"], vector["message"])
    assert wire.encode_error(vector["code"], vector["message"]) == body


def check_control_request(vector: Dict[str, Any]) -> None:
    fields = json.loads(vector["json"])
    assert fields.pop("op") == vector["op"]
    assert wire.encode_control_request(vector["op"], fields) == vector["json"].encode("utf-8")


def same_fields(value: Any, obj: Dict[str, Any], label: str) -> None:
    """`value` (a dataclass) holds exactly the fields of `obj`, with the same values."""
    fields = {f.name: f for f in dataclasses.fields(value) if f.name != "raw"}
    # A field the wire leaves out when it holds its default (purged.quarantined, absent when 0)
    # may be missing from `obj` as long as the Python side holds that default.
    omitted = {name for name, f in fields.items()
               if name not in obj and f.default is not dataclasses.MISSING and getattr(value, name) == f.default}
    names = set(fields) - omitted
    assert names == set(obj), "%s: fields the Python side lacks %s, or has in excess %s" % (
        label, sorted(set(obj) - names), sorted(names - set(obj)))
    for name in names:
        field = getattr(value, name)
        if dataclasses.is_dataclass(field):
            same_fields(field, obj[name], "%s.%s" % (label, name))
        else:
            assert field == obj[name], "%s.%s" % (label, name)


def check_consent_update(update: ferry.ConsentUpdate, reply: Dict[str, Any]) -> None:
    same_fields(update.consent, reply["consent"], "consent")
    assert update.consent.raw == reply["consent"]
    if "purged" in reply:
        assert update.purged is not None
        same_fields(update.purged, reply["purged"], "purged")
    else:
        assert update.purged is None


def check_control_reply(vector: Dict[str, Any]) -> None:
    op, data = vector["op"], vector["json"].encode("utf-8")
    reply = json.loads(data)
    assert reply["ok"] is vector["ok"]
    if not vector["ok"]:
        denied = reply.get("code") == "access_denied"
        with pytest.raises(ferry.AccessDenied if denied else ferry.Refused) as raised:
            decode_reply(op, data)
        error = raised.value
        assert error.message == reply["error"]
        if isinstance(error, ferry.Refused):
            assert error.valid == reply.get("valid", []) and error.reply == reply
        return
    result = decode_reply(op, data)
    if op in ("consent_state", "set_tracking", "set_persistence", "enable_features", "start"):
        assert isinstance(result, ferry.ConsentState)
        check_consent_update(ferry.ConsentUpdate(result), {"consent": reply["consent"]})
    elif op in ("set_consent", "set_gdpr", "disable_features"):
        check_consent_update(result, reply)
    elif op in ("purge", "forget"):
        assert isinstance(result, ferry.PurgeReport)
        same_fields(result, reply["purged"], "purged")
        check_consent_update(_READERS["set_consent"](reply), reply)
    elif op == "consent_log":
        assert (result.verified, result.problem) == (reply["verified"], reply.get("problem"))
        assert len(result.entries) == len(reply["entries"])
        for entry, obj in zip(result.entries, reply["entries"]):
            same_fields(entry, obj, "consent_log entry")
    elif op == "metrics":
        assert result == reply["text"]
    elif op == "forget_status":
        assert result == reply["erasures"]
        assert all("user_id" not in request for request in result)
    elif op in ("status", "whoami", "deadletter_replay", "quarantine_replay", "quarantine_drop", "reload", "recipients"):
        assert result == reply
        if "consent" in reply:
            same_fields(ferry.ConsentState.from_json(reply["consent"]), reply["consent"], "status consent")
    else:
        raise AssertionError("a reply to op %r, which this package has no method for" % op)


CHECKS: Dict[str, Callable[[Dict[str, Any]], None]] = {
    "event_message": check_event_message,
    "ack": check_ack,
    "error_reply": check_error_reply,
    "control_request": check_control_request,
    "control_reply": check_control_reply,
}


def test_the_document_is_format_1_with_unique_names_and_every_kind():
    assert DOCUMENT["format"] == 1
    names = [vector["name"] for vector in DOCUMENT["vectors"]]
    assert len(names) == len(set(names))
    kinds = {vector["kind"] for vector in DOCUMENT["vectors"]}
    assert kinds == set(CHECKS), "vector kinds this test does not know: %s; kinds missing: %s" % (
        sorted(kinds - set(CHECKS)), sorted(set(CHECKS) - kinds))


def test_the_vectors_cover_every_type_status_reason_error_and_op():
    vectors = DOCUMENT["vectors"]
    types = {e["type"] for v in vectors if v["kind"] == "event_message" for e in v["events"]}
    assert types == set(wire.EVENT_TYPES)
    acked = {(e["status"], e["reason"]) for v in vectors if v["kind"] == "ack" for e in v["entries"]}
    assert {s for s, _ in acked} == set(wire.STATUSES.values())
    assert {r for _, r in acked} == set(wire.REASONS.values())
    assert {v["code"] for v in vectors if v["kind"] == "error_reply"} == set(wire.ERROR_CODES)
    assert {v["op"] for v in vectors if v["kind"] == "control_request"} == CONTROL_OPS
    assert {v["op"] for v in vectors if v["kind"] == "control_reply" and v["ok"]} == CONTROL_OPS


@pytest.mark.parametrize("vector", DOCUMENT["vectors"], ids=lambda v: "%s:%s" % (v.get("kind"), v.get("name")))
def test_vector(vector):
    check = CHECKS.get(vector["kind"])
    if check is None:
        pytest.fail("vector %r has kind %r, which this test does not know (teach it)"
                    % (vector["name"], vector["kind"]))
    check(vector)
