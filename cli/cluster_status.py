"""``cluster status``: one node's view of the cluster, checked against every member's own.

The node at ``--url`` is asked for ``/api/v1/cluster/status``; every member
it lists is then asked the same, in parallel, each within
``limits.cluster_status_timeout_secs``. A member that does not answer is
shown from what the first node knows of it (last contact, lag).

Columns: op-log position is the sum of the member's version vector; lag is
how many operations it lacks against the highest position any answering
member reports per origin; last contact is the first node's view. The
overall health is the first node's ``quorum_healthy`` (or, from a daemon
that does not report it, whether it reaches ``write_quorum`` members).
Member URLs come from ``members`` entries (``{"node_id", "url"}``, ``id=url``
or a URL) or from ``peers[id].url``. Owned mailboxes are shown as
``workspace/project@epoch`` (``--json`` keeps the keys, ``mbox:...``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from cli.client import ApiClient
from common import limits
from common.errors import AiMemoryError

STATUS_PATH = "/api/v1/cluster/status"
MAILBOXES_SHOWN = 3
MAILBOX_PREFIX = "mbox:"  # the key's prefix: the column already says these are mailboxes


@dataclass(slots=True)
class MemberView:
    node_id: str
    url: str | None
    status: dict[str, Any] | None = None
    error: str | None = None  # the whole story, printed under the table
    reason: str | None = None  # a word or two for the REACHABLE column

    @property
    def reachable(self) -> bool:
        return self.status is not None


def member_addresses(status: Mapping[str, Any], own_url: str) -> list[tuple[str, str | None]]:
    """(node id, url) of every member the status lists; the queried node first."""
    own_id = str(status.get("node_id", own_url))
    found: dict[str, str | None] = {own_id: own_url}
    for entry in status.get("members", []):
        node_id: str | None
        url: str | None
        if isinstance(entry, Mapping):
            node_id = entry.get("node_id") or entry.get("id")
            url = entry.get("url")
        elif isinstance(entry, str) and "=" in entry and not entry.startswith("http"):
            node_id, url = entry.split("=", 1)
        elif isinstance(entry, str) and entry.startswith("http"):
            node_id, url = None, entry
        else:
            node_id, url = str(entry), None
        if url:
            url = url.rstrip("/")
        if node_id is None:
            node_id = url or "?"
        if node_id not in found or (found[node_id] is None and url):
            found[node_id] = url
    peers = status.get("peers") or {}
    for node_id, url in found.items():
        peer = peers.get(node_id)
        if url is None and isinstance(peer, Mapping) and isinstance(peer.get("url"), str):
            found[node_id] = peer["url"].rstrip("/")
    return list(found.items())


def quorum_healthy(status: Mapping[str, Any]) -> bool:
    """The node's own verdict; older daemons only report how many members they reach."""
    if "quorum_healthy" in status:
        return bool(status["quorum_healthy"])
    reachable, needed = status.get("reachable"), status.get("write_quorum")
    return isinstance(reachable, int) and isinstance(needed, int) and reachable >= needed


def _last_contact_ms(peer: Mapping[str, Any]) -> Any:
    value = peer.get("last_contact_ms_ago")
    return value if value is not None else peer.get("last_heard_ms_ago")


def short_reason(exc: AiMemoryError) -> str:
    """What went wrong, in a word: the table cell stays narrow (the full text goes below it)."""
    text = exc.message.lower()
    if "refused" in text:
        return "refused"
    if "no answer" in text or "timed out" in text or "timeout" in text:
        return "timeout"
    if exc.code == "cannot_connect":
        return "unreachable"
    status = exc.details.get("status")
    return f"HTTP {status}" if status else exc.code


