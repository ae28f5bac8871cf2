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
``mem:<id>``                                  the memory id (its links and
                                              grants are keyed by it too)
:data:`common.ops.IDENT_KEY`                  :data:`HOME_LANE` (users,
                                              keys and grants; docs/lanes.md
                                              says how the other lanes see
                                              them)
any other key                                 the whole key
===========================================  ===============================

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
from typing import Final

from common.handoffs import SUFFIX as HANDOFF_SUFFIX
from common.ops import ALL_KEYS, IDENT_KEY

PARTITION_VERSION: Final = 1  # recorded beside the lane count; a new rule gets a new number
HOME_LANE: Final = 0  # the lane that owns the identity records (IDENT_KEY)
LANES_MAX: Final = 1024  # lanes per cluster, a sanity bound on configuration

_MASK64: Final = (1 << 64) - 1
_JUMP_MUL: Final = 2862933555777941757  # the 64-bit LCG multiplier of jump hashing
_AGENT_PREFIXES: Final = ("inbox:", "agent:")
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
    if key.startswith("mem:"):
        return "mem\0" + key[4:]
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
    if key == IDENT_KEY or lanes == 1:
        return HOME_LANE
    return jump_hash(_digest(partition_token(key)), lanes)
