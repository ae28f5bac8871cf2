"""Every acknowledged write survives kill -9 of the writing process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from store.db import Store

CHILD = Path(__file__).with_name("durability_child.py")
ROOT = Path(__file__).resolve().parents[2]


def run_and_kill(path: Path, writers: int, acks_before_kill: int) -> set[tuple[str, int]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(CHILD), str(path), str(writers)],
                            stdout=subprocess.PIPE, text=True, env=env)
    acked: set[tuple[str, int]] = set()
    try:
        assert proc.stdout is not None
        while len(acked) < acks_before_kill:
            line = proc.stdout.readline()
            assert line, f"child exited early with {proc.poll()}"
            origin, seq = line.split()
            acked.add((origin, int(seq)))
        proc.send_signal(signal.SIGKILL)  # mid-stream: more writes are in flight
        rest, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for line in rest.splitlines():  # acks printed before the signal landed
        if line.strip():
            origin, seq = line.split()
            acked.add((origin, int(seq)))
    assert proc.returncode == -signal.SIGKILL
    return acked


def test_acknowledged_ops_survive_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "node.db"
    acked = run_and_kill(path, writers=16, acks_before_kill=3000)

    async def check() -> None:
        store = await Store.open(path, "child")
        try:
            held = {op.op_id for op in await store.ops_missing({}, 1_000_000)}
            assert acked <= held
            vv = store.version_vector()
            assert all(seq <= vv.get(origin, 0) for origin, seq in acked)
            ids = [f"{o}-{s}" for o, s in sorted(acked)]
            found = await store.notifications(ids)
            assert len(found) == len(acked)
            assert all(n["payload"] == "x" * 200 for n in found)
        finally:
            await store.close()

    asyncio.run(check())
