"""Agent registry: register, list, and the last-seen refresh.

Registration is an ``agent.reg`` op (type and capabilities last writer
wins, ``registered_at`` the earliest) plus an ``agent.seen`` at the same
time, in one quorum write, so a fresh agent has a real ``last_seen_at``.

Last seen: any API request that names a registered agent in ``X-Agent-Id``
should move its ``last_seen_at`` forward, but a replicated write per
request would multiply the cluster's write load. :class:`SeenThrottle`
lets through at most one refresh per agent per
``limits.agent_seen_refresh_secs`` on this node (remembering at most
``limits.agent_seen_tracked_max`` agents, oldest forgotten first), and the
refresh itself runs in the background (``Node.spawn``), so no request waits
on it. Because ``last_seen_at`` merges as a max, refreshes from different
nodes never conflict.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from common import limits
from common.errors import AiMemoryError
from common.ops import AGENT_REG, AGENT_SEEN, agent_key
from daemon.schemas.agents import RegisterAgent, agent_json

if TYPE_CHECKING:
    from daemon.ports import RecordPorts

log = logging.getLogger("ai_memory.agents")


async def register(node: RecordPorts, req: RegisterAgent) -> dict[str, Any]:
    now = node.now_ms()
    key = agent_key(req.agent_id)
    await node.write([
        (AGENT_REG, key, {"agent_id": req.agent_id, "agent_type": req.agent_type,
                          "capabilities": list(req.capabilities), "registered_at_ms": now}),
        (AGENT_SEEN, key, {"agent_id": req.agent_id, "at_ms": now}),
    ])
    row = await node.store.get_agent(req.agent_id)
    if row is None:  # pragma: no cover - the write above applied it locally
        row = {"agent_id": req.agent_id, "agent_type": req.agent_type,
               "capabilities": list(req.capabilities), "registered_at_ms": now,
               "last_seen_at_ms": now}
    return agent_json(row)


async def list_agents(node: RecordPorts) -> dict[str, Any]:
    agents = [agent_json(r) for r in await node.store.list_agents()]
    return {"agents": agents, "count": len(agents)}


class SeenThrottle:
    """Which agents are due a last-seen refresh on this node."""

    def __init__(self, interval_ms: int = int(limits.agent_seen_refresh_secs * 1000),
                 max_tracked: int = limits.agent_seen_tracked_max) -> None:
        self.interval_ms = interval_ms
        self.max_tracked = max_tracked
        self._last: OrderedDict[str, int] = OrderedDict()

    def due(self, agent_id: str, now_ms: int) -> bool:
        last = self._last.get(agent_id)
        if last is not None and 0 <= now_ms - last < self.interval_ms:
            return False
        self._last[agent_id] = now_ms
        self._last.move_to_end(agent_id)
        while len(self._last) > self.max_tracked:
            self._last.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._last)


async def refresh_seen(node: RecordPorts, agent_id: str) -> bool:
    """Write ``agent.seen`` for a registered agent; False if it is not one.
    Failures are logged, not raised: the op, if written, still spreads."""
    try:
        lane = node.lane_elsewhere(agent_key(agent_id))
        if lane is not None:  # its record is on another lane of this node
            return bool(await node.lane_call(lane, "seen", agent_id))
        if await node.store.get_agent(agent_id) is None:
            return False
        await node.write([(AGENT_SEEN, agent_key(agent_id),
                           {"agent_id": agent_id, "at_ms": node.now_ms()})])
    except AiMemoryError as exc:
        log.debug("last_seen refresh for %s not acknowledged: %s", agent_id, exc.message)
    return True
