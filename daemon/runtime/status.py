"""What ``ai-memory cluster status`` shows for this member.

The core's view (members, who seems alive, version vector, mailboxes owned)
plus what only the daemon knows: addresses, version, uptime, each peer
link's estimate of the round trip (``round_trip_ms``, ``far``), and the field
names the status contract uses (``reachable``, ``last_contact_ms_ago``,
``quorum_healthy``, ``oplog_position``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from daemon.settings import Settings
from federation.core import NodeCore


def node_status(settings: Settings, core: NodeCore, now_ms: int, started_at_ms: int,
                round_trips: Mapping[str, tuple[float | None, bool]] | None = None,
                ) -> dict[str, Any]:
    """``round_trips``: per peer, its link's estimate of the round trip in
    seconds (None before a sample) and whether the link counts it far."""
    out: dict[str, Any] = dict(core.status(now_ms))
    urls = {p.node_id: p.url for p in settings.cluster.peers}
    for peer_id, view in out.get("peers", {}).items():
        view["url"] = urls.get(peer_id)
        view["reachable"] = bool(view.get("alive"))
        view["last_contact_ms_ago"] = view.get("last_heard_ms_ago")
        if round_trips and peer_id in round_trips:  # daemon/peer/pacing.py
            floor, far = round_trips[peer_id]
            view["round_trip_ms"] = None if floor is None else round(floor * 1000, 2)
            view["far"] = far
    reachable = int(out.get("reachable", 1))
    c = settings.cluster
    out.update(
        node_id=settings.cluster.node_id,
        url=f"http://{settings.server.host}:{settings.server.port}",
        version=settings.version,
        write_quorum=c.w,
        quorum_healthy=reachable >= max(c.w, len(c.member_ids) // 2 + 1),
        oplog_position=sum(out.get("vv", {}).values()),
        uptime_secs=(now_ms - started_at_ms) / 1000,
    )
    return out