def collect(
    url: str, client_for: Callable[[str], ApiClient]
) -> tuple[dict[str, Any], list[MemberView]]:
    """Ask ``url`` (errors propagate: nothing to show without it), then every member."""
    first = client_for(url).get(STATUS_PATH)
    addresses = member_addresses(first, url.rstrip("/"))
    own_id = addresses[0][0]

    def ask(address: tuple[str, str | None]) -> MemberView:
        node_id, member_url = address
        if node_id == own_id:
            return MemberView(node_id, member_url, status=first)
        if member_url is None:
            return MemberView(node_id, None, error="no URL listed", reason="no url")
        try:
            reply = client_for(member_url).get(STATUS_PATH)
        except AiMemoryError as exc:
            return MemberView(node_id, member_url, error=exc.message, reason=short_reason(exc))
        if not isinstance(reply, dict):
            return MemberView(node_id, member_url, error="unexpected reply", reason="bad reply")
        return MemberView(node_id, member_url, status=reply)

    with ThreadPoolExecutor(max_workers=max(1, len(addresses))) as pool:
        views = list(pool.map(ask, addresses))
    return first, views


def default_client(url: str, api_key: str | None = None, key: str | None = None) -> ApiClient:
    """A client for one member, carrying the caller's key to every member (in
    keys mode each member's status needs it)."""
    return ApiClient(url, api_key=api_key, key=key, timeout=limits.cluster_status_timeout_secs)


def _vv(status: Mapping[str, Any] | None) -> dict[str, int]:
    raw = (status or {}).get("vv") or {}
    return {str(k): int(v) for k, v in raw.items()}


