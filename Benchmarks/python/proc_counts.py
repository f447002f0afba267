"""Context switches per thread, the way issue 36 counts them: voluntary + involuntary
(`voluntary_ctxt_switches` + `nonvoluntary_ctxt_switches`) of every thread of a process, from
/proc/<pid>/task/*/status. The reference implementation: scripts/bench-cpu-per-event and the
Python row's app (cpu_app.py) use it; ferry-bench (Swift) reads the same fields the same way
(`threadContextSwitches(pid:)` in Benchmarks/Sources/ferry-bench/CPUPerEvent.swift).

Threads that ended are missing: no process-wide total in /proc keeps their counts.
"""
import os


def thread_switches(pid="self"):
    """{(tid, name): context switches so far} for every live thread of `pid`."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tids:
        name, switches = "?", 0
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("Name:"):
                        name = line[5:].strip()
                    elif line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                        switches += int(line.split(":", 1)[1])
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        out[(tid, name)] = switches
    return out


def delta_by_name(before, after):
    """Switches per thread name between two `thread_switches` readings: a thread is matched by
    its id (Swift's pool threads rename themselves) and named as in `after`; threads of one name
    are summed; a thread born in between counts from zero; one that ended is missing."""
    earlier = {}
    for (tid, _), count in before.items():
        earlier[tid] = earlier.get(tid, 0) + count
    by_name = {}
    for (tid, name), count in after.items():
        by_name[name] = by_name.get(name, 0) + count - earlier.get(tid, 0)
    return by_name
