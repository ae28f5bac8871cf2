"""An operation for another lane's key goes there as one frame (daemon/lanes/frames.py),
not as a whole HTTP request, on a real ``ai-memory serve --lanes 2``: counted as
``lane_handoffs_total{how="frame"}``, and the caller's refusal, Idempotency-Key,
session and key-bound agent arrive as they were sent."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import msgpack
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from common.errors import Unavailable
from common.policy import Principal, ProjectGrant
from daemon.lanes.frames import (
    FrameLinks,
    FrameServer,
    decode_principal,
    encode_principal,
    ops_socket_path,
)
from tests.cluster.harness import http
from tests.daemon.lanes.test_lanes_node import LanedNode, _agent, _project, _session
from tests.mcp.conftest import ok

pytestmark = pytest.mark.slow

ROOT_KEY = "aim_" + "r00tKeyForFrameTests" * 3


def handoffs(node: LanedNode, lane: int, how: str, key: str | None = None) -> float:
    headers = {"X-API-Key": key} if key else {}
    _, text = http("GET", node.lane_url(lane) + "/metrics", headers=headers)
    assert isinstance(text, str), text
    total = 0.0
    for line in text.splitlines():
        if (line.startswith("ai_memory_lane_handoffs_total") and f'how="{how}"' in line
                and f'lane="{lane}"' in line):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LanedNode]:
    n = LanedNode(tmp_path_factory.mktemp("frames"))
    n.start()
    try:
        yield n
    finally:
        n.stop()


def test_a_notify_goes_as_a_frame_and_a_stream_as_http(node: LanedNode) -> None:
    agent = _agent("framed-", 1)
    frames, hops = handoffs(node, 0, "frame"), handoffs(node, 0, "http")
    sent = node.ok(0, "POST", "/api/v1/notify",
                   {"target_agent_id": agent, "title": "hi", "payload": "p"}, agent="zed",
                   status=201)
    assert handoffs(node, 0, "frame") == frames + 1
    assert handoffs(node, 0, "http") == hops
    got = node.ok(0, "GET", f"/api/v1/inbox?agent_id={agent}", agent=agent)
    assert [m["id"] for m in got["messages"]] == [sent["id"]]
    assert handoffs(node, 0, "frame") == frames + 2


def test_a_refusal_comes_back_as_the_owner_gave_it(node: LanedNode) -> None:
    agent = _agent("refused-", 1)
    bad = {"target_agent_id": agent, "title": "x" * 100_000, "payload": "p"}
    frames = handoffs(node, 0, "frame")
    handed = node.call(0, "POST", "/api/v1/notify", bad, agent="zed")
    assert handoffs(node, 0, "frame") == frames + 1
    there = node.call(1, "POST", "/api/v1/notify", bad, agent="zed")  # served where it is kept
    assert handed[0] == there[0] and 400 <= handed[0] < 500, handed
    assert handed[1] == there[1] and {"error", "code"} <= set(handed[1]), handed


def test_an_idempotency_key_retry_answers_the_first_notify(node: LanedNode) -> None:
    agent = _agent("idem-", 1)
    body = {"target_agent_id": agent, "title": "once", "payload": "p"}
    key = {"Idempotency-Key": "frame-idem-0001"}
    first = node.ok(0, "POST", "/api/v1/notify", body, agent="zed", headers=key, status=201)
    again = node.ok(0, "POST", "/api/v1/notify", body, agent="zed", headers=key,
                    status=(200, 201))
    assert again["id"] == first["id"]
    assert node.ok(1, "GET", "/api/v1/inbox", agent=agent)["count"] == 1


def test_a_session_header_names_the_sender(node: LanedNode) -> None:
    dest, src = _project("fdest-", 1), _project("fsrc-", 0)
    _session(node, 0, dest)
    sid = _session(node, 0, src)
    frames = handoffs(node, 0, "frame")
    sent = node.ok(0, "POST", "/api/v1/messages",
                   {"to_workspace": "ws", "to_project": dest, "body": "do it"},
                   headers={"x-memory-actor-session-id": sid}, status=201)
    assert handoffs(node, 0, "frame") == frames + 1
    listed = node.ok(1, "GET", f"/api/v1/messages?workspace=ws&project={dest}")
    [msg] = [m for m in listed["messages"] if m["id"] == sent["message_id"]]
    assert (msg["from_project_id"], msg["from_agent"]) == (src, "claude"), msg
    # a session header no session can have is the owner's 400, as it is on one lane
    code, answer = node.call(0, "POST", "/api/v1/messages",
                             {"to_workspace": "ws", "to_project": dest, "body": "x"},
                             headers={"x-memory-actor-session-id": "no spaces allowed"})
    assert code == 400, answer


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LanedNode]:
    tmp = tmp_path_factory.mktemp("frames-keys")
    conf = tmp / "keys.toml"
    conf.write_text('[auth]\nmode = "keys"\nroot_username = "root"\n')
    old = {k: os.environ.get(k) for k in ("AI_MEMORY_CONFIG", "AI_MEMORY_ROOT_KEY")}
    os.environ["AI_MEMORY_CONFIG"], os.environ["AI_MEMORY_ROOT_KEY"] = str(conf), ROOT_KEY
    n = LanedNode(Path(tmp))
    try:
        n.start()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        yield n
    finally:
        n.stop()


def root(n: LanedNode, lane: int, method: str, path: str, body: Any = None,
         status: int = 200) -> Any:
    code, answer = n.call(lane, method, path, body,
                          headers={"X-API-Key": ROOT_KEY, "X-Agent-Id": "root-agent"})
    assert code == status, answer
    return answer


def test_a_key_bound_agent_travels_with_the_frame(keyed: LanedNode) -> None:
    n = keyed
    me, other = _agent("bound-", 1), _agent("notme-", 1)
    root(n, 0, "POST", "/api/v1/admin/users", {"name": "alice"}, 201)
    key = root(n, 0, "POST", "/api/v1/admin/keys", {"user": "alice", "agent": me}, 201)["key"]
    sent = root(n, 1, "POST", "/api/v1/notify",
                {"target_agent_id": me, "title": "for you", "payload": "p"}, 201)
    frames = handoffs(n, 0, "frame", ROOT_KEY)
    code, got = n.call(0, "GET", "/api/v1/inbox", headers={"X-API-Key": key})
    assert code == 200, got
    assert [m["id"] for m in got["messages"]] == [sent["id"]]  # the key's agent, not a claim
    assert handoffs(n, 0, "frame", ROOT_KEY) == frames + 1
    # claiming another agent with a key bound to this one: the owner's 403
    code, refused = n.call(0, "GET", f"/api/v1/inbox?agent_id={other}",
                           headers={"X-API-Key": key})
    there = n.call(1, "GET", f"/api/v1/inbox?agent_id={other}", headers={"X-API-Key": key})
    assert code == there[0] == 403, refused
    assert refused == there[1]


def test_a_principal_travels_whole() -> None:
    p = Principal(mode="keys", user="alice", root=False, agent="a1", agent_bound=True,
                  key_id="k1", grants=(ProjectGrant("w", "p", "write"), ProjectGrant("w", None,
                                                                                    "read")),
                  owner_user="alice")
    wire = msgpack.unpackb(msgpack.packb(encode_principal(p)), raw=False)
    assert decode_principal(wire) == p


async def test_a_lane_that_is_down_or_closes_fails_the_call_with_a_retryable_503(
        tmp_path: Path) -> None:
    links = FrameLinks(str(tmp_path), 0, 2)
    with pytest.raises(Unavailable) as down:
        await links.call(1, ["POST", "/api/v1/notify"], 5.0)
    assert down.value.status == 503 and down.value.retry_after == 1

    async def hang(frame: Any) -> tuple[int, bytes]:
        await asyncio.sleep(60)
        return 200, b"{}"
    server = FrameServer(ops_socket_path(str(tmp_path), 1), hang)
    await server.start()
    calls = [asyncio.ensure_future(links.call(1, ["op", i], 30.0)) for i in range(3)]
    await asyncio.sleep(0.2)
    await server.stop()
    links.close()  # the link closes under the waiting calls
    for call in calls:
        with pytest.raises(Unavailable):
            await call


async def test_answers_are_matched_by_id(tmp_path: Path) -> None:
    async def echo(frame: Any) -> tuple[int, bytes]:
        await asyncio.sleep(0.05 * (3 - frame[1]))  # the last asked answers first
        return 201, str(frame[1]).encode()
    server = FrameServer(ops_socket_path(str(tmp_path), 1), echo)
    await server.start()
    links = FrameLinks(str(tmp_path), 0, 2)
    try:
        got = await asyncio.gather(*(links.call(1, ["op", i], 5.0) for i in range(3)))
        assert got == [(201, b"0"), (201, b"1"), (201, b"2")]
    finally:
        links.close()
        await server.stop()


def test_mcp_tool_calls_go_as_frames(node: LanedNode) -> None:
    agent = _agent("mcpf-", 1)

    async def run() -> None:
        async with httpx2.AsyncClient(headers={"X-Agent-Id": agent}, timeout=30.0) as h:
            async with Client(streamable_http_client(node.lane_url(0) + "/mcp",
                                                     http_client=h)) as mcp:
                ok(await mcp.call_tool("memory_notify", {"target_agent_id": agent,
                                                         "title": "self", "payload": "p"}))
                inbox = ok(await mcp.call_tool("memory_inbox", {}))
                assert inbox["count"] == 1
    frames, hops = handoffs(node, 0, "frame"), handoffs(node, 0, "http")
    asyncio.run(run())
    assert handoffs(node, 0, "frame") >= frames + 2
    assert handoffs(node, 0, "http") == hops
