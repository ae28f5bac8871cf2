"""Request shapes a real ``serve --lanes 2`` must place on the lane that keeps
their key, and HTTP details a hand-off must carry (the lanes review).

Each test puts its request on a chosen lane by that lane's own port.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator

import pytest

from common.lanes import lane_of
from common.ops import mailbox_key
from tests.daemon.lanes.test_lanes_node import OFFSET, LanedNode, _project, _session

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LanedNode]:
    n = LanedNode(tmp_path_factory.mktemp("lanesreview"))
    n.start()
    try:
        yield n
    finally:
        n.stop()


def _raw(n: LanedNode, lane: int, method: str, path: str, body: bytes = b"",
         headers: dict[str, str] | None = None, timeout: float = 8.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", n.port + OFFSET * (lane + 1),
                                      timeout=timeout)
    try:
        conn.request(method, path, body=body or None, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_cancel_by_id_naming_the_sending_project(node: LanedNode) -> None:
    """The sender names its own project (as memory_message_cancel does with a
    configured project) and the message: the message is in the recipient's
    mailbox, on the other lane."""
    for lane in (0, 1):
        src, dest = _project(f"csrc{lane}-", lane), _project(f"cdest{lane}-", 1 - lane)
        _session(node, lane, dest)
        _session(node, lane, src)
        sent = node.ok(lane, "POST", "/api/v1/messages",
                       {"from_workspace": "ws", "from_project": src, "to_workspace": "ws",
                        "to_project": dest, "body": "take it back"})
        mid = sent["message_id"]
        out = node.ok(lane, "POST", "/api/v1/messages/cancel",
                      {"workspace": "ws", "project": src, "message_id": mid})
        assert out["cancelled"] == [mid], out


def test_handoff_brief_reads_the_memories_of_the_home_lane(node: LanedNode) -> None:
    project = _project("brief-", 1)  # its mailbox, and so GET /handoff, on lane 1
    _session(node, 0, project)
    node.ok(0, "POST", "/api/v1/memories",
            {"title": "_rules/style", "content": "tabs, never spaces",
             "namespace": f"ws/{project}"}, agent="zed")
    for lane in (0, 1):
        out = node.ok(lane, "GET",
                      f"/api/v1/handoff?workspace=ws&project={project}&brief=1&handoff=0")
        assert "tabs, never spaces" in json.dumps(out["brief"]), out


def test_head_is_answered_through_a_hop(node: LanedNode) -> None:
    """HEAD answers carry a Content-Length but no body: a hop that waits for
    that body hangs until its deadline (a load balancer's HEAD /health)."""
    for lane in (0, 1):
        for path in ("/api/v1/health", "/api/v1/stats", "/metrics"):
            started = time.monotonic()
            status, body = _raw(node, lane, "HEAD", path)
            assert (status, body) == (200, b""), (lane, path, status)
            assert time.monotonic() - started < 5, (lane, path)


def test_expect_100_continue_through_a_hop(node: LanedNode) -> None:
    """curl sends ``Expect: 100-continue`` with a large body; the lane the
    request reaches answers the 100, the lane it is handed to must not."""
    agent = next(f"exp{i}" for i in range(1000) if lane_of(f"inbox:exp{i}", 2) == 1)
    body = json.dumps({"target_agent_id": agent, "title": "expect",
                       "payload": "x" * 2000}).encode()
    status, raw = _raw(node, 0, "POST", "/api/v1/notify", body,
                       {"Content-Type": "application/json", "X-Agent-Id": "zed",
                        "Expect": "100-continue"})
    assert status == 201, (status, raw[:300])
    assert json.loads(raw)["to"] == agent
    # the link connection is still good for the next hand-off
    got = node.ok(0, "GET", f"/api/v1/inbox?agent_id={agent}", agent=agent)
    assert got["count"] == 1


def test_loopback_only_routes_through_a_hop(node: LanedNode) -> None:
    """Anonymous mode serves the sync routes to loopback callers only; the
    caller's address must survive the hand-off to the home lane."""
    for lane in (0, 1):
        code, answer = node.call(lane, "GET", "/api/v1/sync/since")
        assert code == 200, (lane, code, answer)


# -- keys mode -------------------------------------------------------------------------------
KEY = "review-key-0123456789abcdef"


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LanedNode]:
    tmp = tmp_path_factory.mktemp("lanesreviewkeys")
    conf = tmp / "node.toml"
    conf.write_text(f'[auth]\nmode = "keys"\napi_keys = {{ "{KEY}" = "alice" }}\n')
    n = LanedNode(tmp)
    n.start("--config", str(conf))
    try:
        yield n
    finally:
        n.stop()


def test_an_unknown_session_in_keys_mode(keyed: LanedNode) -> None:
    """In keys mode a session id the caller may not use (unknown, or another
    user's) decides nothing: the route infers the scope (the last active
    project). The rule must place the request by that same scope."""
    n = keyed
    auth = {"X-API-Key": KEY}
    default_lane = lane_of(mailbox_key("default", "default"), 2)
    last = _project("last-", 1 - default_lane)
    n.ok(0, "POST", "/api/v1/sessions", {"workspace": "ws", "project": last,
                                         "harness": "claude"}, headers=auth)
    for lane in (0, 1):
        got = n.ok(lane, "GET", "/api/v1/messages",
                   headers={**auth, "x-memory-actor-session-id": "no-such-session"})
        assert (got["workspace"], got["project"]) == ("ws", last), got
        notice = n.ok(lane, "GET", "/api/v1/handoff?inbox_only=1",
                      headers={**auth, "x-memory-actor-session-id": "no-such-session"})
        assert notice["project"] == last, notice
