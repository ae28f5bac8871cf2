"""Lanes as real SQLite stores behind a minimal fake node: enough to drive
:mod:`daemon.services.memory_lanes` and the services that use it in one
process (the real lanes are tested in tests/cluster/test_lanes_memories.py)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from common.lanes import lane_of
from common.ops import MEM_PUT, Op, mem_key
from daemon.services import memory_lanes
from store.db import Store

NOW = 1_000_000


class FakeLane:
    def __init__(self, lane: int, lanes: int, store: Store) -> None:
        self.lane, self.lanes, self.store = lane, lanes, store
        self.siblings: list[FakeLane] = []
        self.settings = SimpleNamespace(server=SimpleNamespace(lanes=lanes, lane=lane))
        self.node_id = "n1"
        self.calls: list[tuple[str, Any]] = []

    def now_ms(self) -> int:
        return NOW

    async def read_barrier(self, key: str, consistency: str = "quorum") -> None:
        return None

    def lane_elsewhere(self, key: str) -> int | None:
        if self.lanes == 1:
            return None
        lane = lane_of(key, self.lanes)
        return None if lane == self.lane else lane

    async def lane_call(self, lane: int, name: str, payload: Any) -> Any:
        assert name == "mem"
        other = next(s for s in self.siblings if s.lane == lane)
        other.calls.append((payload[0], payload[1]))
        return await memory_lanes.here(other, payload[0], dict(payload[1]))

    async def every_other_lane(self, name: str, payload: Any) -> list[Any]:
        out = []
        for s in self.siblings:
            s.calls.append((payload[0], payload[1]))
            out.append(await memory_lanes.here(s, payload[0], dict(payload[1])))
        return out


async def open_lanes(tmp: Path, lanes: int = 2) -> list[FakeLane]:
    out = []
    for i in range(lanes):
        out.append(FakeLane(i, lanes, await Store.open(tmp / f"lane{i}.db", "n1")))
    for f in out:
        f.siblings = [s for s in out if s is not f]
    return out


_seq = {"n": 0}


async def put_memory(lanes: list[FakeLane], mid: str, **fields: Any) -> None:
    """Apply a mem.put on the lane its id names."""
    _seq["n"] += 1
    lane = lane_of(mem_key(mid), len(lanes))
    body = {"id": mid, "title": mid, "content": "c", "tier": "long", "namespace": "ns",
            "tags": [], "priority": 5, "confidence": 1.0, "source": "api", "metadata": {},
            "agent_id": None, "created_at_ms": 1, "updated_at_ms": 1, "expires_at_ms": None}
    body.update(fields)
    await lanes[lane].store.apply_ops(
        [Op("n1", _seq["n"], _seq["n"] << 16, MEM_PUT, mem_key(mid), body)], NOW)


def ids_on(lane: int, lanes: int, n: int, prefix: str = "m") -> list[str]:
    out, i = [], 0
    while len(out) < n:
        mid = f"{prefix}{i}"
        if lane_of(mem_key(mid), lanes) == lane:
            out.append(mid)
        i += 1
    return out
