"""The admin side of a node with lanes (``serve --lanes 2``, keys mode, real
processes): users, keys and grants made through any lane of any member work
on every lane of every member, and what an admin takes away is refused on
every lane once acknowledged."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from common import limits
from common.ops import APIKEY_PUT, IDENT_KEY, PGRANT_PUT, USER_PUT
from daemon.lanes.hop import HOP_HEADER, RPC_PREFIX
from daemon.lanes.layout import socket_path
from daemon.lanes.supervisor import DIR_ENV
from tests.cluster.lanes_harness import (
    LaneCluster,
    lane_pid,
    ok,
    pause_lane,
    resume,
    started,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def lanes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaneCluster]:
    """One cluster for the module (each test names its own users)."""
    with started(tmp_path_factory.mktemp("laneadmin"), n=3) as c:
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


def _write_on_one_lane(c: LaneCluster, nid: str, lane: int, items: list[list[Any]]) -> None:
    """Write identity records that take rights away on lane ``lane``'s group
    only (the lanes' own ``/lane/v1/refuse`` call, over the lane's Unix
    socket): the state a revocation leaves when its share failed on every
    other lane (that lane was down, or restarting, when it was written)."""
    pid = lane_pid(c, nid, lane)
    env = dict(e.split("=", 1) for e in Path(f"/proc/{pid}/environ").read_text().split("\0")
               if "=" in e)
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(socket_path(env[DIR_ENV], lane))
    conn = http.client.HTTPConnection("lane", timeout=30)
    conn.sock = sock
    conn.request("POST", RPC_PREFIX + "refuse", body=msgpack.packb(items),
                 headers={HOP_HEADER: str(1 - lane), "Content-Type": "application/msgpack"})
    answer = conn.getresponse()
    assert answer.status == 200, (answer.status, answer.read())
    conn.close()


def test_a_retried_revocation_reaches_the_lane_whose_share_failed(lanes: LaneCluster) -> None:
    """A grant revocation and a user removal whose share failed on lane 1
    (that lane down or restarting when they were written; the client got a
    503) are written on lane 0's group only: lane 1's group still grants,
    and the user's key still works there. Retried through lane 0, which
    already shows them taken away, each is written again (what every lane
    holds decides), and every lane of every member refuses them."""
    c = lanes
    ok(c.call("node1", "POST", "/api/v1/admin/users", {"name": "carol"}), 201)
    key = ok(c.call("node1", "POST", "/api/v1/admin/keys", {"user": "carol"}), 201)["key"]
    ok(c.call("node1", "POST", "/api/v1/admin/grants",
              {"user": "carol", "workspace": "w", "project": "p", "access": "write"}), 201)
    for nid, lane in c.everywhere():
        assert grants(c, nid, lane, key) == [("w", "p", "write")], (nid, lane)
    revoke = "/api/v1/admin/grants?user=carol&workspace=w&project=p&access=write"

    # a revocation of write whose lane-1 share failed
    narrowed = {"user": "carol", "workspace": "w", "project": "p", "access": "read",
                "granted": True, "at_ms": 1}
    _write_on_one_lane(c, "node1", 0, [[PGRANT_PUT, IDENT_KEY, narrowed]])
    # the failed share: lane 1's group still grants write on every member
    assert {grants(c, nid, 1, key)[0][2] for nid in c.ids} == {"write"}
    assert {grants(c, nid, 0, key)[0][2] for nid in c.ids} == {"read"}
    done = ok(c.call("node1", "DELETE", revoke, lane=0))
    assert done["changed"] is True and done["access"] == "read", done
    for nid, lane in c.everywhere():
        assert grants(c, nid, lane, key) == [("w", "p", "read")], (nid, lane)

    # a user removal whose lane-1 share failed: retried, it removes there too
    # a user removal whose lane-1 share failed
    user = ok(c.call("node1", "GET", "/api/v1/admin/users"))
    assert [u["name"] for u in user["users"] if u["name"] == "carol"] == ["carol"]
    keys = ok(c.call("node1", "GET", "/api/v1/admin/keys?user=carol"))["keys"]
    _write_on_one_lane(c, "node1", 0, [
        [USER_PUT, IDENT_KEY, {"name": "carol", "root": False, "password_hash": None,
                               "removed": True, "created_at_ms": 1}],
        # the key's fields stay the older copy's: only ``revoked`` counts here
        *([APIKEY_PUT, IDENT_KEY, {"id": k["id"], "user": "carol", "agent": None,
                                   "label": None, "hash": "-", "created_at_ms": 0,
                                   "revoked": True}] for k in keys)])
    assert {whoami(c, nid, 0, key) for nid in c.ids} == {401}
    assert {whoami(c, nid, 1, key) for nid in c.ids} == {200}
    done = ok(c.call("node1", "DELETE", "/api/v1/admin/users/carol", lane=0))
    assert done["removed"] is True and len(done["keys_revoked"]) == 1, done
    for nid, lane in c.everywhere():
        assert whoami(c, nid, lane, key) == 401, (nid, lane)
    # removed everywhere now: a further removal is a 404, as on one lane
    assert c.call("node1", "DELETE", "/api/v1/admin/users/carol", lane=1)[0] == 404
