"""Cluster status: the node's view plus its op log's figures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daemon.node import Node


async def cluster_status(node: Node) -> dict[str, Any]:
    status = node.status()
    stats = await node.store.stats()
    status["oplog"] = stats
    status["oplog_ops"] = stats.get("oplog_ops")
    return status
