"""``python -m bench.machine``: what waking up costs on this machine.

The daemon's CPU per operation rises as load falls (``docs/performance.md``,
"Why half load costs more per op"): fewer operations share each wakeup.
This probe measures the machine underneath, without any of our code, so
two machines (a laptop, a CI VM) can be told apart before their benchmark
figures are compared:

* **syscall**: ``os.getppid()`` in a Python loop, CPU per call (the
  loop's own cost included, so an upper bound);
* **ping-pong**: two processes bounce one byte over a socketpair, once
  free to run on any CPU and once pinned to one (``os.sched_setaffinity``,
  Linux only), wall time per round trip and this side's CPU for it (two
  wakeups);
* **cold work**: the same fixed chunk of pure Python (JSON round trips of
  a notify-sized body) run after an idle gap of 0.5 to 20 ms (a sleep, then
  the same gaps spent spinning), as a ratio of its CPU
  (``time.thread_time``, median) to the same chunk run back to back just
  before. A ratio well above 1 means work costs more the longer since it
  last ran, which is what a node at half load does between events.

    .venv/bin/python -m bench.machine [--rounds 400] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

_BODY = {"to_agent": "agent-7", "from_agent": "bench", "content": "x" * 200,
         "priority": 5, "tags": ["a", "b"]}
GAPS_MS = (0.5, 2.0, 5.0, 20.0)


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (``?`` off Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or "?"


def memory_bytes() -> int | None:
    """Physical memory (MemTotal of /proc/meminfo), None off Linux."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def host() -> dict[str, Any]:
    """What a benchmark's figures depend on: cores, CPU model, memory, load."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cores": os.cpu_count(), "cores_usable": usable, "cpu_model": cpu_model(),
            "memory_bytes": memory_bytes(), "loadavg": list(os.getloadavg())}


def describe(meta: dict[str, Any]) -> str:
    """One line naming the machine of a run's ``meta``: cores, CPU, memory, load."""
    cores = meta.get("cores")
    usable = meta.get("cores_usable")
    text = f"{cores} cores" + (f" ({usable} usable)" if usable and usable != cores else "")
    text += f", {meta.get('cpu_model') or 'CPU model unknown'}"
    if meta.get("memory_bytes"):
        text += f", {meta['memory_bytes'] / 2**30:.0f} GiB"
    start, end = meta.get("loadavg_start"), meta.get("loadavg_end")
    if start and end:
        text += f"; load average (1 min) {start[0]:.1f} at the start, {end[0]:.1f} at the end"
        if cores and max(start[0], end[0]) > cores:
            text += f" (above {cores}: other work competed for the cores)"
    elif start:
        text += f"; load average (1 min) {start[0]:.1f} at the start"
    return text


def syscall_us(calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        os.getppid()
    return (time.process_time() - start) / calls * 1e6


def ping_pong(trips: int, *, pin: bool) -> dict[str, float]:
    """Round trips of one byte between this process and a child."""
    here, there = socket.socketpair()
    saved = os.sched_getaffinity(0)
    if pin:
        os.sched_setaffinity(0, {min(saved)})  # the child inherits it
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's side
            try:
                here.close()
                for _ in range(trips):
                    there.sendall(there.recv(1))
            finally:
                os._exit(0)  # never back into the parent's code
        there.close()
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(trips):
            here.sendall(b"x")
            here.recv(1)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        os.waitpid(pid, 0)
    finally:
        here.close()
        os.sched_setaffinity(0, saved)
    return {"round_trip_us": wall / trips * 1e6, "cpu_us": cpu / trips * 1e6}


def _chunk() -> None:
    for _ in range(20):
        d = json.loads(json.dumps(_BODY))
        d["keys"] = sorted(d)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def chunk_us(rounds: int, gap_s: float, wait: Callable[[float], None]) -> float:
    """Median CPU of one chunk, each run after ``wait(gap_s)``."""
    costs = []
    for _ in range(rounds):
        if gap_s:
            wait(gap_s)
        start = time.thread_time_ns()
        _chunk()
        costs.append(time.thread_time_ns() - start)
    return statistics.median(costs) / 1000


def measure(rounds: int) -> dict[str, Any]:
    warm = chunk_us(rounds, 0.0, time.sleep)
    cold: dict[str, dict[str, float]] = {}
    each = max(20, rounds // 4)
    for label, wait in (("sleep", time.sleep), ("spin", _spin)):
        # Each ratio against a back-to-back figure taken just before it, so
        # the machine's drift over the probe stays out of the ratios.
        cold[label] = {f"{gap:g}": chunk_us(each, gap / 1000, wait) / chunk_us(each, 0.0, time.sleep)
                       for gap in GAPS_MS}
    trips = max(200, rounds * 20)
    pinnable = hasattr(os, "sched_setaffinity")
    return {
        "cpus": len(os.sched_getaffinity(0)) if pinnable else os.cpu_count(),
        "syscall_cpu_us": syscall_us(rounds * 200),
        "ping_pong_any_cpu": ping_pong(trips, pin=False) if pinnable else None,
        "ping_pong_one_cpu": ping_pong(trips, pin=True) if pinnable else None,
        "chunk_back_to_back_us": warm,
        "chunk_after_gap_ratio": cold,
    }


def render(m: dict[str, Any]) -> str:
    lines = [
        f"CPUs usable: {m['cpus']}",
        f"syscall (getppid, with the loop): {m['syscall_cpu_us']:.2f} us of CPU",
    ]
    for key, label in (("ping_pong_any_cpu", "any CPU"), ("ping_pong_one_cpu", "one CPU")):
        p = m[key]
        if p is None:
            lines.append(f"process ping-pong, {label}: not measured (no CPU affinity here)")
            continue
        lines.append(f"process ping-pong, {label}: {p['round_trip_us']:.1f} us per round trip,"
                     f" {p['cpu_us']:.1f} us of this side's CPU")
    lines.append(f"fixed Python chunk back to back: {m['chunk_back_to_back_us']:.1f} us of CPU")
    for label, ratios in m["chunk_after_gap_ratio"].items():
        cells = ", ".join(f"{gap} ms x{r:.2f}" for gap, r in ratios.items())
        lines.append(f"  after a gap ({label}): {cells}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.machine", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=400, help="chunks per figure")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    m = measure(args.rounds)
    print(json.dumps(m, indent=2) if args.json else render(m))


if __name__ == "__main__":
    main()
