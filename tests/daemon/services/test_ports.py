"""The services run on their ports alone: no Node, a real SQLite store.

Each test hands a service a small object holding only the members its port
protocol (daemon/ports.py) names, so a service that reached for anything
else of the node would fail here with an AttributeError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.ops import AGENT_SEEN, ALL_KEYS, IDENT_KEY, Op, agent_key
from daemon.services import peer, system
from store.db import Store


def _ops(n: int) -> list[Op]:
    return [Op(origin="n1", seq=i, hlc=1000 + i, kind=AGENT_SEEN, key=agent_key(f"a{i}"),
               body={"agent_id": f"a{i}", "at_ms": 1000 + i}) for i in range(1, n + 1)]


@dataclass
class _Runner:
    settled: int = 0

    async def settle(self) -> None:
        self.settled += 1


@dataclass
class _PullPorts:
    store: Store
    runner: _Runner = field(default_factory=_Runner)


async def test_a_pull_answers_from_the_store_port_alone(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "n.db", "n1")
    try:
        await store.apply_ops(_ops(5), now_ms=2000)
        ports = _PullPorts(store)
        everything = await peer.pull(ports, ALL_KEYS, {})  # type: ignore[arg-type]
        assert sorted(op.seq for op in everything) == [1, 2, 3, 4, 5]
        lacking = await peer.pull(ports, ALL_KEYS, {"n1": 3})  # type: ignore[arg-type]
        assert sorted(op.seq for op in lacking) == [4, 5]
        one = await peer.pull(ports, agent_key("a2"), {})  # type: ignore[arg-type]
        assert [op.seq for op in one] == [2]
        assert ports.runner.settled == 0
        assert await peer.pull(ports, IDENT_KEY, {}) == []  # type: ignore[arg-type]
        assert ports.runner.settled == 1  # the directory's pull waits for the listeners
    finally:
        await store.close()


@dataclass
class _StatusPorts:
    store: Store
    peer_protocols: dict[str, Any]

    def status(self) -> dict[str, Any]:
        return {"node_id": "n1"}


async def test_cluster_status_reads_the_log_through_its_port(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "n.db", "n1")
    try:
        await store.apply_ops(_ops(3), now_ms=2000)
        out = await system.cluster_status(_StatusPorts(store, {"n2": 7}))
        assert out["node_id"] == "n1"
        assert out["oplog_ops"] == 3
        assert out["incarnation"] == await store.incarnation()
        assert out["peer_protocols"] == {"n2": 7}
    finally:
        await store.close()
