"""What the peer endpoints do with an authenticated peer's request.

``receive`` feeds core messages to this node (a standalone node, started
with no peers, only stores replication pushed at it; see
``NodeCore.on_foreign_push``); ``pull`` answers a read-quorum pull with the
ops for one key that the caller's version vector lacks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from store.ops import Op

if TYPE_CHECKING:
    from daemon.node import Node


async def receive(node: Node, peer: str, msgs: list[Any]) -> list[Any]:
    if node.settings.cluster.peers:
        return await node.receive(peer, msgs)
    replies: list[Any] = []
    for msg in msgs:
        await node.run(node.core.on_foreign_push(peer, msg, node.now_ms()),
                       reply_peer=peer, replies=replies)
    return replies


async def pull(node: Node, key: str, vv: dict[str, int]) -> list[Op]:
    return await node.store.ops_for_key(key, vv)
