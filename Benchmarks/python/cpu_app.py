"""A Python app of the benchmark's Python row (ferry-bench, "CPU per event across the load range";
docs/BENCHMARKS.md): emits track events at Poisson arrivals of --rate events/s for --seconds with
one library, then waits until the library has handed every event over, and reports its own CPU.

  --library ferry     Ferry's Python client (client/python, ZeroMQ to --runtime) at its defaults
                      (--send-delay-ms sets its send_delay), flush() at the end
  --library segment   segment-analytics-python with its defaults, to ferryd's local HTTP API at
                      --host (loopback TCP), flush() at the end

Speaks ferry-bench's child protocol: prints `ready`, waits for a line on stdin, runs, prints one
JSON line: cpu_seconds (getrusage, user + system, from the start line to the end of the flush),
threads_cpu_seconds (by Python thread name, from /proc/self/task/<tid>/schedstat),
context_switches and threads_context_switches (voluntary + involuntary of every thread, over the
same span: proc_counts.py), sent, the library's own count of accepted events where it has one,
and for Ferry's client the send delay it ran with (send_delay_ms).
"""
import argparse
import json
import os
import random
import resource
import sys
import threading
import time

import proc_counts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def threads_cpu() -> dict:
    """CPU seconds per thread, by Python thread name (threads Python does not know, such as
    libzmq's: by their kernel name)."""
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    result = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/schedstat" % tid) as file:
                ns = int(file.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        name = names.get(int(tid))
        if name is None:
            try:
                with open("/proc/self/task/%s/comm" % tid) as file:
                    name = file.read().strip()
            except OSError:
                name = "thread-" + tid
        result[name] = result.get(name, 0.0) + ns / 1e9
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--library", choices=["ferry", "segment"], required=True)
    parser.add_argument("--runtime", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--size", type=int, default=250)
    parser.add_argument("--send-delay-ms", type=float, default=None, help="ferry.Client's send_delay (default: the client's)")
    args = parser.parse_args()
    # Properties of about --size bytes once encoded as JSON, as the Swift rows' events.
    properties = {"total": 42.5, "sku": "A-1", "pad": "x" * max(1, args.size - 40)}
    if args.library == "ferry":
        import ferry
        options = {} if args.send_delay_ms is None else {"send_delay": args.send_delay_ms / 1000}
        client = ferry.Client(source="bench-python", runtime_dir=args.runtime, outbox_capacity=50_000, **options)

        def emit() -> None:
            client.track("bench", properties, user_id="u-1")

        def finish() -> dict:
            client.flush(timeout=60)
            statistics = client.statistics
            return {"accepted": statistics.accepted, "rejected": statistics.rejected, "send_delay_ms": client.send_delay * 1000}
    else:
        import segment.analytics as segment_analytics
        client = segment_analytics.Client(write_key="bench-python", host=args.host)

        def emit() -> None:
            client.track("u-1", "bench", properties)

        def finish() -> dict:
            client.flush()
            return {}
    print("ready", flush=True)
    sys.stdin.readline()
    cpu0, threads0, switches0 = own_cpu(), threads_cpu(), proc_counts.thread_switches()
    start = time.monotonic()
    end = start + args.seconds
    due = start
    sent = 0
    while True:
        due += random.expovariate(args.rate)
        if due >= end:
            break
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        emit()
        sent += 1
    result = finish()
    cpu = own_cpu() - cpu0
    threads1, switches1 = threads_cpu(), proc_counts.thread_switches()
    # By the names threads_cpu uses: Python's thread names where it knows the thread.
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    switches = {}
    for (tid, name), count in switches1.items():
        key = names.get(int(tid), name)
        switches[key] = switches.get(key, 0) + count - switches0.get((tid, name), 0)
    result.update({"library": args.library, "sent": sent, "seconds": args.seconds, "cpu_seconds": cpu,
                   "threads_cpu_seconds": {name: seconds - threads0.get(name, 0.0) for name, seconds in threads1.items()},
                   "context_switches": sum(switches.values()), "threads_context_switches": switches})
    print(json.dumps(result), flush=True)
    if args.library == "ferry":
        client.close()
    else:
        client.shutdown()


if __name__ == "__main__":
    main()
