#!/usr/bin/env python3
"""Writes the seed corpus for the wire-decoder fuzzer (Fuzz/corpus/): valid frames and near-valid
variants (truncated, extended, wrong lengths, unknown codes, bad UTF-8), each prefixed with the
selector byte FrameChecks uses (0 header, 1 event, 2 ack, 3 error reply, 4 event id text, 5 JSON).

File names say what a file is: `valid-*` must decode (the replay test checks it), `bad-*` must be
refused. Re-run after changing the wire format: python3 Fuzz/make_corpus.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
HEADER, EVENT, ACK, ERROR, IDTEXT, JSON = 0, 1, 2, 3, 4, 5

ID = bytes.fromhex("0190f1e2d3c47a5b8c9d0e1f2a3b4c5d")


def header(version=1, kind=1, flags=0, request=7):
    return struct.pack("<BBHI", version, kind, flags, request)


def event(source=b"app", name=b"Signed Up", user=b"", once=b"", props=b'{"plan":"pro"}',
          type_=1, category=0, flags=0, seq=1, lengths=None):
    lens = lengths or (len(source), len(name), len(user), len(once), len(props))
    fixed = ID + struct.pack("<QQIBBHHHHHI", 1_700_000_000_000, seq, 4242, type_, category, flags, *lens)
    return fixed + source + name + user + once + props


def ack(entries):
    out = struct.pack("<I", len(entries))
    for status, reason in entries:
        out += ID + bytes([status, reason])
    return out


def error(code, message):
    return struct.pack("<H", code) + message


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        os.remove(os.path.join(OUT, name))
    files = {}

    # Message headers.
    for kind in (1, 2, 3):
        files[f"valid-header-kind{kind}"] = (HEADER, header(kind=kind, request=0xDEADBEEF, flags=0x0102))
    files["bad-header-empty"] = (HEADER, b"")
    files["valid-header-version2"] = (HEADER, header(version=2))
    files["bad-header-version3"] = (HEADER, header(version=3))
    files["bad-header-short"] = (HEADER, header()[:5])
    files["bad-header-long"] = (HEADER, header() + b"\0")
    files["bad-header-kind0"] = (HEADER, header(kind=0))
    files["bad-header-kind255"] = (HEADER, header(kind=255))

    # Events.
    files["valid-event-track"] = (EVENT, event())
    files["valid-event-identify-empty-name"] = (EVENT, event(name=b"", user=b"u-1", type_=3, props=b""))
    files["valid-event-all-fields"] = (EVENT, event(user=b"user-42", once=b"order-9", category=3, flags=1,
                                                    props=b'{"a":[1,2,{"b":null}],"c":"\\u00e9"}'))
    files["valid-event-utf8"] = (EVENT, event(source="caf\u00e9".encode(), name="\u65e5\u672c \U0001F680".encode()))
    for type_ in range(1, 7):
        files[f"valid-event-type{type_}"] = (EVENT, event(type_=type_))
    files["valid-event-properties-not-json"] = (EVENT, event(props=b"\x00 not json \xc3\xa9"))
    files["bad-event-invalid-utf8-properties"] = (EVENT, event(props=b'{"a":"\xff\xfe"}'))
    # Protocol 2: the extension block (flag bit 15), entries tag:u16 length:u32 value.
    session = bytes.fromhex("7f3c2a1e9b8d4c6fa5e4d3c2b1a09f8e")
    def ext(tag, value, length=None):
        return struct.pack("<HI", tag, len(value) if length is None else length) + value
    files["valid-event-session"] = (EVENT, event(flags=0x8000) + ext(1, session))
    files["valid-event-session-and-unknown-field"] = (EVENT, event(flags=0x8001) + ext(1, session) + ext(0x0042, b"future"))
    files["valid-event-extended-empty-block"] = (EVENT, event(flags=0x8000))
    files["bad-event-critical-extension"] = (EVENT, event(flags=0x8000) + ext(0x8001, b"x"))
    files["bad-event-extension-repeated"] = (EVENT, event(flags=0x8000) + ext(1, session) + ext(1, session))
    files["bad-event-extension-cut"] = (EVENT, event(flags=0x8000) + ext(1, session)[:10])
    files["bad-event-extension-past-end"] = (EVENT, event(flags=0x8000) + ext(2, b"ab", length=0xFFFFFFF0))
    files["bad-event-session-short"] = (EVENT, event(flags=0x8000) + ext(1, session[:8]))
    # The event-model fields: anonymousId, groupId, previousId (UTF-8, at most 1024 bytes), context
    # (a JSON object).
    files["valid-event-model-fields"] = (EVENT, event(type_=4, flags=0x8000) + ext(1, session) + ext(2, b"anon-7")
                                         + ext(3, b"acme") + ext(4, b"old") + ext(5, b'{"locale":"fr-FR"}'))
    files["bad-event-context-not-object"] = (EVENT, event(flags=0x8000) + ext(5, b"[1,2]"))
    files["bad-event-context-invalid-json"] = (EVENT, event(flags=0x8000) + ext(5, b'{"a":}'))
    files["bad-event-group-id-too-long"] = (EVENT, event(flags=0x8000) + ext(3, b"g" * 1025))
    files["bad-event-anonymous-id-invalid-utf8"] = (EVENT, event(flags=0x8000) + ext(2, b"\xff"))
    valid = event()
    files["bad-event-fixed-header-only-short"] = (EVENT, valid[:51])
    files["bad-event-truncated-text"] = (EVENT, valid[:-3])
    files["bad-event-trailing-byte"] = (EVENT, valid + b"x")
    files["bad-event-type0"] = (EVENT, event(type_=0))
    files["bad-event-type7"] = (EVENT, event(type_=7))
    files["bad-event-huge-props-length"] = (EVENT, event(lengths=(3, 9, 0, 0, 0xFFFFFFFF)))
    files["bad-event-huge-text-lengths"] = (EVENT, event(lengths=(0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0)))
    files["bad-event-invalid-utf8-source"] = (EVENT, event(source=b"\xc3\x28"))
    files["bad-event-invalid-utf8-name"] = (EVENT, event(name=b"ok\xed\xa0\x80"))
    files["bad-event-invalid-utf8-user"] = (EVENT, event(user=b"\xf8\x88\x80\x80\x80"))
    files["bad-event-invalid-utf8-once"] = (EVENT, event(once=b"\xe2\x82"))
    files["bad-event-overlong-nul"] = (EVENT, event(name=b"\xc0\x80"))
    files["bad-event-empty"] = (EVENT, b"")

    # Acks.
    files["valid-ack-empty"] = (ACK, ack([]))
    files["valid-ack-statuses"] = (ACK, ack([(0, 0), (1, 0), (2, 3), (3, 0), (4, 0), (2, 6)]))
    files["valid-ack-unknown-reason"] = (ACK, ack([(2, 200)]))
    files["bad-ack-short"] = (ACK, b"\x01\x00")
    files["bad-ack-count-too-high"] = (ACK, struct.pack("<I", 3) + ack([(0, 0)])[4:])
    files["bad-ack-count-max"] = (ACK, struct.pack("<I", 0xFFFFFFFF) + ack([(0, 0)])[4:])
    files["bad-ack-unknown-status"] = (ACK, ack([(9, 0)]))
    files["bad-ack-trailing"] = (ACK, ack([(0, 0)]) + b"\0")

    # Error replies.
    for code in range(1, 6):
        files[f"valid-error-code{code}"] = (ERROR, error(code, b"something went wrong"))
    files["valid-error-empty-message"] = (ERROR, error(1, b""))
    files["valid-error-invalid-utf8-message"] = (ERROR, error(1, b"\xff\xfe"))
    files["bad-error-short"] = (ERROR, b"\x01")
    files["bad-error-code0"] = (ERROR, error(0, b"x"))
    files["bad-error-code-max"] = (ERROR, error(0xFFFF, b"x"))

    # Event id text.
    files["valid-idtext"] = (IDTEXT, b"0190f1e2-d3c4-7a5b-8c9d-0e1f2a3b4c5d")
    files["valid-idtext-no-dashes-upper"] = (IDTEXT, b"0190F1E2D3C47A5B8C9D0E1F2A3B4C5D")
    files["bad-idtext-sign"] = (IDTEXT, b"+190f1e2-d3c4-7a5b-8c9d-0e1f2a3b4c5d")
    files["bad-idtext-short"] = (IDTEXT, b"0190f1e2-d3c4")
    files["bad-idtext-nonhex"] = (IDTEXT, b"0190f1e2-d3c4-7a5b-8c9d-0e1f2a3b4c5g")
    files["bad-idtext-fullwidth"] = (IDTEXT, "\uff10".encode() * 32)

    # JSON documents for the reader (the context field's check): every kind of value and escape,
    # the depth limit, and the refusals docs/PROTOCOL.md names.
    files["valid-json-object"] = (JSON, b'{"plan":"pro","n":-0.5e-3,"ok":true,"x":null,"l":[1,[2,{}],"s"]}')
    files["valid-json-escapes"] = (JSON, rb'{"a":"\/\b\f\n\r\t\"\\ \u00e9 \ud83d\ude00","\u0041":1}')
    files["valid-json-whitespace"] = (JSON, b' \r\n\t{ "a" : [ 1 , 2 ] }\n')
    files["valid-json-scalar"] = (JSON, b"12345678901234567890e-2")
    files["valid-json-text"] = (JSON, '{"é":"中😀","k":"user@example.com 4111 1111"}'.encode())
    files["valid-json-depth-64"] = (JSON, b"[" * 64 + b"]" * 64)
    files["bad-json-depth-65"] = (JSON, b"[" * 65 + b"]" * 65)
    files["bad-json-unpaired-surrogate"] = (JSON, rb'{"locale":"en","x":"\ud800"}')
    files["bad-json-low-surrogate-first"] = (JSON, rb'"\udc00\ud800"')
    files["bad-json-trailing-comma"] = (JSON, b'{"a":1,}')
    files["bad-json-leading-zero"] = (JSON, b"[01]")
    files["bad-json-nan"] = (JSON, b"[NaN]")
    files["bad-json-control"] = (JSON, b'"a\x01"')
    files["bad-json-two-values"] = (JSON, b"{} {}")
    files["bad-json-not-utf8"] = (JSON, b'"\xed\xa0\x80"')

    for name, (target, frame) in sorted(files.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(bytes([target]) + frame)
    print(f"wrote {len(files)} files to {OUT}")


if __name__ == "__main__":
    main()
