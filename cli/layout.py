"""The shape of a local or fresh cluster: node ids, addresses, databases, quorum.

``cluster up`` and ``cluster init`` both start from :func:`plan_cluster`,
so the two agree: node *i* (from 1) is ``node{i}``, listens on
``base_port + i - 1``, and lists every other node as a peer ``id=url``.
The write quorum is a majority, ``n // 2 + 1``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from common.errors import BadRequest

MAX_NODES = 15  # a claim needs a majority round trip; bigger clusters are out of scope
PORT_MAX = 65535


@dataclass(frozen=True, slots=True)
class NodeSpec:
    node_id: str
    host: str
    port: int
    db: Path
    tls: bool = False  # served over https, peers with mutual TLS (cluster init --tls)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"


def majority(n: int) -> int:
    return n // 2 + 1


def plan_cluster(
    nodes: int,
    base_port: int,
    hosts: tuple[str, ...],
    db_for: Callable[[str], Path],
    tls: bool = False,
) -> list[NodeSpec]:
    """One :class:`NodeSpec` per node; ``hosts`` holds one host for all or one per node."""
    if not 1 <= nodes <= MAX_NODES:
        raise BadRequest(f"--nodes must be between 1 and {MAX_NODES}")
    if not 1 <= base_port <= PORT_MAX - nodes + 1:
        raise BadRequest(f"--base-port leaves no room for {nodes} ports below {PORT_MAX + 1}")
    if len(hosts) not in (1, nodes):
        raise BadRequest(
            f"give one --host for every node or one for all ({len(hosts)} for {nodes})"
        )
    specs = []
    for i in range(1, nodes + 1):
        node_id = f"node{i}"
        host = hosts[0] if len(hosts) == 1 else hosts[i - 1]
        specs.append(NodeSpec(node_id, host, base_port + i - 1, db_for(node_id), tls))
    return specs


class DbPath:
    """Where a node's SQLite file lives: ``{data}/{node_id}.db`` or ``{data}/{node_id}/{name}``."""

    def __init__(self, data_dir: Path, per_node_dir: str | None = None) -> None:
        self.data_dir = data_dir
        self.per_node_dir = per_node_dir

    def __call__(self, node_id: str) -> Path:
        if self.per_node_dir:
            return self.data_dir / node_id / self.per_node_dir
        return self.data_dir / f"{node_id}.db"


def peer_entries(spec: NodeSpec, cluster: list[NodeSpec]) -> list[str]:
    """The other members as ``id=url`` entries, the form ``--quorum-peers`` takes."""
    return [f"{other.node_id}={other.url}" for other in cluster if other.node_id != spec.node_id]
