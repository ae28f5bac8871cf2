"""Timing check: ``Store.inbox(limit=50)`` on a 100k-notification inbox.

Fills one agent's inbox (plus some noise for other agents, a share already
read and a share expired) through the real write path, then times inbox
reads the way the daemon issues them and prints p50/p99/max per variant.
Also reports write throughput of the fill (group commit, concurrent jobs).

    .venv/bin/python -m bench.store_inbox [--notes 100000] [--reads 2000] [--db PATH]

Not a test: numbers depend on the machine. Target: p99 < 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import tempfile
import time

from common import ops as K
from common.ops import Op
from store.db import Store
from store.queries import NOTE_COLS

NOW_MS = 1_000_000_000
AGENT = "bench/bob"


def _note(seq: int, to: str) -> Op:
    return Op("bench", seq, seq, K.NOTE_NEW, K.inbox_key(to), {
        "id": f"n{seq}", "from": "bench/alice", "to": to, "namespace": "inbox",
        "title": f"note {seq}", "payload": "p" * 120, "priority": 1 + seq % 10, "tier": "mid",
        "created_at_ms": NOW_MS - 10 * seq,
        # one in twenty expired relative to NOW_MS (not yet purged)
        "expires_at_ms": NOW_MS - 1 if seq % 20 == 0 else NOW_MS + 3_600_000})


async def fill(store: Store, notes: int, batch: int, concurrency: int) -> float:
    seq = 0
    started = time.perf_counter()

    async def one_batch(first: int) -> None:
        ops = [_note(first + i, AGENT if (first + i) % 5 else "bench/other") for i in range(batch)]
        await store.apply_ops(ops, 0)

    total = notes * 5 // 4  # 4 of 5 go to AGENT
    while seq < total:
        firsts = [seq + 1 + i * batch for i in range(concurrency) if seq + i * batch < total]
        await asyncio.gather(*(one_batch(f) for f in firsts))
        seq += batch * len(firsts)
    # mark every third note to AGENT read
    reads = [f"n{s}" for s in range(1, seq + 1) if s % 3 == 0 and s % 5]
    for i in range(0, len(reads), 500):
        seq += 1
        await store.apply_ops([Op("bench", seq, seq, K.NOTE_READ, K.inbox_key(AGENT),
                                  {"to": AGENT, "ids": reads[i:i + 500]})], 0)
    return time.perf_counter() - started


def _pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


async def time_reads(store: Store, reads: int) -> None:
    variants = {
        "all, limit 50": {"unread_only": False},
        "unread, limit 50": {"unread_only": True},
        "unread, min_priority 8": {"unread_only": True, "min_priority": 8},
        "since (recent half)": {"unread_only": False, "since_ms": NOW_MS - 500_000},
    }
    for name, kw in variants.items():
        samples = []
        for _ in range(reads):
            t0 = time.perf_counter()
            rows = await store.inbox(AGENT, limit=50, now_ms=NOW_MS, **kw)  # type: ignore[arg-type]
            samples.append((time.perf_counter() - t0) * 1000)
        assert len(rows) == 50
        print(f"  inbox {name:<24} p50 {statistics.median(samples):6.3f} ms"
              f"  p99 {_pct(samples, 0.99):6.3f} ms  max {max(samples):6.3f} ms")
    # The same query on a plain connection in this thread: SQLite's own cost,
    # without the hop to the reader thread (which is where tails come from
    # when the machine is busy).
    conn = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
    try:
        sql = (f"SELECT {NOTE_COLS} FROM notes WHERE to_agent = ? AND read = 0"
               " AND (expires_at_ms IS NULL OR expires_at_ms > ?)"
               " ORDER BY priority DESC, created_at_ms DESC, id DESC LIMIT 50")
        samples = []
        for _ in range(reads):
            t0 = time.perf_counter()
            conn.execute(sql, (AGENT, NOW_MS)).fetchall()
            samples.append((time.perf_counter() - t0) * 1000)
    finally:
        conn.close()
    print(f"  raw SQL (unread, no hop)       p50 {statistics.median(samples):6.3f} ms"
          f"  p99 {_pct(samples, 0.99):6.3f} ms  max {max(samples):6.3f} ms")
    t0 = time.perf_counter()
    count = await store.inbox_count(AGENT, unread_only=True, now_ms=NOW_MS)
    print(f"  inbox_count(unread) = {count}  in {(time.perf_counter() - t0) * 1000:.2f} ms")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=int, default=100_000, help="notifications to the agent")
    ap.add_argument("--reads", type=int, default=2000, help="timed reads per variant")
    ap.add_argument("--db", help="database path (default: a temporary file)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or os.path.join(tmp, "bench.db")
        store = await Store.open(path, "bench")
        try:
            secs = await fill(store, args.notes, batch=500, concurrency=8)
            stats = await store.stats()
            n = stats["tables"]["notes"]
            print(f"filled {n} notifications ({args.notes} to {AGENT}) in {secs:.1f} s"
                  f" = {n / secs:,.0f} ops/s; db {stats['db_bytes'] / 1e6:.1f} MB,"
                  f" {stats['writer']['batches']} commits")
            await time_reads(store, args.reads)
        finally:
            await store.close()


if __name__ == "__main__":
    asyncio.run(main())
