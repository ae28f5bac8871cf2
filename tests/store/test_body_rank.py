"""Records every lane keeps are ranked by the stamp minted with their body.

With lanes, a grant written through a node reaches each lane's group as
that lane's own op, stamped by that lane's clock when its share arrives. Two
conflicting writes can then reach two lanes in opposite orders of their op
stamps; ranked by those, each lane's group keeps a different winner for
good. Ranked by the body's ``rank`` (one stamp, minted by the lane that took
the request), every lane keeps the same one, on SQLite and in the reference
replica alike (``store.records.body_rank``)."""

from __future__ import annotations

import asyncio
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest

from common import ops as K
from common.ops import Op
from federation.core import NodeCore
from federation.hlc import pack
from store.db import Store
from store.in_memory import Replica

NOW = 50_000


def _grant(access: str, rank: list[Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"user": "alice", "workspace": "w", "project": "p",
                            "access": access, "granted": True, "at_ms": 1}
    if rank is not None:
        body["rank"] = rank
    return body


def _user(root: bool, rank: list[Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "bob", "root": root, "password_hash": None,
                            "removed": False, "created_at_ms": 1}
    if rank is not None:
        body["rank"] = rank
    return body


def _session(project: str, rank: list[Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"workspace": "w", "project": project, "harness": "h",
                            "session_id": "s1", "owner_user": None, "at_ms": 5}
    if rank is not None:
        body["rank"] = rank
    return body


# (kind, key, the first write's body, the second's) by the rank each is given
CASES = {
    "grant": (K.PGRANT_PUT, K.IDENT_KEY, lambda r: _grant("write", r), lambda r: _grant("read", r)),
    "user": (K.USER_PUT, K.IDENT_KEY, lambda r: _user(True, r), lambda r: _user(False, r)),
    # a session's project is the first start's (the lowest rank)
    "session": (K.SESSION_START, K.project_key("w", "p"), lambda r: _session("p", r),
                lambda r: _session("q", r)),
}


def _lane_copies(case: str, ranked: bool) -> tuple[list[Op], list[Op]]:
    """The two writes as lane 0's group and lane 1's group hold them: in
    lane 0 the first write's op is stamped earlier, in lane 1 later (its
    share arrived after the second write)."""
    kind, key, first, second = CASES[case]
    r1 = [pack(1000, 0), "n1/0"] if ranked else None
    r2 = [pack(1001, 0), "n2/1"] if ranked else None
    lane0 = [Op("n1", 1, pack(1000, 1), kind, key, first(r1)),
             Op("n2", 1, pack(1001, 1), kind, key, second(r2))]
    lane1 = [Op("n1", 1, pack(1002, 1), kind, key, first(r1)),
             Op("n2", 1, pack(1001, 2), kind, key, second(r2))]
    return lane0, lane1


async def _sqlite_state(ops: list[Op], part: str) -> Any:
    with tempfile.TemporaryDirectory() as d:
        store = await Store.open(Path(d) / "lane.db", "n3")
        try:
            await store.apply_ops(ops, NOW)
            return (await store.snapshot(NOW))[part]
        finally:
            await store.close()


def _replica_state(ops: list[Op], part: str) -> Any:
    replica = Replica()
    replica.apply(ops, NOW)
    return replica.snapshot(NOW)[part]


PART = {"grant": "pgrants", "user": "users", "session": "sessions"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_lane_keeps_the_same_winner_when_ranked_by_the_body(case: str) -> None:
    lane0, lane1 = _lane_copies(case, ranked=True)
    part = PART[case]
    states = [asyncio.run(_sqlite_state(ops, part)) for ops in (lane0, lane1, lane1[::-1])]
    states += [_replica_state(ops, part) for ops in (lane0, lane1, lane1[::-1])]
    assert all(s == states[0] for s in states), states
    expect = {"grant": "read", "user": False, "session": "p"}[case]
    got = {"grant": lambda s: s["alice|w|p"]["access"], "user": lambda s: s["bob"]["root"],
           "session": lambda s: s["s1"]["project"]}[case](states[0])
    assert got == expect


@pytest.mark.parametrize("case", sorted(CASES))
def test_ranked_by_op_stamps_the_lanes_would_differ(case: str) -> None:
    """The control: the same copies without a body stamp settle apart (what
    a lane of a node before this change did, and still does with a body
    written by a member that mints none)."""
    lane0, lane1 = _lane_copies(case, ranked=False)
    part = PART[case]
    assert asyncio.run(_sqlite_state(lane0, part)) != asyncio.run(_sqlite_state(lane1, part))
    assert _replica_state(lane0, part) != _replica_state(lane1, part)


def _core() -> NodeCore:
    return NodeCore("n1", ["n1"], 1, quorum_timeout_ms=100, claim_timeout_ms=100,
                    catchup_interval_ms=50, vv={}, last_hlc=0, own_max_seq=0, promises={},
                    rng=random.Random(1))


def test_a_lane_core_moves_its_clock_past_a_body_stamp() -> None:
    """A lane that writes a body minted by a sibling lane's clock moves its
    own clock past the body's stamp, so what it mints next ranks above it:
    a grant made after another, through another lane, wins."""
    core = _core()
    ahead = pack(NOW + 5_000, 7)  # a sibling's clock, ahead of this lane's
    core.write("t", [(K.PGRANT_PUT, K.IDENT_KEY, _grant("write", [ahead, "n1/1"]))], NOW)
    assert core.mint_stamp(NOW) > ahead
    # a kind no lane shares is not ranked by its body: the clock ignores it
    other = _core()
    other.write("t", [(K.AGENT_SEEN, K.agent_key("a"), {"agent_id": "a", "at_ms": 1,
                                                          "rank": [ahead, "x"]})], NOW)
    assert other.mint_stamp(NOW) < ahead
