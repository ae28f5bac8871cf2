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

A member that starts on a copy that must recover (put in place by
``ai-memory restore``, or seeded and not yet recovered) asks the same
question differently: can the others still give it what the copy lacks?
Anti-entropy streams only ops still in a log, and while the copy sat on a
shelf the others may have collected ops it lacks: the floors they
collected by were offers of the member's previous disk, which held them.
:func:`lost_to_collection` says which, from the floors the members that
took its ``Reseeding`` report (they collect nothing more over it until it
has recovered); a copy that lacks any is set aside and the member is seeded
instead, as if its disk were lost.

This module decides; :mod:`daemon.replication.joining` asks, waits and carries out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

WAITING = "waiting"  # no database yet: deciding, like us
SERVING = "serving"  # a database of its cluster, serving it
CHECKING = "checking"  # a copy that must recover: asking whether it can (decide_copy)


@dataclass(frozen=True, slots=True)
class PeerView:
    """What one member answered to the probe (``answered=False``: nothing)."""

    node_id: str
    answered: bool
    state: str = ""  # WAITING or SERVING when answered
    cluster_id: str = ""  # its stored (serving) or configured (waiting) id; "" unknown
    why: str = ""  # why it did not answer, for the log and /health
    fresh: bool = False  # SERVING a database with nothing of other members (NodeCore.pristine)
    # SERVING: per origin, the ops its op log no longer holds (1..floor were
    # collected, store.db.Store.collected_floor); None: it did not say (an older build)
    collected: dict[str, int] | None = None


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
    checking = [v for v in views if v.state == CHECKING]
    if checking:  # it holds a copy of the cluster's data: never bootstrap beside it
        return Wait("waiting for " + ", ".join(v.node_id for v in checking) + " to finish "
                    "checking the database it starts on", tuple(v.node_id for v in checking))
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


def lost_to_collection(copy_vv: Mapping[str, int], views: Sequence[PeerView],
                       took: Iterable[str]) -> dict[str, tuple[int, int]]:
    """Per origin, the ops ``(have, floor]`` a copy with vector ``copy_vv``
    lacks and no member in ``took`` still holds in its log: every one of
    them has collected past ``have``. Those members (the ones that took the
    copy's ``Reseeding``) collect nothing more over the member until it
    has recovered, so one whose floor is at most ``have`` can give it every
    op of that origin it holds. Empty: the copy can catch up (or no member
    that took the message said what it collected, and nothing is known)."""
    holders = [v.collected for v in views
               if v.node_id in set(took) and v.answered and v.state == SERVING
               and v.collected is not None]
    if not holders:
        return {}
    lost: dict[str, tuple[int, int]] = {}
    for origin in sorted(set().union(*holders)):
        have = copy_vv.get(origin, 0)
        floor = min(h.get(origin, 0) for h in holders)
        if floor > have:
            lost[origin] = (have, floor)
    return lost


@dataclass(frozen=True, slots=True)
class KeepCopy:
    """Recover from the copy: the others can give it what it lacks."""


@dataclass(frozen=True, slots=True)
class SetAside:
    """The copy lacks ops no member still logs: per origin, ``(have, floor]``."""

    lost: dict[str, tuple[int, int]]


def decide_copy(copy_vv: Mapping[str, int], views: Sequence[PeerView],
                took: Iterable[str]) -> KeepCopy | SetAside | Wait:
    """What a member whose database must recover does before it serves.

    A member serving its database that took the ``Reseeding`` and said what
    it collected settles it (:func:`lost_to_collection`). Without one, a
    silent member, or one serving that did not take the message, might be
    one that collected past the copy: wait for it. Every other member
    answering without a database of its own to
    serve (deciding at a first start, or checking a copy too: a whole
    cluster put back from backups) collected nothing it could lack, and an
    older build serving without saying lets nothing be known: keep it."""
    took = set(took)
    holders = [v for v in views if v.node_id in took and v.answered and v.state == SERVING
               and v.collected is not None]
    if holders:
        lost = lost_to_collection(copy_vv, holders, took)
        return SetAside(lost) if lost else KeepCopy()
    # A member that answers but did not take the message may be serving
    # and collecting over the copy still: as good as silent.
    unknown = [v for v in views if not v.answered or (v.state == SERVING
                                                       and v.node_id not in took)]
    if unknown:
        return Wait("this member's database must recover: waiting for a member that can say "
                    "whether the others still hold what it lacks: "
                    + ", ".join(_why(v) if not v.answered else f"{v.node_id} (did not take "
                                "Reseeding)" for v in unknown),
                    tuple(sorted(v.node_id for v in unknown)))
    return KeepCopy()


def _why(v: PeerView) -> str:
    return f"{v.node_id} ({v.why or 'no answer'})"


__all__ = ["CHECKING", "SERVING", "WAITING", "Bootstrap", "Decision", "KeepCopy", "PeerView",
           "Refuse", "Seed", "SetAside", "Wait", "decide", "decide_copy", "derived_cluster_id",
           "lost_to_collection"]
