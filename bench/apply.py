"""``python -m bench.apply``: CPU per replicated ``note.new`` in the store.

A micro-benchmark of the replica's apply path alone (issue 10, notify
item 2): N ``note.new`` ops from a peer origin, applied in batches through
the real :class:`store.db.Store` (writer thread, op log, seen-set, WAL
commit) into a fresh database, one batch awaited at a time, the way a
peer's replication request arrives (``--concurrent K``: K calls in flight,
sharing writer batches, as several peers' requests do). Deterministic: the same ops every run
(fixed seed), so two builds compare on the same work.

Reports, per op: the whole process's CPU (``time.process_time``: the event
loop plus the writer thread) and the writer thread's own CPU
(``time.thread_time`` read on that thread before and after; a batch of
at most ``limits.writer_inline_ops_max`` ops commits on the event loop, so
keep ``--batch`` above it to time the thread), in
microseconds, plus wall time. The machine may be shared, so each figure is
the median of ``--runs`` runs, each into its own fresh database.

    .venv/bin/python -m bench.apply [--ops 20000] [--batch 50] [--concurrent 1] [--runs 3] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ops as K
from common.ops import Op
from store.db import Store

NOW_MS = 1_700_000_000_000
AGENTS = [f"bench/agent-{i}" for i in range(20)]


def make_ops(n: int, seed: int = 10) -> list[Op]:
    """``n`` note.new ops from origin ``peer``: 20 recipients, mixed
    priorities and tiers, one in four with a (future) expiry, one in ten
    whose read mark arrived first (``note.read`` ops, interleaved)."""
    rng = random.Random(seed)
    out: list[Op] = []
    seq = 0
    for i in range(n):
        seq += 1
        to = AGENTS[rng.randrange(len(AGENTS))]
        body: dict[str, Any] = {
            "id": f"note-{i:06d}", "from": "bench/sender", "to": to, "namespace": "inbox",
            "title": f"build {i} finished", "payload": "x" * rng.randrange(40, 200),
            "priority": rng.randrange(1, 11), "tier": rng.choice(("short", "mid", "long")),
            "created_at_ms": NOW_MS + i,
        }
        if rng.random() < 0.25:
            body["expires_at_ms"] = NOW_MS + 86_400_000
        out.append(Op("peer", seq, NOW_MS + i, K.NOTE_NEW, K.inbox_key(to), body))
    return out


def read_marks_first(ops: list[Op], every: int = 10) -> list[Op]:
    """Read marks for every ``every``-th note, ordered before the notes, so
    some new notes arrive already read (the EXISTS path does real work)."""
    marks = []
    origin_seq = 0
    for op in ops[::every]:
        origin_seq += 1
        marks.append(Op("reader", origin_seq, op.hlc, K.NOTE_READ, op.key,
                        {"to": op.body["to"], "ids": [op.body["id"]]}))
    return marks


async def one_run(ops: list[Op], marks: list[Op], batch: int, db: Path,
                  concurrent: int = 1) -> dict[str, float]:
    store = await Store.open(db, "bench-node")
    try:
        if marks:
            await store.apply_ops(marks, NOW_MS)
        thread_cpu = await store._writer.call(lambda conn: time.thread_time())
        cpu0, wall0 = time.process_time(), time.perf_counter()
        step = batch * concurrent
        for start in range(0, len(ops), step):
            await asyncio.gather(*(store.apply_ops(ops[i:i + batch], NOW_MS)
                                   for i in range(start, min(start + step, len(ops)), batch)))
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        thread_cpu = await store._writer.call(lambda conn: time.thread_time()) - thread_cpu
        check = sqlite3.connect(db)
        try:
            stored, read = check.execute("SELECT count(*), sum(read) FROM notes").fetchone()
        finally:
            check.close()
    finally:
        await store.close()
    if stored != len(ops) or read != len(marks):
        raise SystemExit(f"bench.apply: expected {len(ops)} notes ({len(marks)} read),"
                         f" found {stored} ({read})")
    n = len(ops)
    return {"cpu_us_per_op": cpu / n * 1e6, "writer_thread_us_per_op": thread_cpu / n * 1e6,
            "wall_us_per_op": wall / n * 1e6}


async def run(n: int, batch: int, runs: int, concurrent: int = 1) -> dict[str, Any]:
    ops = make_ops(n)
    marks = read_marks_first(ops)
    results = []
    for i in range(runs):
        with tempfile.TemporaryDirectory(prefix="bench-apply-") as tmp:
            results.append(await one_run(ops, marks, batch, Path(tmp) / f"run{i}.db",
                                         concurrent))
    medians = {k: statistics.median(r[k] for r in results) for k in results[0]}
    return {"ops": n, "batch": batch, "concurrent": concurrent, "runs": results,
            "median": medians}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.apply", description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=20_000, help="note.new ops per run")
    ap.add_argument("--batch", type=int, default=50, help="ops per apply_ops call")
    ap.add_argument("--concurrent", type=int, default=1,
                    help="apply_ops calls in flight at once (they share writer batches)")
    ap.add_argument("--runs", type=int, default=3, help="runs; the figures are their medians")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    out = asyncio.run(run(args.ops, args.batch, args.runs, args.concurrent))
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for i, r in enumerate(out["runs"], 1):
        print(f"run {i}: {r['cpu_us_per_op']:6.1f} us CPU/op, writer thread"
              f" {r['writer_thread_us_per_op']:6.1f} us/op, wall {r['wall_us_per_op']:6.1f} us/op")
    m = out["median"]
    print(f"median of {args.runs} ({args.ops} note.new in batches of {args.batch},"
          f" {args.concurrent} in flight):"
          f" {m['cpu_us_per_op']:.1f} us CPU/op, writer thread {m['writer_thread_us_per_op']:.1f}"
          f" us/op, wall {m['wall_us_per_op']:.1f} us/op")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
