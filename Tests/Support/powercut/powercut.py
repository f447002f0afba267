#!/usr/bin/env python3
"""Power-cut explorer: proves that what ferryd acks as `accepted` survives a power cut.

In the spirit of ALICE (OSDI'14) and CrashMonkey. One recorded run, then N crash states:

1. Record. ferryd runs with the fsrecord LD_PRELOAD shim (Tests/Support/fsrecord/fsrecord.c),
   which appends every file-system mutation under the watched root (the data directory and the
   file sink's directory) to an op log. Client threads send events over the real wire protocol
   and, the moment an ack arrives, append it to the same op log (O_APPEND, one write per record),
   so each ack is ordered after the agent operations that preceded it. Consent changes run
   meanwhile (advertising denied, then granted again), marked the same way.
2. Explore. For each crash state a cut point is chosen in the op log (everything before it
   happened, nothing after), and the disk a power cut could leave is built under the model of
   docs/FAULTS.md section 8: synced operations persist; every unsynced data write may be lost,
   kept or torn at 4 KiB blocks, independently of the others (so writes are reordered); every
   unsynced directory operation (create, mkdir, rename, unlink) may be lost, independently, as
   long as what it needs exists.
3. Check. ferryd starts on the state (without the shim), must become ready, takes a few probes
   (a once-key already used before the cut must be answered `duplicate`; while advertising was
   denied before the cut, an advertising event must be blocked), must deliver its backlog and
   stop. Then: every event acked `accepted` before the cut is in the sink exactly once, no event
   the agent refused is, the consent state and audit chain agree and verify.

The last line is `states=N lost=L duplicated=D refused_delivered=R unrecoverable=U`; the exit
status is 0 when all four are 0 (or, with --expect-loss, when lost > 0).
"""
import argparse
import json
import os
import random
import re
import shutil
import struct
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "client", "python"))
import ferry_emit as fe  # noqa: E402  (the protocol codecs)

BLOCK = 4096
ANALYTICS, ADVERTISING, PERSONALIZATION, DIAGNOSTICS = 1, 2, 3, 4


def log(text):
    print(text, file=sys.stderr, flush=True)


class Deadline(Exception):
    pass


def wait_for(what, condition, timeout, interval=0.02):
    """Polls `condition` until it returns a true value or `timeout` seconds pass."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= end:
            raise Deadline("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(interval)


# --- the op log ------------------------------------------------------------------------------

class OpLog:
    """Appends the harness's own records (acks, marks) to the shim's op log."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.lock = threading.Lock()

    def append(self, op, a, b="-"):
        line = ("%s\t%d\t0\t%s\t%s\t0\n" % (op, os.getpid(), a, b)).encode()
        with self.lock:
            os.write(self.fd, line)

    def close(self):
        os.close(self.fd)


def parse_oplog(path):
    ops = []
    with open(path, "rb") as f:
        data = f.read()
    i = 0
    while i < len(data):
        end = data.index(b"\n", i)
        fields = data[i:end].decode().split("\t")
        op, pid, ino, a, b, length = fields[0], int(fields[1]), int(fields[2]), fields[3], fields[4], int(fields[5])
        payload = data[end + 1:end + 1 + length]
        ops.append({"op": op, "pid": pid, "ino": ino, "a": a, "b": b, "data": payload})
        i = end + 1 + length
    return ops


def parent(path):
    return path.rsplit("/", 1)[0] if "/" in path else "."


# --- the crash model -------------------------------------------------------------------------

