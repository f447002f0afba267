#!/usr/bin/env python3
"""A stand-in for Segment's Public API, as far as Ferry's erasure uses it: Create Workspace
Regulation (docs.segmentapis.com, "Deletion and Suppression").

    POST /regulations
    Authorization: Bearer <token>
    Content-Type: application/vnd.segment.v1+json (application/json is accepted too)
    {"regulationType": "SUPPRESS_WITH_DELETE", "subjectType": "USER_ID", "subjectIds": ["u-1"]}

    200 {"data": {"regulateId": "<id>"}}

It checks what Segment documents: the method and path (404 otherwise), the bearer token (401),
the body's schema — `regulationType` one of the documented types, `subjectType` one of
`USER_ID`/`ANONYMOUS_ID`/`OBJECT_ID`, `subjectIds` 1 to 5000 non-empty strings, no other key —
(422 "Validation failure"), errors as `{"errors": [{"type": …, "message": …}]}`. A script file
(`--script`) makes it answer differently: each request takes its first line, a status (`429`
answers with `Retry-After: 1`, `503`, `500`, `400`, …), until the file is empty.

Every request is appended to `--log` as one JSON line {method, path, authorization, content_type,
body, status}. It prints `PORT <n>` once it listens on 127.0.0.1.
"""
import argparse
import json
import os
import secrets
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REGULATION_TYPES = {
    "DELETE_ARCHIVE_ONLY", "DELETE_INTERNAL", "DELETE_ONLY", "SUPPRESS_ONLY", "SUPPRESS_WITH_DELETE",
    "SUPPRESS_WITH_DELETE_INTERNAL", "UNSUPPRESS",
}
SUBJECT_TYPES = {"USER_ID", "ANONYMOUS_ID", "OBJECT_ID"}
CONTENT_TYPES = {"application/vnd.segment.v1+json", "application/json"}


def validate(body):
    """The problem with a Create Workspace Regulation body, or None."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    extra = set(body) - {"regulationType", "subjectType", "subjectIds"}
    if extra:
        return "unknown fields: " + ", ".join(sorted(extra))
    if body.get("regulationType") not in REGULATION_TYPES:
        return "regulationType must be one of " + ", ".join(sorted(REGULATION_TYPES))
    if body.get("subjectType") not in SUBJECT_TYPES:
        return "subjectType must be one of " + ", ".join(sorted(SUBJECT_TYPES))
    ids = body.get("subjectIds")
    if not isinstance(ids, list) or not 1 <= len(ids) <= 5000:
        return "subjectIds must be an array of 1 to 5000 ids"
    if not all(isinstance(i, str) and i for i in ids):
        return "subjectIds must be non-empty strings"
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--token", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--script")
    options = parser.parse_args()

    def scripted():
        if not options.script or not os.path.exists(options.script):
            return None
        with open(options.script) as file:
            lines = [line.strip() for line in file if line.strip()]
        if not lines:
            return None
        with open(options.script, "w") as file:
            file.write("".join(line + "\n" for line in lines[1:]))
        return int(lines[0])

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def answer(self, status, document, headers=()):
            payload = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.segment.v1+json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
            return status

        def error(self, status, kind, message, headers=()):
            return self.answer(status, {"errors": [{"type": kind, "message": message}]}, headers)

        def handle_any(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            status = self.route(body, raw)
            with open(options.log, "a") as log:
                log.write(json.dumps({
                    "method": self.command, "path": self.path,
                    "authorization": self.headers.get("Authorization"),
                    "content_type": self.headers.get("Content-Type"), "body": body, "status": status,
                }) + "\n")

        def route(self, body, raw):
            if self.path != "/regulations":
                return self.error(404, "not-found", "Resource not found")
            if self.command != "POST":
                return self.error(405, "method-not-allowed", "only POST")
            if self.headers.get("Authorization") != "Bearer " + options.token:
                return self.error(401, "unauthorized", "Unauthorized")
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if content_type not in CONTENT_TYPES:
                return self.error(415, "unsupported-media-type", "Content-Type must be application/vnd.segment.v1+json")
            problem = "the body is not JSON" if body is None else validate(body)
            if problem:
                return self.error(422, "validation", "Validation failure: " + problem)
            forced = scripted()
            if forced == 429:
                return self.error(429, "too-many-requests", "Too many requests", [("Retry-After", "1")])
            if forced is not None and forced != 200:
                return self.error(forced, "scripted", "scripted answer")
            return self.answer(200, {"data": {"regulateId": secrets.token_urlsafe(12)}})

        do_POST = do_GET = do_PUT = do_DELETE = handle_any

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("PORT", server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
