"""Agents' namespace subscriptions: upstream's other shape of
``/subscriptions`` (``{"agent_id", "namespace"}``, no URL).

Each is an ``nsub.put`` op under the agent's ``agent:<id>`` key,
last-writer-wins per (agent, namespace), so it is replicated and readable on
every node (the list passes the read barrier for that key). Unsubscribing
writes the same record with ``active`` false. They are records of interest
only: no notification or webhook is generated from them yet (webhook
subscriptions, with a URL, are what deliver events).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common.ops import ALL_KEYS, NSUB_PUT, agent_key
from common.vocab import CONSISTENCY_DEFAULT, Consistency
from daemon.schemas.timefmt import rfc3339
from store import search as S

if TYPE_CHECKING:
    from daemon.ports import RecordPorts


async def subscribe(node: RecordPorts, agent_id: str, namespace: str) -> dict[str, Any]:
    now = node.now_ms()
    await node.write([(NSUB_PUT, agent_key(agent_id), {
        "agent_id": agent_id, "namespace": namespace, "active": True, "at_ms": now})])
    return {"subscribed": True, "agent_id": agent_id, "namespace": namespace,
            "created_at": rfc3339(now)}


def _key(node: RecordPorts, agent_id: str) -> str:
    """The read barrier's key: with lanes these records are on the home lane
    whatever the agent's lane (``common.lanes.HOME_KINDS``), so the barrier
    covers the home lane's keys."""
    return agent_key(agent_id) if node.settings.server.lanes == 1 else ALL_KEYS


async def unsubscribe(node: RecordPorts, agent_id: str, namespace: str) -> dict[str, Any]:
    await node.read_barrier(_key(node, agent_id))
    held = {s["namespace"] for s in await S.namespace_subscriptions(node.store.reads, agent_id)}
    if namespace in held:
        await node.write([(NSUB_PUT, agent_key(agent_id), {
            "agent_id": agent_id, "namespace": namespace, "active": False,
            "at_ms": node.now_ms()})])
    return {"unsubscribed": namespace in held, "agent_id": agent_id, "namespace": namespace}


async def list_for(node: RecordPorts, agent_id: str, consistency: Consistency = CONSISTENCY_DEFAULT) -> dict[str, Any]:
    await node.read_barrier(_key(node, agent_id), consistency)
    rows = await S.namespace_subscriptions(node.store.reads, agent_id)
    subs = [{"agent_id": r["agent_id"], "namespace": r["namespace"],
             "created_at": rfc3339(r["at_ms"])} for r in rows]
    return {"agent_id": agent_id, "subscriptions": subs,
            "namespaces": [s["namespace"] for s in subs], "count": len(subs)}