def _lanes(status: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """A node's status per lane (docs/lanes.md): its ``lanes``, or itself without lanes."""
    found = (status or {}).get("lanes")
    if isinstance(found, list) and found:
        return [lane for lane in found if isinstance(lane, Mapping)]
    return [status] if status is not None else []


def _references(first: Mapping[str, Any], views: list[MemberView]) -> list[dict[str, int]]:
    """Per lane, the newest position any member is known to hold of each origin."""
    peers: Mapping[str, Any] = first.get("peers") or {}
    references: list[dict[str, int]] = []

    def take(lane: int, vv: dict[str, int]) -> None:
        while len(references) <= lane:
            references.append({})
        for origin, seq in vv.items():
            references[lane][origin] = max(references[lane].get(origin, 0), seq)
    for view in views:
        for i, lane in enumerate(_lanes(view.status)):
            take(i, _vv(lane))
    for i, lane in enumerate(_lanes(first)):
        for p in (lane.get("peers") or {}).values():
            if isinstance(p, Mapping):
                take(i, _vv(p))
    if not references:
        references.append({})
    for p in peers.values():
        if isinstance(p, Mapping) and not first.get("lanes"):
            take(0, _vv(p))
    return references


def seen_by_lanes(first: Mapping[str, Any], node_id: str) -> dict[str, Any]:
    """What the queried node knows of member ``node_id``, over its lanes.

    Each lane links to the same lane of every member on its own, so each
    has its own last contact, round trip and copy of the member's position.
    Across them: the latest contact, the fastest round trip (every link
    crosses the same network; a slower one measured its own load too),
    ``far`` only where every lane that measured judges the member far
    (``far_lanes``: how many did, of ``measured_lanes``), and the positions
    and lags summed (each lane holds its own part of the operations).
    A node without lanes: its own view, as is."""
    lanes = [lane for lane in _lanes(first)
             if isinstance((lane.get("peers") or {}).get(node_id), Mapping)]
    seen = [lane["peers"][node_id] for lane in lanes]
    if not first.get("lanes") or not seen:
        return dict((first.get("peers") or {}).get(node_id) or {})
    merged: dict[str, Any] = {}
    contacts = [c for c in (_last_contact_ms(v) for v in seen) if isinstance(c, (int, float))]
    if contacts:
        merged["last_contact_ms_ago"] = min(contacts)
    measured = [v for v in seen if isinstance(v.get("round_trip_ms"), (int, float))]
    if measured:
        merged["round_trip_ms"] = min(v["round_trip_ms"] for v in measured)
        merged["far_lanes"] = sum(1 for v in measured if v.get("far"))
        merged["measured_lanes"] = len(measured)
        merged["far"] = merged["far_lanes"] == len(measured)
    if any(isinstance(v.get("vv"), Mapping) for v in seen):  # an idle lane's is empty
        merged["vv"] = {f"{origin}#{i}": seq for i, v in enumerate(seen)
                        for origin, seq in _vv(v).items()}
    lags = [v.get("lag_ops") for v in seen]
    if all(isinstance(lag, int) for lag in lags):
        merged["lag_ops"] = sum(lags)
    return merged


def rows(first: Mapping[str, Any], views: list[MemberView]) -> list[dict[str, Any]]:
    references = _references(first, views)
    own_id = views[0].node_id if views else None
    table: list[dict[str, Any]] = []
    for view in views:
        peer = seen_by_lanes(first, view.node_id)
        row: dict[str, Any] = {"node": view.node_id, "url": view.url or "-"}
        if view.node_id == own_id:
            row["contact"] = "self"
        elif _last_contact_ms(peer) is not None:
            row["contact"] = f"{int(_last_contact_ms(peer)) / 1000:.1f}s ago"
        else:
            row["contact"] = "never"
        row["rtt"] = _round_trip(peer) if view.node_id != own_id else "self"
        if view.status is not None:
            lanes = _lanes(view.status)
            row["reachable"] = "yes"
            row["version"] = view.status.get("version")
            row["lanes"] = len(lanes)
            row["position"] = sum(sum(_vv(lane).values()) for lane in lanes)
            row["lag"] = sum(max(0, seq - _vv(lane).get(origin, 0))
                             for i, lane in enumerate(lanes) if i < len(references)
                             for origin, seq in references[i].items())
            owned: dict[str, Any] = {}
            for lane in lanes:
                owned.update(lane.get("owned_mailboxes") or {})
            row["mailboxes"] = _mailboxes(owned)
            row["quorum"] = ("healthy" if all(quorum_healthy(lane) for lane in lanes)
                             else "NOT healthy")
        else:
            row["reachable"] = f"no ({view.reason or 'error'})"
            row["position"] = (sum(_vv(peer).values())
                               if isinstance(peer.get("vv"), Mapping) else None)
            row["lag"] = peer.get("lag_ops")
        table.append(row)
    return table


def _round_trip(peer: Mapping[str, Any]) -> str:
    """The queried node's estimate of the round trip to a member (its peer
    link's fastest lone request of the last 10-20 s), ``far`` at 20 ms or
    more, where the link may keep several requests in flight to it
    (docs/federation.md)."""
    ms = peer.get("round_trip_ms")
    if not isinstance(ms, (int, float)):
        return "-"
    far, of = peer.get("far_lanes"), peer.get("measured_lanes")
    if isinstance(far, int) and isinstance(of, int) and 0 < far < of:
        return f"{ms:.1f} ms far {far}/{of}"  # some lanes' links judge it far, not all
    return f"{ms:.1f} ms" + (" far" if peer.get("far") else "")


def _mailboxes(owned: Mapping[str, Any]) -> str:
    if not owned:
        return "-"
    items = [f"{box.removeprefix(MAILBOX_PREFIX)}@{epoch}" for box, epoch in sorted(owned.items())]
    shown = ", ".join(items[:MAILBOXES_SHOWN])
    more = len(items) - MAILBOXES_SHOWN
    return f"{shown} (+{more})" if more > 0 else shown


COLUMNS = [
    ("node", "NODE"),
    ("url", "URL"),
    ("reachable", "REACHABLE"),
    ("version", "VERSION"),
    ("lanes", "LANES"),
    ("position", "OPLOG POS"),
    ("lag", "LAG OPS"),
    ("contact", "LAST CONTACT"),
    ("rtt", "RTT"),
    ("mailboxes", "OWNED MAILBOXES@EPOCH"),
    ("quorum", "QUORUM"),
]


def columns(table: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The columns to show: LANES only when a node runs more than one lane."""
    if any((row.get("lanes") or 1) > 1 for row in table):
        return COLUMNS
    return [c for c in COLUMNS if c[0] != "lanes"]


def as_json(url: str, first: Mapping[str, Any], views: list[MemberView]) -> dict[str, Any]:
    return {
        "queried": url,
        "node_id": first.get("node_id"),
        "quorum_healthy": quorum_healthy(first),
        "write_quorum": first.get("write_quorum"),
        "members": [
            {
                "node_id": v.node_id,
                "url": v.url,
                "reachable": v.reachable,
                "error": v.error,
                "status": v.status,
            }
            for v in views
        ],
    }