class Model:
    """Assigns every recorded operation to the inode it touches (data ops) or the directory it
    changes (directory ops), and works out which operations are durable at a cut."""

    def __init__(self, ops):
        self.ops = ops
        self.fs_ops = []  # (position in ops, kind, details)
        names = {".": 0}  # path -> model inode, as the running process saw the namespace
        real = {}  # real inode number -> model inode (creations only)
        kinds = {0: "dir"}
        counter = [0]

        def new(kind):
            counter[0] += 1
            kinds[counter[0]] = kind
            return counter[0]

        def inode_of(op):
            if op["ino"] and op["ino"] in real and names.get(op["a"]) in (None, real[op["ino"]]):
                return real[op["ino"]]
            if op["ino"] and op["ino"] in real:
                return real[op["ino"]]
            if op["a"] in names:
                return names[op["a"]]
            node = new("file")  # existed before recording: treat as a file seen now
            names[op["a"]] = node
            return node

        for pos, op in enumerate(ops):
            kind = op["op"]
            if kind in ("creat", "mkdir"):
                node = new("dir" if kind == "mkdir" else "file")
                if op["ino"]:
                    real[op["ino"]] = node
                names[op["a"]] = node
                self.fs_ops.append(dict(pos=pos, kind="link", dir=names.get(parent(op["a"])), name=op["a"],
                                        node=node, new=True, replaced=None))
            elif kind == "write":
                self.fs_ops.append(dict(pos=pos, kind="write", node=inode_of(op), offset=int(op["b"]), data=op["data"]))
            elif kind == "trunc":
                self.fs_ops.append(dict(pos=pos, kind="trunc", node=inode_of(op), length=int(op["b"])))
            elif kind == "sync":
                self.fs_ops.append(dict(pos=pos, kind="sync", node=inode_of(op)))
            elif kind == "rename":
                node = names.pop(op["a"], None)
                if node is None:
                    continue
                replaced = names.get(op["b"])
                names[op["b"]] = node
                self.fs_ops.append(dict(pos=pos, kind="rename", dir=names.get(parent(op["b"])),
                                        srcdir=names.get(parent(op["a"])), src=op["a"], name=op["b"], node=node,
                                        replaced=replaced))
            elif kind == "link":
                node = names.get(op["a"])
                if node is None:
                    continue
                names[op["b"]] = node
                self.fs_ops.append(dict(pos=pos, kind="link", dir=names.get(parent(op["b"])), name=op["b"],
                                        node=node, new=False, replaced=None))
            elif kind in ("unlink", "rmdir"):
                node = names.pop(op["a"], None)
                if node is None:
                    continue
                self.fs_ops.append(dict(pos=pos, kind="unlink", dir=names.get(parent(op["a"])), name=op["a"], node=node))
        self.kinds = kinds

    def crash_ops(self, cut):
        """The fs ops before `cut`, each with `durable` set."""
        before = [dict(o) for o in self.fs_ops if o["pos"] < cut]
        last_sync = {}
        for o in before:
            if o["kind"] == "sync":
                last_sync[o["node"]] = o["pos"]
        for o in before:
            if o["kind"] == "sync":
                o["durable"] = True
            elif o["kind"] in ("write", "trunc"):
                o["durable"] = last_sync.get(o["node"], -1) > o["pos"]
            else:
                dirs = [o["dir"]] + ([o["srcdir"]] if o["kind"] == "rename" else [])
                o["durable"] = all(last_sync.get(d, -1) > o["pos"] for d in dirs)
        return before

    def build(self, cut, rng, drop_probability, target):
        """Writes the crash state for `cut` into `target`; returns (unsynced ops, how many of them
        were dropped or torn, whether a later one persisted while an earlier one did not)."""
        ops = self.crash_ops(cut)
        names = {".": 0}
        contents = {}  # model inode -> bytearray
        # Each unsynced op's fate: "keep", "drop" or "torn" (writes only).
        unsynced = [o for o in ops if o["kind"] != "sync" and not o["durable"]]
        for o in unsynced:
            r = rng.random()
            o["fate"] = ("drop" if r < drop_probability
                         else "torn" if o["kind"] == "write" and r < drop_probability + (1 - drop_probability) * 0.3
                         else "keep")
        if unsynced and all(o["fate"] == "keep" for o in unsynced) and rng.random() < 0.9:
            # Mostly explore states that lose something: drop (or tear) one of them.
            victim = rng.choice(unsynced)
            victim["fate"] = "torn" if victim["kind"] == "write" and rng.random() < 0.3 else "drop"
        pending = len(unsynced)
        perturbed = sum(1 for o in unsynced if o["fate"] != "keep")
        reordered, lost_before = False, False
        for o in unsynced:
            if o["fate"] == "keep" and lost_before:
                reordered = True  # a later unsynced op persisted, an earlier one did not
            lost_before = lost_before or o["fate"] != "keep"
        for o in ops:
            if o["kind"] == "sync":
                continue
            fate = o.get("fate", "keep")
            if fate == "drop":
                continue
            torn = fate == "torn"
            kind = o["kind"]
            if kind == "write":
                buf = contents.setdefault(o["node"], bytearray())
                offset, data = o["offset"], o["data"]
                end = offset + len(data)
                if not torn:
                    if len(buf) < end:
                        buf.extend(bytes(end - len(buf)))
                    buf[offset:end] = data
                    continue
                # Torn: each 4 KiB block of the write lands or not; the size may or may not
                # cover the blocks that did not (zeros, as a lost extent reads after a crash).
                start = offset
                applied_end = len(buf)
                while start < end:
                    stop = min(end, (start // BLOCK + 1) * BLOCK)
                    if rng.random() < 0.5:
                        if len(buf) < stop:
                            buf.extend(bytes(stop - len(buf)))
                        buf[start:stop] = data[start - offset:stop - offset]
                        applied_end = max(applied_end, stop)
                    start = stop
                if rng.random() < 0.5 and len(buf) < end:
                    buf.extend(bytes(end - len(buf)))
            elif kind == "trunc":
                buf = contents.setdefault(o["node"], bytearray())
                if len(buf) > o["length"]:
                    del buf[o["length"]:]
                else:
                    buf.extend(bytes(o["length"] - len(buf)))
            elif kind == "link":
                # Needs its directory to exist in this state, and (for a rename-less link of an
                # existing file) the file to be reachable.
                if o["name"] in names:
                    continue
                names[o["name"]] = o["node"]
            elif kind == "rename":
                if names.get(o["src"]) != o["node"]:
                    continue  # its source never made it: the rename cannot have happened
                del names[o["src"]]
                names[o["name"]] = o["node"]
            elif kind == "unlink":
                if names.get(o["name"]) == o["node"]:
                    del names[o["name"]]
        # Materialise what is reachable from the root.
        os.makedirs(target, exist_ok=True)
        for path in sorted(names, key=lambda p: p.count("/")):
            if path == ".":
                continue
            ancestor, reachable = parent(path), True
            while ancestor != ".":
                if self.kinds.get(names.get(ancestor)) != "dir":
                    reachable = False
                    break
                ancestor = parent(ancestor)
            if not reachable:
                continue
            full = os.path.join(target, path)
            if self.kinds[names[path]] == "dir":
                os.makedirs(full, exist_ok=True)
            else:
                with open(full, "wb") as f:
                    f.write(contents.get(names[path], b""))
        return pending, perturbed, reordered


# --- talking to ferryd -------------------------------------------------------------------------

class Agent:
    def __init__(self, ferryd, root, runtime, config, logfile, env):
        self.root, self.runtime = root, runtime
        args = [ferryd, "--config", config, "--data-dir", os.path.join(root, "data"),
                "--sink-dir", os.path.join(root, "out"), "--runtime-dir", runtime, "--log-level", "notice"]
        self.logfile = open(logfile, "ab")
        self.process = subprocess.Popen(args, stdout=self.logfile, stderr=self.logfile, env=env,
                                        stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        self.context = fe_context()

    def control(self, request, timeout=10.0):
        import zmq
        sock = self.context.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, int(timeout * 1000))
        sock.setsockopt(zmq.SNDTIMEO, 1000)
        try:
            sock.connect("ipc://%s/control" % self.runtime)
            sock.send(json.dumps(request).encode())
            return json.loads(sock.recv())
        finally:
            sock.close()

    def alive(self):
        return self.process.poll() is None

    def wait_ready(self, timeout):
        def ready():
            if not self.alive():
                raise Deadline("ferryd exited with status %s before it was ready" % self.process.returncode)
            if not os.path.exists(self.runtime + "/control"):
                return None
            try:
                return self.control({"op": "status"}, timeout=1.0).get("ok")
            except Exception:
                return None
        wait_for("ferryd to answer status", ready, timeout)

    def stop(self, timeout=20.0):
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                self.logfile.close()
                return False
        self.logfile.close()
        return True

    def kill(self):
        if self.alive():
            self.process.kill()
            self.process.wait()
        if not self.logfile.closed:
            self.logfile.close()


_context = None


def die_with_parent():
    """In the child before exec: SIGKILL when the thread that started it ends, so no ferryd
    outlives the explorer (killed by a test's timeout, say)."""
    import ctypes
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def fe_context():
    global _context
    import zmq
    if _context is None:
        _context = zmq.Context()
    return _context


class Client:
    """One DEALER connection; sends one small batch at a time and waits for its ack."""

    def __init__(self, runtime, source, session=None):
        import zmq
        self.sock = fe_context().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(fe.ingest_endpoint(runtime))
        self.source, self.ids, self.seq, self.request = source, fe.UUIDv7(), 0, 0
        # With a session (protocol 2, "Exactly once" in docs/PROTOCOL.md) the agent judges re-sends
        # by (session, sequence); None speaks protocol 1.
        self.session = session

    def event(self, category, once_key="", sequence=None):
        if sequence is None:
            self.seq += 1
            sequence = self.seq
        frame = fe.encode_event(self.ids.next(), int(time.time() * 1000), sequence, os.getpid(), fe.TYPES["track"],
                                self.source, "powercut", once_key=once_key, properties=b'{"pad":"%s"}' % (b"x" * 120),
                                category=category, flags=(1 << 15) if self.session else 0)
        if self.session:
            frame += struct.pack("<HI", 1, 16) + self.session  # extension: tag 1 (session), 16 bytes
        return frame

    def send(self, frames, timeout=20.0):
        """Sends one batch; returns [(id hex, status)] or None on timeout."""
        self.request += 1
        header = fe.encode_header(fe.KIND_EVENTS, self.request, version=2 if self.session else 1)
        self.sock.send_multipart([header] + frames)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.sock.poll(100):
                continue
            reply = self.sock.recv_multipart()
            _, kind, request = fe.decode_header(reply[0])
            if request != self.request:
                continue
            if kind != fe.KIND_ACK:
                return None
            return [(i.hex(), status) for i, status, _ in fe.decode_ack(reply[1])]
        return None

    def close(self):
        self.sock.close()


# --- recording ---------------------------------------------------------------------------------

# The consent changes of the recorded run: (fraction of the batches sent, mark, control request).
CONSENT_CHANGES = [
    (0.30, "adv-denied", {"op": "set_consent", "category": "advertising", "status": "denied"}),
    (0.45, "purge", {"op": "purge", "category": "diagnostics"}),
    (0.55, "pers-granted", {"op": "set_consent", "category": "personalization", "status": "granted"}),
    (0.65, "adv-granted", {"op": "set_consent", "category": "advertising", "status": "granted"}),
]


def write_config(path):
    config = {
        # Personalization starts undetermined: its events are held, then released by the grant.
        "consent": {"initialConsent": {"personalization": "undetermined"}},
        "log": {"segmentMaxBytes": 4096, "retentionMaxBytes": 1 << 30, "fullPolicy": "reject"},
        # Batches wait up to 150 ms for more events, so at most cut points acked events are still
        # waiting in the queue (recovered from the log, not from the sink's files).
        "sinks": [{"name": "file", "type": "file", "maxFileBytes": 6144,
                   "batch": {"maxEvents": 32, "maxBytes": 65536, "maxWaitMilliseconds": 150}}],
    }
    with open(path, "w") as f:
        json.dump(config, f)


def record(args, work):
    """Runs the workload once under the shim; returns the path of the op log."""
    root, oplog_path = os.path.join(work, "rec"), os.path.join(work, "oplog")
    os.makedirs(root)
    runtime = tempfile.mkdtemp(prefix="pcr-", dir="/tmp")
    env = dict(os.environ, FSREC_ROOT=root, FSREC_LOG=oplog_path, LD_PRELOAD=args.shim,
               FSREC_SYNC_DELAY_US=str(args.sync_delay_us))
    if args.plant:
        env["FERRY_TEST_PLANT_BUG"] = args.plant
    oplog = OpLog(oplog_path)
    agent = Agent(args.ferryd, root, runtime, args.config, os.path.join(work, "record.log"), env)
    try:
        agent.wait_ready(60)
        # Sessions when the agent speaks protocol 2 (the explorer works with either).
        sessions = agent.control({"op": "status"}).get("protocol_version", 1) >= 2
        errors = []
        progress, progress_lock = [0.0], threading.Lock()
        total = args.clients * args.batches

        def emitter(index):
            try:
                client = Client(runtime, "pc%d" % index, os.urandom(16) if sessions else None)
                rng = random.Random(args.seed * 31 + index)
                for n in range(args.batches):
                    frames, meta = [], []
                    for _ in range(rng.randint(1, 3)):
                        r = rng.random()
                        category = (ADVERTISING if r < 0.25 else PERSONALIZATION if r < 0.35
                                    else DIAGNOSTICS if r < 0.45 else ANALYTICS)
                        key = "conv-%d-%d" % (index, n) if rng.random() < 0.15 else ""
                        frames.append(client.event(category, key))
                        meta.append((category, key or "-", client.seq))
                    acks = client.send(frames)
                    if acks is None:
                        raise RuntimeError("client %d: no ack within 20 s" % index)
                    session = client.session.hex() if client.session else "-"
                    for (event_id, status), (category, key, sequence) in zip(acks, meta):
                        # The ack is recorded before anything else happens in this thread.
                        oplog.append("ack", event_id, "%s:%d:%s:%s:%d" % (status, category, key, session, sequence))
                    with progress_lock:
                        progress[0] += 1.0 / total
                client.close()
            except Exception as error:  # reported below
                errors.append(error)

        def consent():
            try:
                for fraction, change, request in CONSENT_CHANGES:
                    wait_for("workload progress", lambda: progress[0] >= fraction, 120)
                    oplog.append("mark", "consent-start", change)
                    reply = agent.control(request, 60)
                    if not reply.get("ok"):
                        raise RuntimeError("consent change refused: %s" % reply)
                    oplog.append("mark", "consent-acked", change)
            except Exception as error:
                errors.append(error)

        threads = [threading.Thread(target=emitter, args=(i,)) for i in range(args.clients)]
        threads.append(threading.Thread(target=consent))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        # Let delivery catch up so the log also holds cursor saves and segment deletions.
        wait_for("the recorded agent to deliver", lambda: backlog(agent) == 0, 60)
    finally:
        agent.stop()
        shutil.rmtree(runtime, ignore_errors=True)
        oplog.close()
    return oplog_path


def backlog(agent):
    try:
        status = agent.control({"op": "status"}, timeout=2.0)
    except Exception:
        return None
    if not status.get("ok"):
        return None
    return status["queue"]["events"]


# --- exploring ---------------------------------------------------------------------------------

def choose_cuts(ops, model, n, rng):
    """N cut points: a third anywhere, the rest where durability is decided (just before a sync,
    just after a rename, a create, an ack or a consent mark), spread evenly over the kinds of
    file (segments, cursors, state.json, …: names with their digits masked) so rare files get
    their share. A cut with no unsynced operation before it is drawn again (up to 4 times): such
    a state can only test recovery from a clean stop."""
    by_kind = {}
    for pos, op in enumerate(ops):
        if op["op"] == "sync":
            cut = pos
        elif op["op"] in ("rename", "ack", "mark", "creat"):
            cut = pos + 1
        else:
            continue
        kind = op["op"] if op["op"] in ("ack", "mark") else op["op"] + " " + re.sub(r"[0-9]+", "#", op["a"])
        by_kind.setdefault(kind, set()).add(cut)
    kinds = sorted(by_kind)
    cuts = []
    for i in range(n):
        for _ in range(5):
            if i % 3 == 0 or not kinds:
                cut = rng.randint(1, len(ops))
            else:
                cut = rng.choice(sorted(by_kind[rng.choice(kinds)]))
            if any(not o["durable"] for o in model.crash_ops(cut) if o["kind"] != "sync"):
                break
        cuts.append(cut)
    return cuts


def expectations(ops, cut):
    """What the client knew at the cut."""
    accepted, refused, maybe, once_keys = set(), set(), set(), set()
    by_session = {}  # session hex -> sequences of analytics events acked accepted before the cut
    category = {}
    consent = []  # (pos, "start"/"acked", status)
    for pos, op in enumerate(ops):
        if op["op"] == "mark" and op["a"].startswith("consent-"):
            consent.append((pos, op["a"][8:], op["b"]))
        if op["op"] == "ack":
            status, cat, key, session, sequence = op["b"].split(":")
            category[op["a"]] = int(cat)
            if status == "accepted" and pos < cut and session != "-" and int(cat) == ANALYTICS:
                by_session.setdefault(session, []).append(int(sequence))
            if status in ("blocked", "rejected", "suppressed"):
                refused.add(op["a"])  # refused at any time: never to be delivered
            elif status == "accepted" and pos < cut:
                accepted.add(op["a"])
                if key != "-":
                    once_keys.add(key)
    # Advertising events accepted before the denial (whose erasure may have run before the
    # cut, acked or not) up to the grant acked after it may be erased: not counted as lost.
    def position(kind, change):
        return next((p for p, k, c in consent if k == kind and c == change), None)

    def erasable(cat, start, acked):
        """Events of `cat` accepted before a change that erases them may have been erased."""
        if start is None or start >= cut:
            return
        limit = acked if acked is not None and acked < cut else cut
        for op in ops[:limit]:
            if op["op"] == "ack" and op["a"] in accepted and category[op["a"]] == cat:
                maybe.add(op["a"])

    erasable(DIAGNOSTICS, position("start", "purge"), position("acked", "purge"))
    # Advertising events accepted before the denial (erased by it) up to the grant acked after it.
    erasable(ADVERTISING, position("start", "adv-denied"), position("acked", "adv-granted"))
    acked_changes = [c for p, k, c in consent if k == "acked" and p < cut and c.startswith("adv-")]
    started_changes = [c for p, k, c in consent if k == "start" and p < cut and c.startswith("adv-")]
    return dict(by_session=by_session, accepted=accepted - maybe, maybe=maybe, refused=refused, once_keys=once_keys,
                acked_changes=acked_changes, started_changes=started_changes)


def delivered_ids(out):
    counts = {}
    if not os.path.isdir(out):
        return counts
    for name in sorted(os.listdir(out)):
        if not name.endswith(".jsonl"):
            continue
        with open(os.path.join(out, name), "rb") as f:
            for line in f:
                try:
                    event = json.loads(line)
                except ValueError:
                    counts.setdefault("<damaged line>", 0)
                    counts["<damaged line>"] += 1
                    continue
                event_id = event.get("id", "").replace("-", "")
                counts[event_id] = counts.get(event_id, 0) + 1
    return counts


def check_state(args, index, ops, model, cut, rng, work):
    """Builds crash state `index` and runs ferryd on it. Returns a dict of findings."""
    found = dict(lost=0, duplicated=0, refused_delivered=0, unrecoverable=0, pending=0, perturbed=0,
                 reordered=False, checked=0, consent_finished=False, session_resends=0, notes=[])
    base = os.path.join(work, "s%04d" % index)
    root = os.path.join(base, "root")
    drop = rng.choice([0.25, 0.5, 0.75])
    # The crash state as built stays in crash/ (for a post-mortem); ferryd runs on a copy.
    found["pending"], found["perturbed"], found["reordered"] = model.build(cut, rng, drop, os.path.join(base, "crash"))
    shutil.copytree(os.path.join(base, "crash"), root, symlinks=True)
    expect = expectations(ops, cut)
    found["checked"] = len(expect["accepted"])
    ours = {op["a"] for op in ops if op["op"] == "ack"}
    runtime = tempfile.mkdtemp(prefix="pcs-", dir="/tmp")
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if args.plant:
        env["FERRY_TEST_PLANT_BUG"] = args.plant
    agent = Agent(args.ferryd, root, runtime, args.config, base + ".ferryd.log", env)
    probes_accepted = []
    try:
        try:
            agent.wait_ready(args.state_timeout)
        except Deadline as error:
            found["unrecoverable"] += 1
            found["notes"].append("did not start: %s" % error)
            found["lost"] += len(expect["accepted"] - set(delivered_ids(os.path.join(root, "out"))))
            return found
        client = Client(runtime, "probe")
        # A once-key used before the cut counts once: a new event carrying it is a duplicate.
        for key in sorted(expect["once_keys"]):
            acks = client.send([client.event(ANALYTICS, key)])
            if acks and acks[0][1] == "accepted":
                found["duplicated"] += 1
                probes_accepted.append(acks[0][0])
                found["notes"].append("once-key %s counted again" % key)
        # While advertising was denied (acked, not re-granted before the cut) it stays denied.
        if expect["acked_changes"] and expect["acked_changes"][-1] == "adv-denied" and expect["started_changes"][-1] == "adv-denied":
            acks = client.send([client.event(ADVERTISING)])
            if acks and acks[0][1] != "blocked":
                found["refused_delivered"] += 1
                found["notes"].append("advertising denied before the cut, but a new advertising event was %s" % acks[0][1])
        if len(expect["acked_changes"]) == 2:
            acks = client.send([client.event(ADVERTISING)])
            if acks and acks[0][1] != "accepted":
                found["unrecoverable"] += 1
                found["notes"].append("advertising granted before the cut, but a new advertising event was %s" % acks[0][1])
            elif acks:
                probes_accepted.append(acks[0][0])
        client.close()
        # Sessions: a re-send of an event acked before the cut, with the same session and sequence
        # but a new id (so the id window cannot catch it), is a duplicate however late it comes.
        for session, sequences in sorted(expect["by_session"].items()):
            resender = Client(runtime, "resend", bytes.fromhex(session))
            acks = resender.send([resender.event(ANALYTICS, sequence=n) for n in sequences])
            resender.close()
            again = [event_id for event_id, status in acks or [] if status != "duplicate"]
            if acks is None:
                found["notes"].append("no ack for the session re-sends")
            elif again:
                found["duplicated"] += len(again)
                probes_accepted.extend(again)
                found["notes"].append("%d re-sends of session %s… acked before the cut were not duplicates"
                                      % (len(again), session[:8]))
            found["session_resends"] += len(sequences)
        # Release whatever is still held (personalization, if the cut came before its grant):
        # held events acked `accepted` must be delivered once like the others.
        reply = agent.control({"op": "set_consent", "category": "personalization", "status": "granted"}, 60)
        if not reply.get("ok"):
            found["unrecoverable"] += 1
            found["notes"].append("granting personalization failed: %s" % reply)
        try:
            wait_for("the backlog to drain", lambda: backlog(agent) == 0 or not agent.alive(), args.state_timeout)
        except Deadline as error:
            found["notes"].append(str(error))
        log_reply = agent.control({"op": "consent_log"}, 10)
        state_reply = agent.control({"op": "consent_state"}, 10)
        if not log_reply.get("verified"):
            found["unrecoverable"] += 1
            found["notes"].append("audit chain does not verify: %s" % log_reply.get("problem"))
        entries = log_reply.get("entries", [])
        changes = [e for e in entries if e.get("change") == "consent.advertising"][:2]
        if len(changes) < len(expect["acked_changes"]):
            found["unrecoverable"] += 1
            found["notes"].append("audit log holds %d advertising changes, %d were acked before the cut"
                                  % (len(changes), len(expect["acked_changes"])))
        consent = state_reply.get("consent", {})
        # state.json's head is the audit log's last entry (recovery cuts off a change cut short).
        if entries and consent.get("audit_head") != entries[-1].get("hash"):
            found["unrecoverable"] += 1
            found["notes"].append("consent state head %s does not match the audit log's head %s"
                                  % (consent.get("audit_head"), entries[-1].get("hash")))
        if not agent.alive():
            found["unrecoverable"] += 1
            found["notes"].append("ferryd died (status %s)" % agent.process.returncode)
        elif not agent.stop():
            found["unrecoverable"] += 1
            found["notes"].append("ferryd did not stop on SIGTERM")
    except Exception as error:
        found["unrecoverable"] += 1
        found["notes"].append("check failed: %r" % error)
    finally:
        agent.kill()
        shutil.rmtree(runtime, ignore_errors=True)
    # What recovery repaired (ferryd's warnings), for the figures.
    try:
        with open(base + ".ferryd.log", "rb") as f:
            text = f.read().decode("utf-8", "replace")
        found["consent_finished"] = "finishing an interrupted consent change" in text
    except OSError:
        pass
    counts = delivered_ids(os.path.join(root, "out"))
    if "<damaged line>" in counts:
        found["notes"].append("%d damaged lines in the sink" % counts["<damaged line>"])
        found["duplicated"] += counts.pop("<damaged line>")
    missing = expect["accepted"] - set(counts)
    found["lost"] += len(missing)
    if missing:
        found["notes"].append("lost %d acked events, e.g. %s" % (len(missing), sorted(missing)[0]))
    dups = {i: c for i, c in counts.items() if c > 1 and (i in ours or i in probes_accepted)}
    found["duplicated"] += sum(c - 1 for c in dups.values())
    if dups:
        found["notes"].append("%d events delivered more than once" % len(dups))
    bad = expect["refused"] & set(counts)
    found["refused_delivered"] += len(bad)
    if bad:
        found["notes"].append("%d refused events delivered" % len(bad))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("states", type=int, nargs="?", default=60)
    parser.add_argument("--ferryd", required=True)
    parser.add_argument("--shim", required=True, help="the built fsrecord.so")
    parser.add_argument("--plant", default=None, help="a planted bug (FERRY_TEST_PLANT_BUG) for the whole run")
    parser.add_argument("--seed", type=lambda s: int(s, 0), default=None)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--batches", type=int, default=60, help="batches per client")
    parser.add_argument("--parallel", type=int, default=3)
    parser.add_argument("--sync-delay-us", type=int, default=1000,
                        help="the shim sleeps this long before each fsync, like a disk's flush")
    parser.add_argument("--state-timeout", type=float, default=30.0)
    parser.add_argument("--expect-loss", action="store_true",
                        help="succeed only if some acked event is lost; stop at the first state that loses one")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--oplog", default=None,
                        help="explore this op log (kept by an earlier --keep run) instead of recording one: "
                             "with the same --seed, the same states are rebuilt")
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().getrandbits(63)
    started = time.monotonic()
    kept = None
    work = tempfile.mkdtemp(prefix="ferry-powercut-")
    args.config = os.path.join(work, "ferryd.json")
    write_config(args.config)
    log("[powercut] seed %#x%s (repeat with --seed %#x); work dir %s"
        % (args.seed, " plant=" + args.plant if args.plant else "", args.seed, work))
    totals = dict(states=0, lost=0, duplicated=0, refused_delivered=0, unrecoverable=0, pending=0, perturbed=0,
                  reordered=0, checked=0, consent_finished=0, session_resends=0)
    try:
        oplog_path = args.oplog or record(args, work)
        ops = parse_oplog(oplog_path)
        kinds = {}
        for op in ops:
            kinds[op["op"]] = kinds.get(op["op"], 0) + 1
        recorded = time.monotonic() - started
        log("[powercut] recorded %d ops in %.1f s: %s" % (len(ops), recorded,
            " ".join("%s=%d" % kv for kv in sorted(kinds.items()))))
        model = Model(ops)
        rng = random.Random(args.seed)
        cuts = choose_cuts(ops, model, args.states, rng)
        seeds = [rng.getrandbits(63) for _ in cuts]
        lock = threading.Lock()
        queue = list(enumerate(zip(cuts, seeds)))
        stop, kept = [False], [False]

        def worker():
            while True:
                with lock:
                    if not queue or stop[0]:
                        return
                    index, (cut, seed) = queue.pop(0)
                found = check_state(args, index, ops, model, cut, random.Random(seed), work)
                with lock:
                    totals["states"] += 1
                    for key in ("lost", "duplicated", "refused_delivered", "unrecoverable", "pending", "checked",
                                "session_resends"):
                        totals[key] += found[key]
                    totals["perturbed"] += 1 if found["perturbed"] else 0
                    totals["reordered"] += 1 if found["reordered"] else 0
                    totals["consent_finished"] += 1 if found["consent_finished"] else 0
                    if found["notes"] or any(found[k] for k in ("lost", "duplicated", "refused_delivered", "unrecoverable")):
                        log("[powercut] state %d (cut %d/%d, seed %#x, %d unsynced ops, %d dropped or torn): %s"
                            % (index, cut, len(ops), seed, found["pending"], found["perturbed"], "; ".join(found["notes"])))
                    if args.expect_loss and found["lost"]:
                        stop[0] = True
                failed = any(found[k] for k in ("lost", "duplicated", "refused_delivered", "unrecoverable"))
                if failed and not args.expect_loss:
                    kept[0] = True  # the state, its ferryd log and the op log stay for a post-mortem
                elif not args.keep:
                    shutil.rmtree(os.path.join(work, "s%04d" % index), ignore_errors=True)
                    try:
                        os.unlink(os.path.join(work, "s%04d.ferryd.log" % index))
                    except OSError:
                        pass

        threads = [threading.Thread(target=worker) for _ in range(args.parallel)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        log("[powercut] %d states in %.1f s (%.1f s recording); %d states dropped or tore unsynced operations, %d "
            "kept a later one while losing an earlier (%d unsynced ops in all); %d acked events checked, %d "
            "re-sent in their session; "
            "recovery finished a consent change the cut interrupted in %d states" % (totals["states"], time.monotonic() - started, recorded, totals["perturbed"],
                                   totals["reordered"], totals["pending"], totals["checked"], totals["session_resends"],
                                   totals["consent_finished"]))
    finally:
        if args.keep or (kept and kept[0]):
            log("[powercut] kept %s (failed states: s<index>/ and s<index>.ferryd.log; replay with --oplog %s/oplog "
                "and the same --seed)" % (work, work))
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("states=%d lost=%d duplicated=%d refused_delivered=%d unrecoverable=%d"
          % (totals["states"], totals["lost"], totals["duplicated"], totals["refused_delivered"], totals["unrecoverable"]),
          flush=True)
    if args.expect_loss:
        return 0 if totals["lost"] > 0 else 1
    bad = totals["lost"] + totals["duplicated"] + totals["refused_delivered"] + totals["unrecoverable"]
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
