"""What the peer endpoints do with an authenticated peer's request.

``receive`` hands forwarded mailbox requests and their answers to the
mailbox router and feeds the core messages to this node (a standalone node, started
with no peers, only stores replication pushed at it; see
``NodeCore.on_foreign_push``); ``pull`` answers a read-quorum pull with the
ops for one key that the caller's version vector lacks, or for
:data:`common.ops.ALL_KEYS` every op it lacks (at most
``limits.all_keys_pull_max``; reads that span records, such as a search);
``collected`` is what the first-start probe's answer says GC took.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common import limits
from common.ops import ALL_KEYS, IDENT_KEY, Op

if TYPE_CHECKING:
    from daemon.ports import PeerPorts


async def receive(node: PeerPorts, peer: str, msgs: list[Any], incarnation: str = "") -> list[Any]:
    """``msgs`` from ``peer``'s process of ``incarnation`` ("": unsaid)."""
    msgs = node.router.take_forwards(peer, msgs, incarnation)  # forwarded requests and answers
    if node.settings.cluster.peers:
        return await node.receive(peer, msgs, incarnation)
    replies: list[Any] = []
    for msg in msgs:
        await node.run(node.core.on_foreign_push(peer, msg, node.now_ms()),
                       reply_peer=peer, replies=replies)
    return replies


async def collected(node: PeerPorts) -> dict[str, int]:
    """What this node's op log has collected, per origin, for the hello: a
    member starting on a copy asks (daemon/replication/joining.py). A GC
    the core has handed over but the writer has not yet run counts too:
    what it deletes is gone as far as the asker is concerned."""
    floors = await node.store.collected_floor()
    for origin, seq in node.core.collect_floor.items():
        if seq > floors.get(origin, 0):
            floors[origin] = seq
    return floors


async def pull(node: PeerPorts, key: str, vv: dict[str, int]) -> list[Op]:
    if key == IDENT_KEY:
        # Answer for the directory only once every persist handed over has
        # run its applied-op listeners: an identity op this answer shows is
        # one this node's directory already acts on (daemon/identity/admin.py
        # acknowledges a revocation on such answers).
        await node.runner.settle()
    if key == ALL_KEYS:
        # Not cut by bytes: the answer is a response, which no limit refuses,
        # and the reader cannot tell a cut answer from a whole one.
        return await node.store.ops_missing(vv, limits.all_keys_pull_max)
    return await node.store.ops_for_key(key, vv)
