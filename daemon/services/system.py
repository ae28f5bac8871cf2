"""Cluster status: the node's view plus its op log's figures, its database
incarnation and the peer protocol versions it has heard."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from federation.messages import PROTOCOL_VERSION

if TYPE_CHECKING:
    from daemon.ports import StatusPorts


async def cluster_status(node: StatusPorts) -> dict[str, Any]:
    status = node.status()
    stats = await node.store.stats()
    status["oplog"] = stats
    status["oplog_ops"] = stats.get("oplog_ops")
    status["incarnation"] = await node.store.incarnation()
    status["protocol"] = PROTOCOL_VERSION
    status["peer_protocols"] = dict(node.peer_protocols)
    return status
