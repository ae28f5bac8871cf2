"""Purges and the cleanup of empty projects on members with lanes
(``serve --lanes 2``, keys mode, real processes): a purge hides the project
on every lane of every member (its sessions are on every lane, its mailbox
on one) and deletes its mail and memories; the cleanup judges a project by
all its mail, whichever lane holds it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.lanes import lane_of
from common.ops import mailbox_key
from tests.cluster.lanes_harness import LaneCluster, ok, started

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture
def lanes(tmp_path: Path) -> Iterator[LaneCluster]:
    with started(tmp_path, n=2) as c:
        yield c


def on_lane(ws: str, lane: int, prefix: str) -> str:
    """A project of ``ws`` whose mailbox is on ``lane`` (of 2)."""
    return next(f"{prefix}{i}" for i in range(100)
                if lane_of(mailbox_key(ws, f"{prefix}{i}"), 2) == lane)


def start(c: LaneCluster, ws: str, project: str) -> None:
    ok(c.call("node1", "POST", "/api/v1/sessions",
              {"workspace": ws, "project": project, "harness": "claude-code"}), 201)


def send(c: LaneCluster, ws: str, frm: str, to: str) -> None:
    ok(c.call("node2", "POST", "/api/v1/messages",
              {"from_workspace": ws, "from_project": frm, "to_workspace": ws,
               "to_project": to, "body": f"{frm} to {to}"}), 201)


def listed(c: LaneCluster, ws: str) -> dict[tuple[str, int], set[str]]:
    """The projects of ``ws`` each lane of each member lists."""
    out = {}
    for nid, lane in c.everywhere():
        body = ok(c.call(nid, "GET", "/api/v1/projects", lane=lane))
        out[(nid, lane)] = {p["project"] for p in body["projects"] if p["workspace"] == ws}
    return out


def everywhere(c: LaneCluster, projects: set[str]) -> dict[tuple[str, int], set[str]]:
    return {where: projects for where in c.everywhere()}


def test_a_project_purge_hides_it_on_every_lane(lanes: LaneCluster) -> None:
    c = lanes
    ws = "w"
    gone, other = on_lane(ws, 1, "p"), on_lane(ws, 0, "q")  # mailbox on lane 1, not home
    for p in (gone, other):
        start(c, ws, p)
    send(c, ws, other, gone)
    ok(c.call("node1", "POST", "/api/v1/memories",
              {"title": "m", "content": "c", "namespace": f"{ws}/{gone}"}), 201)
    assert listed(c, ws) == everywhere(c, {gone, other})
    res = ok(c.call("node2", "POST", f"/api/v1/projects/{ws}/{gone}/purge", {"reason": "t"},
                    lane=1))
    assert res["messages_removed"] == 1 and res["memories_removed"] == 1, res
    assert listed(c, ws) == everywhere(c, {other})
    # gone for sends too, through any lane
    code, body = c.call("node1", "POST", "/api/v1/messages",
                        {"from_workspace": ws, "from_project": other, "to_workspace": ws,
                         "to_project": gone, "body": "x"}, lane=0)
    assert code == 404, body


def test_a_workspace_purge_hides_every_project_on_every_lane(lanes: LaneCluster) -> None:
    c = lanes
    ws = "v"
    a, b = on_lane(ws, 0, "a"), on_lane(ws, 1, "b")
    for p in (a, b):
        start(c, ws, p)
    send(c, ws, a, b)
    send(c, ws, b, a)
    assert listed(c, ws) == everywhere(c, {a, b})
    res = ok(c.call("node1", "POST", f"/api/v1/workspaces/{ws}/purge", lane=1))
    assert res["projects"] == sorted([a, b]) and res["messages_removed"] == 2, res
    assert listed(c, ws) == everywhere(c, set())


def test_the_cleanup_keeps_a_project_whose_mail_is_on_another_lane(lanes: LaneCluster) -> None:
    c = lanes
    ws = "u"
    sender, target = on_lane(ws, 1, "s"), on_lane(ws, 0, "t")
    idle0, idle1 = on_lane(ws, 0, "i"), on_lane(ws, 1, "j")
    for p in (sender, target, idle0, idle1):
        start(c, ws, p)
    send(c, ws, sender, target)  # the sender's only mail is on lane 0, not its own lane 1
    ok(c.call("node1", "POST", "/api/v1/messages/pop", {"workspace": ws, "project": target}))
    time.sleep(0.01)
    res = ok(c.call("node2", "POST", "/api/v1/projects/cleanup", {"idle_secs": 0}))
    assert sorted(res["removed"]) == sorted([f"{ws}/{idle0}", f"{ws}/{idle1}"]), res
    assert listed(c, ws) == everywhere(c, {sender, target})
