"""CPU time the servers under test burn over a measured window, from /proc.

On a 2-core machine that runs three nodes and the load generator, the
throughput of a cluster mostly says how much CPU each operation costs all
of its processes together; this module measures that cost directly, so a
ratio holds across noisy runs and machines. ``/proc/<pid>/stat`` gives a
process's user and system time (every thread included) in clock ticks
(``SC_CLK_TCK``, 100 per second on Linux); a :class:`CpuProbe` reads it for
every watched process, and for the load generator itself, when the measured
window opens and when it closes. Several load-generator processes each
return a :class:`CpuWindow`; :func:`merge_windows` keeps the earliest start
and the latest end of the watched servers (the same cumulative counters,
read from different processes) and adds up the load generators' own time.

A watched process that is gone at either end makes the window unusable
(``None``), never a silently smaller figure.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_times(path: str) -> tuple[int, int]:
    with open(path, encoding="ascii") as f:
        # the command name (field 2) may hold spaces and parentheses
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])  # utime, stime (fields 14 and 15)


def cpu_times(pid: int | str) -> tuple[int, int]:
    """User and system CPU ticks a process has used so far (all threads)."""
    return _stat_times(f"/proc/{pid}/stat")


def cpu_ticks(pid: int | str) -> int:
    """User plus system CPU ticks a process has used so far (all threads)."""
    return sum(cpu_times(pid))


def thread_times(pid: int) -> dict[int, tuple[int, int]]:
    """User and system ticks of each live thread of a process, by thread id
    (the thread whose id is the pid is the main thread: the event loop)."""
    out: dict[int, tuple[int, int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[int(tid)] = _stat_times(f"/proc/{pid}/task/{tid}/stat")
        except OSError:  # the thread ended between listing and reading
            continue
    return out


def cpu_seconds(pid: int | str) -> float:
    return cpu_ticks(pid) / CLK_TCK


@dataclass
class CpuWindow:
    """Tick counters of the watched processes at both ends of a window."""

    t0: float  # time.time() when the window opened
    t1: float
    start: dict[str, tuple[int, int]]  # process name -> (user, system) ticks at t0
    end: dict[str, tuple[int, int]]
    client_ticks: int  # the load generator's own ticks over the window (summed over processes)
    client_procs: int = 1

    @property
    def wall_s(self) -> float:
        return self.t1 - self.t0

    def server_seconds(self) -> dict[str, float]:
        return {k: (sum(self.end[k]) - sum(self.start[k])) / CLK_TCK for k in sorted(self.start)}

    def system_seconds(self) -> float:
        """Kernel time of all watched processes (syscalls, loopback TCP, fsync)."""
        return sum(self.end[k][1] - self.start[k][1] for k in self.start) / CLK_TCK


@dataclass
class CpuProbe:
    """Reads the watched processes' counters at ``open()`` and ``close()``.

    ``pids`` are (name, pid) pairs. Reading is a few small file reads, cheap
    enough to do on the event loop at the window's edges.
    """

    pids: tuple[tuple[str, int], ...]
    _t0: float | None = None
    _start: dict[str, tuple[int, int]] = field(default_factory=dict)
    _self0: int = 0
    _failed: bool = False

    def _read(self) -> dict[str, tuple[int, int]] | None:
        try:
            return {name: cpu_times(pid) for name, pid in self.pids}
        except (OSError, ValueError, IndexError):
            return None

    def open(self) -> None:
        if not self.pids or self._t0 is not None:
            return
        got = self._read()
        self._t0 = time.time()
        self._self0 = cpu_ticks("self")
        if got is None:
            self._failed = True
        else:
            self._start = got

    def close(self) -> CpuWindow | None:
        if not self.pids or self._t0 is None or self._failed:
            return None
        got = self._read()
        t1 = time.time()
        if got is None:
            return None
        return CpuWindow(self._t0, t1, self._start, got, cpu_ticks("self") - self._self0)


def merge_windows(windows: Iterable[CpuWindow | None]) -> CpuWindow | None:
    """One window over the union of the load generators' windows."""
    ws = list(windows)
    if not ws or any(w is None for w in ws):
        return None
    real = [w for w in ws if w is not None]
    first = min(real, key=lambda w: w.t0)
    last = max(real, key=lambda w: w.t1)
    return CpuWindow(first.t0, last.t1, first.start, last.end,
                     sum(w.client_ticks for w in real), sum(w.client_procs for w in real))


def cpu_summary(w: CpuWindow | None, ops: int) -> dict[str, Any] | None:
    """What results.json keeps of a window: CPU per acknowledged operation.

    ``ops`` is the unit the workload is judged by (claims for send+pop,
    successful operations otherwise). ``ms_per_op`` is the CPU of every
    watched process together, in milliseconds, per such operation (with
    lanes: the supervisor and every lane process of every node);
    ``process_ms_per_op`` and ``process_cores`` are the same per process.
    """
    if w is None or w.wall_s <= 0:
        return None
    per = w.server_seconds()
    total = sum(per.values())
    client = w.client_ticks / CLK_TCK
    return {
        "window_s": w.wall_s,
        "server_cpu_s": total,
        "server_cores": total / w.wall_s,
        "server_system_share": (w.system_seconds() / total) if total > 0 else None,
        "process_cores": {k: v / w.wall_s for k, v in per.items()},
        "process_ms_per_op": {k: v * 1000.0 / ops for k, v in per.items()} if ops > 0 else None,
        "ops": ops,
        "ms_per_op": (total * 1000.0 / ops) if ops > 0 else None,
        "client_cpu_s": client,
        "client_ms_per_op": (client * 1000.0 / ops) if ops > 0 else None,
        "tick_s": 1.0 / CLK_TCK,
    }
