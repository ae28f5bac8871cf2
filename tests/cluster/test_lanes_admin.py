"""The admin side of a node with lanes (``serve --lanes 2``, keys mode, real
processes): users, keys and grants made through any lane of any member work
on every lane of every member, and what an admin takes away is refused on
every lane once acknowledged."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

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
