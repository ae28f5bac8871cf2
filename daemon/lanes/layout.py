"""Where lane ``i`` of a node lives: its ports, database, peers and settings (pure).

A node with ``L > 1`` lanes runs ``L`` lane processes. Lane ``i`` of every
member forms a replica group of its own, so lane ``i``'s settings are the
node's with:

* its own database: the configured file for lane 0, ``<stem>.lane<i><suffix>``
  beside it for the others;
* its own port for its peers (and for clients that go straight to it):
  ``port + lane_port_offset * (i + 1)``; every member derives the other
  members' lane ports from their one URL the same way, so the member list
  stays one URL per member;
* peers that are lane ``i`` of the other members;
* a cluster id that names the lane (``<cluster>.lane<i>of<L>p<V>``, V the
  partition rule), so a lane never joins or replicates with another lane,
  nor with a node of another lane count or rule (the existing cluster id
  checks refuse it).

The client port stays the node's one port: every lane accepts on it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit, urlunsplit

from common.errors import ClusterMismatch
from common.lanes import PARTITION_VERSION
from daemon.settings import Member, Settings, lane_port
from federation.bootstrap import derived_cluster_id

SOCKET_NAME: Final = "lane{}.sock"  # in the supervisor's private directory


def lane_url(url: str, lane: int, offset: int) -> str:
    """A member's URL, moved to lane ``lane``'s port."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return urlunsplit((parts.scheme, f"{host}:{lane_port(port, lane, offset)}", parts.path, "", ""))


def lane_db_path(path: str, lane: int) -> str:
    if lane == 0:
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}.lane{lane}{p.suffix}"))


def lane_cluster_id(cluster_id: str, lane: int, lanes: int) -> str:
    """Lane ``lane``'s cluster id: it names the lane count and, from partition
    2 on, the partition rule, so members that would place keys on other
    lanes refuse each other."""
    version = f"p{PARTITION_VERSION}" if PARTITION_VERSION > 1 else ""
    return f"{cluster_id}.lane{lane}of{lanes}{version}"


def layout_value(lane: int, lanes: int) -> str:
    """What a lane's database records of its place (``Store.lane_layout``)."""
    return f"{lane}/{lanes}/{PARTITION_VERSION}"


def check_layout(stored: str, lane: int, lanes: int, db_path: str, *, fresh: bool) -> None:
    """Refuse a database recorded for another lane, lane count or partition rule.

    A database that records nothing is a node's without lanes (lane 0 of 1),
    unless it was just created."""
    if not stored:
        if fresh:
            return
        stored = layout_value(0, 1)
    if stored == layout_value(lane, lanes) or (lanes == 1 and stored.startswith("0/1/")):
        return  # (a node without lanes has one partition whatever the rule's version)
    try:
        s_lane, s_lanes, s_version = (int(x) for x in stored.split("/"))
    except ValueError:
        raise ClusterMismatch(f"the database at {db_path} records an unreadable lane "
                              f"layout {stored!r}") from None
    raise ClusterMismatch(
        f"the database at {db_path} is lane {s_lane} of {s_lanes} (partition {s_version}); "
        f"this process is lane {lane} of {lanes} (partition {PARTITION_VERSION}): a node's "
        "lane count is fixed per cluster and changes only offline (docs/lanes.md, "
        "\"Changing the lane count\")")


def lane_settings(settings: Settings, lane: int) -> Settings:
    """The settings lane ``lane`` of this node runs with."""
    s, c = settings.server, settings.cluster
    if s.lanes == 1:
        return settings
    base_id = c.cluster_id or derived_cluster_id(c.member_ids)
    peers = tuple(Member(p.node_id, lane_url(p.url, lane, s.lane_port_offset)) for p in c.peers)
    return replace(
        settings,
        server=replace(s, lane=lane),
        store=replace(settings.store, db_path=lane_db_path(settings.store.db_path, lane)),
        webhooks=(replace(settings.webhooks, db_path=lane_db_path(settings.webhooks.db_path, lane))
                  if settings.webhooks.db_path else settings.webhooks),  # a side file per lane
        cluster=replace(c, peers=peers, cluster_id=lane_cluster_id(base_id, lane, s.lanes)))


def socket_path(lane_dir: str, lane: int) -> str:
    return str(Path(lane_dir) / SOCKET_NAME.format(lane))
