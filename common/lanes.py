"""Which lane of a node owns a key: the partition function (docs/lanes.md).

A node may run several *lanes*, each a process with its own SQLite file
and its own federation core, replicating only with the same lane on the
other members. Every op key (``common.ops``) belongs to exactly one lane,
and keys that one request reads or writes together belong to the same one:

===========================================  ===============================
op keys                                       partition token
===========================================  ===============================
``inbox:<agent>``, ``agent:<agent>``          the agent
``proj:<ws>/<p>``, ``mbox:<ws>/<p>``,         the project ``<ws>/<p>`` (a
``mbox:<ws>/<p>#handoff``                     project's handoff box with it)
``mem:<id>`` (a memory, its grants, the      the lane its id names
links from and to it)                         (:func:`lane_of_id`)
:data:`common.ops.IDENT_KEY`                  :data:`HOME_LANE`
any other key                                 the whole key
===========================================  ===============================

Some records are kept by *every* lane, each lane's group holding its own
copy, so that every lane reads them without a hop: the ops of
:data:`GLOBAL_KINDS` (sessions, which say a project exists; users, keys
and grants, which every request's key check reads). A write of one goes
to every lane (:func:`lanes_of_item`). Namespace subscriptions
(``nsub.put``) are with the memories, on the home lane, whatever their key.

A message's id names its lane too: ids are minted so that
:func:`lane_of_id` of the id is the lane of its mailbox (:func:`id_fits`),
so a request that names only a message id is placed without a lookup. A
memory's id is its key: ``mem:<id>`` is on the lane :func:`lane_of_id`
names, and a new memory's id is minted to name the lane of its namespace
(:func:`memory_placement`), so the memories of one namespace start on one
lane; one moved to another namespace later stays where its id says, which
is why memory listing and search fan out. A link is written under both
ends' keys, so each end's lane keeps it.

The token is hashed with BLAKE2b (never Python's salted ``hash``), and the
64-bit digest is placed with jump consistent hashing (Lamping and Veach,
2014): uniform over the lanes, and growing the count from ``n`` to ``n+1``
moves only the keys that land on the new lane, about one in ``n+1``. The
answer depends on nothing but the key, the lane count and
:data:`PARTITION_VERSION`; the lane count and the version are fixed per
cluster and recorded in every database, since a key placed by one rule is
not found by another.

:data:`common.ops.ALL_KEYS` spans every lane: a read for it fans out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Final

from common.handoffs import SUFFIX as HANDOFF_SUFFIX
from common.ops import (
    ALL_KEYS,
    APIKEY_PUT,
    IDENT_KEY,
    NSUB_PUT,
    PGRANT_PUT,
    PROJ_HIDE,
    SESSION_START,
    USER_PUT,
)

# Recorded beside the lane count; a new rule gets a new number. 2: memories
# by id over every lane (1 kept them all on the home lane).
PARTITION_VERSION: Final = 2
HOME_LANE: Final = 0  # the lane that owns the identity records (IDENT_KEY)
LANES_MAX: Final = 1024  # lanes per cluster, a sanity bound on configuration

_MASK64: Final = (1 << 64) - 1
_JUMP_MUL: Final = 2862933555777941757  # the 64-bit LCG multiplier of jump hashing
GLOBAL_KINDS: Final = frozenset({SESSION_START, PROJ_HIDE, USER_PUT, APIKEY_PUT, PGRANT_PUT})
HOME_KINDS: Final = frozenset({NSUB_PUT})
_AGENT_PREFIXES: Final = ("inbox:", "agent:")
_MEM_PREFIX: Final = "mem:"
_PROJECT_PREFIXES: Final = ("proj:", "mbox:")


def partition_token(key: str) -> str:
    """What of ``key`` decides its lane (the table in the module docstring)."""
    for prefix in _AGENT_PREFIXES:
        if key.startswith(prefix):
            return "agent\0" + key[len(prefix):]
    for prefix in _PROJECT_PREFIXES:
        if key.startswith(prefix):
            scope = key[len(prefix):]
            if scope.endswith(HANDOFF_SUFFIX):
                scope = scope[:-len(HANDOFF_SUFFIX)]
            return "project\0" + scope
    return "key\0" + key


def jump_hash(key: int, buckets: int) -> int:
    """Jump consistent hashing: ``key`` (64 bits) to one of ``buckets``."""
    if buckets < 1:
        raise ValueError(f"buckets must be positive, got {buckets}")
    key &= _MASK64
    b, j = -1, 0
    while j < buckets:
        b = j
        key = (key * _JUMP_MUL + 1) & _MASK64
        j = int((b + 1) * ((1 << 31) / ((key >> 33) + 1)))
    return b


def _digest(token: str) -> int:
    return int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "big")


def lane_of(key: str, lanes: int) -> int:
    """The lane, in ``range(lanes)``, that owns op key ``key``.

    ``ALL_KEYS`` has no one owner (a read for it fans out): ValueError.
    """
    if not 1 <= lanes <= LANES_MAX:
        raise ValueError(f"lanes must be 1..{LANES_MAX}, got {lanes}")
    if key == ALL_KEYS:
        raise ValueError("ALL_KEYS spans every lane: fan the read out instead")
    if lanes == 1 or key == IDENT_KEY:
        return HOME_LANE
    if key.startswith(_MEM_PREFIX):
        return lane_of_id(key[len(_MEM_PREFIX):], lanes)
    return jump_hash(_digest(partition_token(key)), lanes)


def memory_placement(namespace: str) -> str:
    """The key whose lane a new memory in ``namespace`` is minted for (its
    id is drawn until :func:`lane_of_id` names that lane: :func:`mint`)."""
    return "memns:" + namespace


def lanes_of_item(kind: str, key: str, lanes: int) -> range | tuple[int]:
    """The lanes a write item of ``kind`` under ``key`` goes to."""
    if kind in GLOBAL_KINDS:
        return range(lanes)
    if kind in HOME_KINDS:
        return (HOME_LANE,)
    return (lane_of(key, lanes),)


def lane_of_id(record_id: str, lanes: int) -> int:
    """The lane a message id names (see :func:`id_fits`)."""
    if lanes == 1:
        return HOME_LANE
    return jump_hash(_digest("id\0" + record_id), lanes)


def id_fits(record_id: str, key: str, lanes: int) -> bool:
    """True if ``record_id`` names the lane of ``key``: an id may be used for
    a record under ``key`` only then (mint another until it does: about
    ``lanes`` draws)."""
    return lanes == 1 or lane_of_id(record_id, lanes) == lane_of(key, lanes)


def mint(key: str, lanes: int, make: Callable[[int], str]) -> str:
    """An id for a record under ``key`` that names its lane: ``make(n)`` for
    n = 0, 1, ... until one fits (:func:`id_fits`). ``make`` draws a random id,
    or derives one from ``n`` (the n-th candidate of an Idempotency-Key), so
    a retry with the same key gets the same id."""
    n = 0
    while not id_fits(found := make(n), key, lanes):
        n += 1
    return found


def _lane_id_parts(cluster_id: str) -> tuple[int, int] | None:
    """(lane count, partition version) of ``<cluster>.lane<i>of<L>[p<V>]``;
    None for the id of a node without lanes."""
    head, sep, tail = cluster_id.rpartition(".lane")
    lane, of, rest = tail.partition("of")
    count, p, version = rest.partition("p")
    if (head and sep and of and lane.isdigit() and count.isdigit()
            and (not p or version.isdigit())):
        return int(count), int(version) if p else 1
    return None


def lanes_of_cluster_id(cluster_id: str) -> int | None:
    """The lane count a lane's cluster id names (``<cluster>.lane<i>of<L>``,
    :func:`daemon.lanes.layout.lane_cluster_id`): ``L``; 1 for the id of a
    node without lanes; None for no id."""
    if not cluster_id:
        return None
    parts = _lane_id_parts(cluster_id)
    return 1 if parts is None else parts[0]


def partition_of_cluster_id(cluster_id: str) -> int | None:
    """The partition rule a laned member's cluster id names (``p<V>``; 1
    where it names none, the ids of partition 1); None for a node without
    lanes (one partition whatever the rule) or no id."""
    parts = _lane_id_parts(cluster_id) if cluster_id else None
    return None if parts is None else parts[1]
