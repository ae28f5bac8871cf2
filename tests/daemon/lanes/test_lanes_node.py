"""A real ``ai-memory serve --lanes 2``: every kind of key, asked of the lane that
does not keep it, is served correctly (issue 25), and the supervisor keeps its lanes.

Each lane also listens on its own port (the node's port + 100 x (lane + 1)),
so a test can put a request on a chosen lane, as the kernel's SO_REUSEPORT
spread does by chance on the shared port.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from common.lanes import PARTITION_VERSION, lane_of
from common.ops import inbox_key, mailbox_key
from tests.cluster.harness import ROOT, free_port, http
from tests.mcp.conftest import ok
from tests.sse import SSEReader

pytestmark = pytest.mark.slow

OFFSET = 100


def _free_lane_port(lanes: int) -> int:
    return free_port((0, *(OFFSET * (i + 1) for i in range(lanes))))


class LanedNode:
    def __init__(self, tmp: Path, lanes: int = 2) -> None:
        self.lanes = lanes
        self.port = _free_lane_port(lanes)
        self.db = tmp / "node.db"
        self.log = tmp / "node.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def lane_url(self, lane: int) -> str:
        return f"http://127.0.0.1:{self.port + OFFSET * (lane + 1)}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *extra: str) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli", "serve", "--port", str(self.port), "--db",
                 str(self.db), "--lanes", str(self.lanes), *extra],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            self.wait_serving()
        except BaseException:
            self.proc.kill()  # a start that failed leaves no process behind
            self.proc.wait()
            raise

    def wait_serving(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
            try:
                if all(http("GET", self.lane_url(i) + "/api/v1/health", timeout=1)[0] == 200
                       for i in range(self.lanes)):
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(self.log.read_text())

    def lane_pids(self) -> list[int]:
        assert self.proc is not None
        kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        return [int(k) for k in kids]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)

    def call(self, lane: int, method: str, path: str, body: Any = None,
             agent: str | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        hdrs = dict(headers or {})
        if agent:
            hdrs["X-Agent-Id"] = agent
        return http(method, self.lane_url(lane) + path, body, hdrs)

    def ok(self, lane: int, method: str, path: str, body: Any = None, agent: str | None = None,
           status: int | tuple[int, ...] = (200, 201), **kw: Any) -> Any:
        code, answer = self.call(lane, method, path, body, agent, **kw)
        assert code in (status if isinstance(status, tuple) else (status,)), (code, answer)
        return answer

    def handoffs(self, lane: int) -> float:
        _, text = http("GET", self.lane_url(lane) + "/metrics")
        return _sample(text if isinstance(text, str) else json.dumps(text),
                       "ai_memory_lane_handoffs_total", lane)


def _sample(text: str, name: str, lane: int) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and f'lane="{lane}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LanedNode]:
    n = LanedNode(tmp_path_factory.mktemp("lanes"))
    n.start()
    try:
        yield n
    finally:
        n.stop()


def _named(prefix: str, lane: int, key: Any) -> str:
    """A name whose key (``key(name)``) is on ``lane`` of 2."""
    for i in range(1000):
        name = f"{prefix}{i}"
        if lane_of(key(name), 2) == lane:
            return name
    raise AssertionError("no such name")


def _agent(prefix: str, lane: int) -> str:
    return _named(prefix, lane, inbox_key)


def _project(prefix: str, lane: int) -> str:
    return _named(prefix, lane, lambda p: mailbox_key("ws", p))


def test_notifications_asked_of_the_other_lane(node: LanedNode) -> None:
    for lane in (0, 1):
        other = 1 - lane
        agent = _agent(f"inbox{lane}-", lane)
        before = node.handoffs(other)
        sent = node.ok(other, "POST", "/api/v1/notify",
                       {"target_agent_id": agent, "title": "hello", "payload": "p"}, agent="zed")
        assert node.handoffs(other) == before + 1  # handed to the lane that keeps the inbox
        got = node.ok(other, "GET", f"/api/v1/inbox?agent_id={agent}", agent=agent)
        assert [m["id"] for m in got["messages"]] == [sent["id"]]
        assert node.ok(lane, "GET", "/api/v1/inbox", agent=agent)["count"] == 1
        marked = node.ok(other, "POST", "/api/v1/inbox/read", {"ids": [sent["id"]]}, agent=agent)
        assert marked == {"marked": 1}
        assert node.ok(other, "GET", "/api/v1/inbox", agent=agent)["count"] == 0
        # a reply names the notification: placed by its id, written to the sender's inbox
        reply = node.ok(other, "POST", "/api/v1/notify",
                        {"reply_to": sent["id"], "title": "re"}, agent=agent)
        inbox = node.ok(lane, "GET", "/api/v1/inbox", agent="zed")["messages"]
        assert [(m["id"], m["in_reply_to"]) for m in inbox if m["id"] == reply["id"]] == [
            (reply["id"], sent["id"])]


def test_broadcast_reaches_agents_on_every_lane(node: LanedNode) -> None:
    agents = [_agent("bc-a", 0), _agent("bc-b", 1)]
    for a in agents:
        node.ok(0, "POST", "/api/v1/agents", {"agent_id": a, "agent_type": "test"})
    listed = {a["agent_id"] for a in node.ok(1, "GET", "/api/v1/agents")["agents"]}
    assert set(agents) <= listed
    out = node.ok(1, "POST", "/api/v1/notify", {"target_agent_id": "bc-*", "title": "all"},
                  agent="zed")
    assert sorted(out["delivered_to"]) == sorted(agents)
    for a in agents:
        assert node.ok(0, "GET", "/api/v1/inbox", agent=a)["count"] == 1


def _session(node: LanedNode, lane: int, project: str, harness: str = "claude") -> str:
    return node.ok(lane, "POST", "/api/v1/sessions",
                   {"workspace": "ws", "project": project, "harness": harness})["session_id"]


def test_mail_asked_of_the_other_lane(node: LanedNode) -> None:
    for lane in (0, 1):
        other = 1 - lane
        dest, src = _project(f"dest{lane}-", lane), _project(f"src{lane}-", other)
        _session(node, other, dest)  # sessions are on every lane
        sid = _session(node, lane, src)
        sent = node.ok(other, "POST", "/api/v1/messages",
                       {"to_workspace": "ws", "to_project": dest, "body": "do it"},
                       headers={"x-memory-actor-session-id": sid})
        mid = sent["message_id"]
        assert lane_of(mailbox_key("ws", dest), 2) == lane
        listed = node.ok(other, "GET", f"/api/v1/messages?workspace=ws&project={dest}")
        assert [m["id"] for m in listed["messages"]] == [mid]
        popped = node.ok(other, "POST", "/api/v1/messages/pop",
                         {"workspace": "ws", "project": dest, "lease_seconds": 30})
        assert popped["message"]["id"] == mid
        token = popped["message"]["claim_token"]
        renewed = node.ok(other, "POST", "/api/v1/messages/renew",
                          {"message_id": mid, "claim_token": token})
        assert mid in json.dumps(renewed)
        node.ok(other, "POST", "/api/v1/messages/complete",
                {"message_id": mid, "result": "done", "claim_token": token})
        # an answer names its parent (on this lane) and goes to a mailbox on the other
        dest_sid = _session(node, other, dest)
        answer = node.ok(other, "POST", "/api/v1/messages",
                         {"to_workspace": "ws", "to_project": src, "body": "done it",
                          "in_reply_to": mid},
                         headers={"x-memory-actor-session-id": dest_sid})
        inbox = node.ok(lane, "GET", f"/api/v1/messages?workspace=ws&project={src}")
        assert [(m["id"], m["in_reply_to"]) for m in inbox["messages"]] == [
            (answer["message_id"], mid)]
        node.ok(lane, "POST", "/api/v1/messages/pop", {"workspace": "ws", "project": src})
        # the sender's outbox spans mailboxes on both lanes
        second = node.ok(lane, "POST", "/api/v1/messages",
                         {"to_workspace": "ws", "to_project": src, "body": "to self"},
                         headers={"x-memory-actor-session-id": sid})
        outbox = node.ok(other, "GET", f"/api/v1/messages?box=outbox&workspace=ws&project={src}"
                         "&all=1")
        assert {m["id"] for m in outbox["messages"]} == {mid, second["message_id"]}
        cancelled = node.ok(other, "POST", "/api/v1/messages/cancel",
                            {"message_id": second["message_id"]},
                            headers={"x-memory-actor-session-id": sid})
        assert second["message_id"] in json.dumps(cancelled)


def test_memories_are_on_the_home_lane(node: LanedNode) -> None:
    stored = node.ok(1, "POST", "/api/v1/memories",
                     {"title": "lanes", "content": "memories live on lane zero",
                      "namespace": "docs"}, agent="zed")
    mid = stored.get("id") or stored["memory"]["id"]
    assert node.ok(0, "GET", f"/api/v1/memories/{mid}")
    found = node.ok(1, "GET", "/api/v1/search?q=zero&namespace=docs")
    assert mid in json.dumps(found)


def test_status_and_metrics_show_every_lane(node: LanedNode) -> None:
    status = node.ok(0, "GET", "/api/v1/cluster/status")
    assert [entry["lane"] for entry in status["lanes"]] == [0, 1]
    health = node.ok(1, "GET", "/api/v1/health")
    assert health["lanes"] == 2 and health["state"] == "serving"
    assert [x["lane"] for x in health["per_lane"]] == [0, 1]
    code, text = http("GET", node.url + "/metrics")
    assert code == 200 and 'lane="0"' in str(text) and 'lane="1"' in str(text)


def test_a_stream_through_the_other_lane(node: LanedNode) -> None:
    agent = _agent("stream-", 1)

    async def run() -> None:
        async with aiohttp.ClientSession() as s:
            async with s.get(node.lane_url(0) + "/api/v1/inbox/stream",
                             headers={"X-Agent-Id": agent}) as resp:
                assert resp.status == 200
                reader = SSEReader(resp)
                await asyncio.sleep(0.3)
                async with s.post(node.lane_url(0) + "/api/v1/notify",
                                  json={"target_agent_id": agent, "title": "live"},
                                  headers={"X-Agent-Id": "zed"}) as sent:
                    assert sent.status == 201
                while True:
                    event = await reader.next(10)
                    if event.event == "notify":
                        assert "live" in json.dumps(event.data)
                        return
    asyncio.run(run())


def test_mcp_tools_through_the_other_lane(node: LanedNode) -> None:
    agent = _agent("mcp-", 1)
    project = _project("mcp-p", 1)
    _session(node, 0, project)

    async def run() -> None:
        async with httpx2.AsyncClient(headers={"X-Agent-Id": agent}, timeout=30.0) as h:
            async with Client(streamable_http_client(node.lane_url(0) + "/mcp",
                                                     http_client=h)) as mcp:
                ok(await mcp.call_tool("memory_notify", {"target_agent_id": agent,
                                                         "title": "self", "payload": "p"}))
                inbox = ok(await mcp.call_tool("memory_inbox", {}))
                assert inbox["count"] == 1
                sent = ok(await mcp.call_tool("memory_message_send", {
                    "to_workspace": "ws", "to_project": project, "body": "via mcp",
                    "from_workspace": "ws", "from_project": project}))
                popped = ok(await mcp.call_tool("memory_message_pop", {
                    "workspace": "ws", "project": project}))
                assert popped["message"]["id"] == sent["message_id"]
    before = node.handoffs(0)
    asyncio.run(run())
    assert node.handoffs(0) >= before + 4


# -- the supervisor ---------------------------------------------------------------------------
def test_a_killed_lane_is_restarted(tmp_path: Path) -> None:
    n = LanedNode(tmp_path)
    n.start()
    try:
        agent = _agent("kill-", 1)
        n.ok(0, "POST", "/api/v1/notify", {"target_agent_id": agent, "title": "kept"},
             agent="zed")
        victim = n.lane_pids()[1]
        os.kill(victim, signal.SIGKILL)
        time.sleep(0.2)
        n.wait_serving()
        lanes = n.lane_pids()
        assert victim not in lanes and len(lanes) == 2
        assert n.ok(0, "GET", "/api/v1/inbox", agent=agent)["count"] == 1
    finally:
        n.stop()
    assert n.proc is not None and n.proc.returncode == 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in lanes)  # SIGTERM stopped them all


def _db_files(where: Path) -> list[str]:
    """The files of a node's directory, less SQLite's -wal and -shm (reading
    a database's recorded lane count opens them)."""
    return sorted(p.name for p in where.iterdir() if not p.name.endswith(("-wal", "-shm")))


def test_another_lane_count_is_refused(tmp_path: Path) -> None:
    n = LanedNode(tmp_path)
    n.start()
    n.stop()
    files = _db_files(n.db.parent)
    again = subprocess.run(
        [sys.executable, "-m", "cli", "serve", "--port", str(n.port), "--db", str(n.db),
         "--lanes", "3"], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert again.returncode == 4, again.stderr  # as for another cluster's database
    assert f"of 2 (partition {PARTITION_VERSION}); this process is lane" in again.stderr
    assert "changes only offline" in again.stderr
    assert _db_files(n.db.parent) == files  # no lane2 database left behind
    plain = subprocess.run(
        [sys.executable, "-m", "cli", "serve", "--port", str(n.port), "--db", str(n.db)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert plain.returncode == 4, plain.stderr
    assert "is lane 0 of 2" in plain.stderr and "lane 0 of 1" in plain.stderr, plain.stderr


def test_a_node_without_lanes_is_refused_lanes_before_any_lane_starts(tmp_path: Path) -> None:
    db = tmp_path / "plain.db"
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    plain = subprocess.Popen(
        [sys.executable, "-m", "cli", "serve", "--port", str(port), "--db", str(db)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if http("GET", f"http://127.0.0.1:{port}/api/v1/health", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and plain.poll() is None, "the plain node did not start"
            time.sleep(0.1)
    finally:
        plain.terminate()
        plain.wait(timeout=30)
    files = _db_files(tmp_path)
    laned = subprocess.run(
        [sys.executable, "-m", "cli", "serve", "--port", str(port), "--db", str(db), "--lanes", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert laned.returncode == 4, laned.stderr
    assert "is lane 0 of 1" in laned.stderr and "lane 0 of 2" in laned.stderr, laned.stderr
    assert _db_files(tmp_path) == files  # no lane1 database created


def test_the_official_sdk_against_a_node_with_lanes(node: LanedNode) -> None:
    from ai_memory import AiMemoryClient
    from ai_memory.models import Memory

    bob, carol = _agent("sdk-b", 0), _agent("sdk-c", 1)
    with AiMemoryClient(node.url, agent_id="sdk-zed") as zed, \
            AiMemoryClient(node.url, agent_id=bob) as b, \
            AiMemoryClient(node.url, agent_id=carol) as c:
        zed.notify({"to": [bob, carol], "subject": "fan-out", "body": "to both"})
        for client in (b, c):  # whichever lane each request lands on
            for _ in range(4):
                assert [m["subject"] for m in client.inbox()] == ["fan-out"]
        stored = Memory.model_validate(zed.store(title="sdk", content="stored through any lane",
                                                 namespace="sdk-lanes"))
        for _ in range(4):
            assert [m.id for m in zed.search("through", namespace="sdk-lanes")] == [stored.id]


def test_peer_calls_on_the_shared_port_are_refused(node: LanedNode) -> None:
    code, body = http("POST", node.url + "/peer/v1/pull", {})
    assert code == 409 and body["code"] == "lane_port_required", body
    assert "port" in body["error"] and "lane" in body["error"]
    code, body = http("POST", node.lane_url(1) + "/peer/v1/pull", {})
    assert code != 409 or body.get("code") != "lane_port_required", body
    # the hello is answered: a member of another lane count learns what this node is
    code, body = http("POST", node.url + "/peer/v1/hello", {})
    assert not (code == 409 and "lane_port_required" in str(body)), body
