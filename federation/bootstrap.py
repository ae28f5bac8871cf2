"""The first start of a member with no database: new cluster, or lost disk?

A member that starts without a database cannot tell on its own whether its
cluster is new or whether it lost its disk; the second case is the
dangerous one, since a member that forgot its promises must be seeded and
recover before it votes (docs/federation.md, "A member that lost its disk").
So it asks every other member (the probe, ``/peer/v1/hello``) and decides
with :func:`decide`, a pure function of the answers:

1. A peer that serves a database of another cluster (its cluster id is not
   ours) is a configuration error: :class:`Refuse`, whatever else answered.
2. Any peer that serves a database holding this cluster's data (an op of
   another member, or a promise) may hold what this member lost with its
   own disk: :class:`Seed` from one of them. (A member that never had data
   loses nothing by being seeded; it only recovers before it votes.)
3. With ``--initial-cluster-state existing`` nothing more: :class:`Wait`
   until such a peer answers.
4. A peer that did not answer might be the one that holds the data:
   :class:`Wait`.
5. Every other member answered and none holds data: each is waiting too,
   or serves a database it bootstrapped moments ago and that holds nothing
   of anyone else (``fresh``). Whatever this member did before its disk
   went (if it had one), no live member kept a trace of it, and anything
   acknowledged or promised lives on a majority: so nothing was, and the
   member :class:`Bootstrap`s, with the fresh peers' cluster id or the
   agreed one. This is what lets members that start together, each a
   moment after the other, all start as new members rather than the later
   ones seeding from the first and recovering.

The cluster id comes from the configuration (``cluster init`` writes one)
or, for members started with upstream's flags only, from the member list
(:func:`derived_cluster_id`), which every member computes alike. It is
stored in every database, so a member can refuse a peer of another cluster.

This module decides; :mod:`daemon.replication.joining` asks, waits and carries out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

WAITING = "waiting"  # no database yet: deciding, like us
SERVING = "serving"  # a database of its cluster, serving it


@dataclass(frozen=True, slots=True)
class PeerView:
    """What one member answered to the probe (``answered=False``: nothing)."""

    node_id: str
    answered: bool
    state: str = ""  # WAITING or SERVING when answered
    cluster_id: str = ""  # its stored (serving) or configured (waiting) id; "" unknown
    why: str = ""  # why it did not answer, for the log and /health
    fresh: bool = False  # SERVING a database with nothing of other members (NodeCore.pristine)


@dataclass(frozen=True, slots=True)
class Bootstrap:
    cluster_id: str


@dataclass(frozen=True, slots=True)
class Seed:
    donors: tuple[str, ...]  # members serving this cluster's data, in the order to try


@dataclass(frozen=True, slots=True)
class Wait:
    reason: str
    waiting_for: tuple[str, ...]  # members whose answer would let us decide


@dataclass(frozen=True, slots=True)
class Refuse:
    reason: str


Decision = Bootstrap | Seed | Wait | Refuse


def derived_cluster_id(member_ids: Iterable[str]) -> str:
    """The cluster id of members that were given none: a digest of the
    sorted member ids, the same on every member of one configuration."""
    joined = "\n".join(sorted(set(member_ids)))
    return "m-" + hashlib.sha256(joined.encode()).hexdigest()[:24]


def decide(views: Sequence[PeerView], *, cluster_id: str, member_ids: Iterable[str],
           mode: str = "auto") -> Decision:
    """What a member with no database does next, given every other member's
    answer. ``cluster_id``: the configured one ("" if none); ``mode``:
    ``auto`` or ``existing`` (``new`` never asks)."""
    for v in views:
        if v.answered and v.state == SERVING and v.cluster_id and cluster_id \
                and v.cluster_id != cluster_id:
            return Refuse(f"{v.node_id} serves cluster {v.cluster_id}, not {cluster_id} "
                          "(this member's configuration names another cluster)")
    donors = tuple(sorted(v.node_id for v in views
                          if v.answered and v.state == SERVING and not v.fresh))
    if donors:
        return Seed(donors)
    if mode == "existing":
        return Wait("--initial-cluster-state existing: waiting for a member that holds "
                    "this cluster's data", tuple(sorted(v.node_id for v in views)))
    silent = tuple(sorted(v.node_id for v in views if not v.answered))
    if silent:
        return Wait("waiting for every member to answer before deciding whether the cluster "
                    "is new: " + ", ".join(_why(v) for v in views if not v.answered), silent)
    odd = [v for v in views if v.state not in (WAITING, SERVING)]
    if odd:
        return Wait("unexpected answers: " + ", ".join(f"{v.node_id} is {v.state!r}"
                                                       for v in odd),
                    tuple(v.node_id for v in odd))
    serving = {v.cluster_id for v in views if v.state == SERVING and v.cluster_id}
    if len(serving) == 1:  # a fresh member's stored id: the cluster already has one
        return Bootstrap(serving.pop())
    ids = {v.cluster_id for v in views if v.cluster_id} | ({cluster_id} if cluster_id else set())
    if len(ids) > 1:
        return Refuse("the members are configured for different clusters: "
                      + ", ".join(f"{v.node_id}: {v.cluster_id or '(none)'}" for v in views)
                      + f"; this member: {cluster_id or '(none)'}")
    return Bootstrap(ids.pop() if ids else derived_cluster_id(member_ids))


def _why(v: PeerView) -> str:
    return f"{v.node_id} ({v.why or 'no answer'})"


__all__ = ["SERVING", "WAITING", "Bootstrap", "Decision", "PeerView", "Refuse", "Seed",
           "Wait", "decide", "derived_cluster_id"]
