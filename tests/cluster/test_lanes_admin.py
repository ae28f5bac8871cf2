"""The admin side of a node with lanes (``serve --lanes 2``, keys mode, real
processes): users, keys and grants made through any lane of any member work
on every lane of every member, and what an admin takes away is refused on
every lane once acknowledged."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from common import limits
from tests.cluster.lanes_harness import LaneCluster, ok, pause_lane, resume, started

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture
def lanes(tmp_path: Path) -> Iterator[LaneCluster]:
    with started(tmp_path, n=3) as c:
        yield c


def whoami(c: LaneCluster, nid: str, lane: int, key: str) -> int:
    return c.call(nid, "GET", "/api/v1/whoami", lane=lane, key=key)[0]


def grants(c: LaneCluster, nid: str, lane: int, key: str) -> list[tuple[str, str, str]]:
    who = ok(c.call(nid, "GET", "/api/v1/whoami", lane=lane, key=key))
    return [(g["workspace"], g["project"], g["access"]) for g in who["grants"]]


def test_keys_work_and_revocations_are_refused_on_every_lane(lanes: LaneCluster) -> None:
    c = lanes
    # made through lane 1 of node 1, a key works on every lane of every member
    ok(c.call("node1", "POST", "/api/v1/admin/users", {"name": "alice"}, lane=1), 201)
    made = ok(c.call("node1", "POST", "/api/v1/admin/keys", {"user": "alice"}, lane=1), 201)
    for nid, lane in c.everywhere():
        assert whoami(c, nid, lane, made["key"]) == 200, (nid, lane)
    # a grant made through lane 0 of node 3 holds on every lane; taken away
    # through lane 1 of node 2, it is gone on every lane once acknowledged
    grant = {"user": "alice", "workspace": "w", "project": "p", "access": "write"}
    ok(c.call("node3", "POST", "/api/v1/admin/grants", grant, lane=0), 201)
    for nid, lane in c.everywhere():
        assert grants(c, nid, lane, made["key"]) == [("w", "p", "write")], (nid, lane)
    ok(c.call("node2", "DELETE", "/api/v1/admin/grants?user=alice&workspace=w&project=p"
              "&access=write", lane=1))
    for nid, lane in c.everywhere():
        assert grants(c, nid, lane, made["key"]) == [("w", "p", "read")], (nid, lane)
    # revoked through lane 0 of node 2: refused on every lane of every member
    # once acknowledged
    ok(c.call("node2", "DELETE", f"/api/v1/admin/keys/{made['id']}", lane=0))
    for nid, lane in c.everywhere():
        assert whoami(c, nid, lane, made["key"]) == 401, (nid, lane)
    # a user's removal through lane 1 kills its keys on every lane
    k2 = ok(c.call("node2", "POST", "/api/v1/admin/keys", {"user": "alice"}, lane=0), 201)
    for nid, lane in c.everywhere():
        assert whoami(c, nid, lane, k2["key"]) == 200, (nid, lane)
    ok(c.call("node1", "DELETE", "/api/v1/admin/users/alice", lane=1))
    for nid, lane in c.everywhere():
        assert whoami(c, nid, lane, k2["key"]) == 401, (nid, lane)


def test_a_revocation_waits_for_a_lane_that_does_not_confirm(lanes: LaneCluster) -> None:
    """Lane 1 of node 3 is paused while a key is revoked through lane 0 of
    node 1: the revocation is acknowledged only once that lane cannot trust
    its copy any more, so once resumed it refuses the key (it held it cached)."""
    c = lanes
    ok(c.call("node1", "POST", "/api/v1/admin/users", {"name": "bob"}), 201)
    made = ok(c.call("node1", "POST", "/api/v1/admin/keys", {"user": "bob"}), 201)
    for nid, lane in c.everywhere():
        assert whoami(c, nid, lane, made["key"]) == 200, (nid, lane)
    pid = pause_lane(c, "node3", 1)
    try:
        started = time.monotonic()
        ok(c.call("node1", "DELETE", f"/api/v1/admin/keys/{made['id']}", lane=0))
        waited = time.monotonic() - started
    finally:
        resume(pid)
    # lane 1 of node 3 did not confirm: the answer outwaited its lease
    assert waited >= (limits.identity_lease_ms + limits.identity_lease_margin_ms) / 1000, waited
    for nid, lane in c.everywhere():
        assert whoami(c, nid, lane, made["key"]) == 401, (nid, lane)


def _views(c: LaneCluster, user: str) -> dict[tuple[str, int], list[tuple[str, str, str]]]:
    """``user``'s grants as each lane of each member reads them."""
    out = {}
    for nid, lane in c.everywhere():
        got = ok(c.call(nid, "GET", f"/api/v1/admin/grants?user={user}", lane=lane))
        out[(nid, lane)] = sorted((g["workspace"], g["project"] or "", g["access"])
                                  for g in got["grants"])
    return out


def test_conflicting_grants_through_two_lanes_settle_alike_on_every_lane(
        lanes: LaneCluster) -> None:
    """A write grant sent through lane 0 of node 1 while that node's lane 1
    is paused, then a read grant of the same project through lane 1 of node
    2: the first grant's copy for the lane-1 group is written only once the
    lane resumes, after the second. Ranked by each lane's own op stamps, the
    lane-0 group kept the read grant and the lane-1 group the write grant,
    for good. Ranked by the one stamp minted with each body, every lane of
    every member keeps the later write: read."""
    c = lanes
    ok(c.call("node1", "POST", "/api/v1/admin/users", {"name": "racer"}), 201)
    pid = pause_lane(c, "node1", 1)
    answers: list[tuple[int, Any]] = []
    try:
        granting = threading.Thread(target=lambda: answers.append(c.call(
            "node1", "POST", "/api/v1/admin/grants",
            {"user": "racer", "workspace": "w", "project": "p", "access": "write"}, lane=0)))
        granting.start()
        time.sleep(0.5)  # the grant's lane-0 share is written; its lane-1 share waits
        ok(c.call("node2", "POST", "/api/v1/admin/grants",
                  {"user": "racer", "workspace": "w", "project": "p", "access": "read"},
                  lane=1), 201)
    finally:
        resume(pid)
    granting.join(30)
    assert answers and answers[0][0] == 201, answers
    deadline = time.monotonic() + 15
    views = _views(c, "racer")
    while time.monotonic() < deadline:
        views = _views(c, "racer")
        if all(v == [("w", "p", "read")] for v in views.values()):
            return
        time.sleep(0.25)
    raise AssertionError(f"the lanes keep different winners: {views}")
