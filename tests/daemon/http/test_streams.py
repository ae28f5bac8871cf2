"""Push streams on one real node (real SQLite, the real aiohttp app on a
loopback port): live events, Last-Event-ID resume, heartbeats, the stream
limit, disconnects, slow clients, and who may open which stream.

The cross-node behaviour (a write on node 1 wakes a stream on node 3, and
the latency of that) is in ``tests/cluster/test_streams.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from daemon.api.app import build_app
from daemon.http.stream_hub import StreamSettings, decode_cursor, encode_cursor
from daemon.node import Node
from daemon.settings import AuthSettings
from daemon.wiring import build_node
from tests.daemon.conftest import make_settings
from tests.sse import Event, SSEReader

A = {"workspace": "acme", "project": "sender"}
B = {"workspace": "acme", "project": "receiver"}
BIG = "x" * 60_000  # close to limits.notify_payload_max_chars: fills socket buffers fast


@dataclasses.dataclass
class Served:
    node: Node
    client: Any


Factory = Callable[..., Awaitable[Served]]


@pytest.fixture
async def served(tmp_path: Path, aiohttp_client: Any) -> AsyncIterator[Factory]:
    nodes: list[Node] = []

    async def make(auth: AuthSettings | None = None, **streams: Any) -> Served:
        settings = dataclasses.replace(make_settings(tmp_path / f"n{len(nodes)}.db"),
                                       streams=StreamSettings(**streams))
        if auth is not None:
            settings = dataclasses.replace(settings, auth=auth)
        node = await build_node(settings)
        await node.start()
        nodes.append(node)
        return Served(node, await aiohttp_client(build_app(node)))

    yield make
    for node in nodes:
        await node.stop()


async def notify(client: Any, title: str, to: str = "bob", payload: str = "p") -> str:
    resp = await client.post("/api/v1/notify", json={"target_agent_id": to, "title": title,
                                                     "payload": payload},
                             headers={"X-Agent-Id": "alice"})
    assert resp.status == 201, await resp.text()
    return str((await resp.json())["id"])


async def open_inbox(client: Any, agent: str = "bob", last: str | None = None) -> Any:
    headers = {"X-Agent-Id": agent}
    if last is not None:
        headers["Last-Event-ID"] = last
    resp = await client.get("/api/v1/inbox/stream", params={"agent_id": agent}, headers=headers)
    assert resp.status == 200, await resp.text()
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    return resp


async def collect(reader: SSEReader, n: int, kind: str = "notify") -> list[Event]:
    out = []
    while len(out) < n:
        ev = await reader.next()
        if ev.event == kind:
            out.append(ev)
    return out


def ids(events: list[Event]) -> list[str]:
    return [e.data["notification"]["id"] for e in events]


async def eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


# -- events and resume ------------------------------------------------------------

async def test_live_events_then_resume_with_last_event_id_misses_nothing(served: Factory) -> None:
    s = await served()
    resp = await open_inbox(s.client)
    reader = SSEReader(resp)
    ready = await reader.until("ready")
    assert ready.data == {"replayed": 0} and reader.retry_ms == 1000
    first = [await notify(s.client, f"n{i}") for i in range(5)]
    got = await collect(reader, 3)
    assert ids(got) == first[:3]
    assert got[0].data["notification"]["title"] == "n0"
    assert got[0].data["notification"]["from"] == "alice"
    resume_from = reader.last_id
    resp.close()  # the client goes away after the third event
    later = [await notify(s.client, f"m{i}") for i in range(5)]
    await notify(s.client, "for someone else", to="carol")

    reader = SSEReader(await open_inbox(s.client, last=resume_from))
    replayed = await collect(reader, 7)
    assert ids(replayed) == first[3:] + later  # in order, nothing twice, nothing missing
    assert (await reader.until("ready")).data == {"replayed": 7}
    live = await notify(s.client, "live again")
    assert ids(await collect(reader, 1)) == [live]


async def test_resume_id_also_works_as_a_query_parameter(served: Factory) -> None:
    s = await served()
    reader = SSEReader(await open_inbox(s.client))
    await reader.until("ready")
    await notify(s.client, "one")
    await collect(reader, 1)
    cursor = reader.last_id
    missed = await notify(s.client, "two")
    resp = await s.client.get("/api/v1/inbox/stream",
                              params={"agent_id": "bob", "last_event_id": cursor})
    assert ids(await collect(SSEReader(resp), 1)) == [missed]


async def test_a_cursor_from_the_start_replays_the_whole_inbox(served: Factory) -> None:
    s = await served()
    sent = [await notify(s.client, f"n{i}") for i in range(3)]
    reader = SSEReader(await open_inbox(s.client, last=encode_cursor({})))
    assert ids(await collect(reader, 3)) == sent


def test_cursors_round_trip_and_refuse_garbage() -> None:
    cur = {"127.0.0.1:9077": 12, "node2": 3}
    assert decode_cursor(encode_cursor(cur)) == cur
    for bad in ("", "12", "v1.!!!", "v1." + "A" * 5000, encode_cursor({"n": 1})[:-2] + "zz"):
        with pytest.raises(Exception) as info:
            decode_cursor(bad)
        assert getattr(info.value, "status", None) == 400


async def test_garbage_last_event_id_is_a_400_json_error(served: Factory) -> None:
    s = await served()
    resp = await s.client.get("/api/v1/inbox/stream", params={"agent_id": "bob"},
                              headers={"X-Agent-Id": "bob", "Last-Event-ID": "42"})
    assert resp.status == 400
    assert (await resp.json())["code"] == "bad_last_event_id"
    assert s.node.streams.count() == 0


async def test_mailbox_stream_wakes_on_mail_and_filters_by_harness(served: Factory) -> None:
    s = await served()
    for scope, harness in ((A, "claude"), (B, "claude"), (B, "codex")):
        r = await s.client.post("/api/v1/sessions", json={**scope, "harness": harness})
        assert r.status == 201
    all_mail = SSEReader(await s.client.get("/api/v1/messages/stream", params=B))
    claude = SSEReader(await s.client.get("/api/v1/messages/stream",
                                          params={**B, "agent": "claude"}))
    await all_mail.until("ready")
    await claude.until("ready")

    async def send(**extra: Any) -> str:
        r = await s.client.post("/api/v1/messages", json={
            "to_workspace": B["workspace"], "to_project": B["project"],
            "from_workspace": A["workspace"], "from_project": A["project"],
            "body": "please look", **extra})
        assert r.status == 201, await r.text()
        return str((await r.json())["message_id"])

    for_codex = await send(to_agent="codex")
    shared = await send(subject="for anyone")
    got = await collect(all_mail, 2, "message")
    assert [e.data["message"]["id"] for e in got] == [for_codex, shared]
    assert got[1].data["message"]["subject"] == "for anyone"
    assert got[1].data["workspace"] == "acme" and got[1].data["project"] == "receiver"
    assert [e.data["message"]["id"] for e in await collect(claude, 1, "message")] == [shared]


async def test_message_complete_on_the_mailbox_stream_live_and_replayed(
        served: Factory) -> None:
    s = await served()
    for scope, harness in ((A, "claude"), (B, "codex")):
        r = await s.client.post("/api/v1/sessions", json={**scope, "harness": harness})
        assert r.status == 201
    reader = SSEReader(await s.client.get("/api/v1/messages/stream", params=B))
    await reader.until("ready")
    worker = {"X-Agent-Id": "worker"}

    async def send_pop_complete(result: str) -> str:
        r = await s.client.post("/api/v1/messages", json={
            "to_workspace": B["workspace"], "to_project": B["project"],
            "from_workspace": A["workspace"], "from_project": A["project"], "body": "do it"})
        mid = str((await r.json())["message_id"])
        r = await s.client.post("/api/v1/messages/pop", json={**B, "message_id": mid},
                                headers=worker)
        assert (await r.json())["message"]["id"] == mid
        r = await s.client.post("/api/v1/messages/complete", headers=worker,
                                json={"message_id": mid, "result": result, "note": "n"})
        assert r.status == 200, await r.text()
        return mid

    first = await send_pop_complete("done")
    got = await collect(reader, 1, "message_complete")
    assert got[0].data["message_id"] == first
    assert got[0].data["completion"]["result"] == "done"
    resume_from = reader.last_id
    reader.resp.close()
    second = await send_pop_complete("rejected")
    reader = SSEReader(await s.client.get("/api/v1/messages/stream", params=B,
                                          headers={"Last-Event-ID": resume_from}))
    replayed = await collect(reader, 1, "message_complete")
    assert replayed[0].data["message_id"] == second
    assert replayed[0].data["completion"]["result"] == "rejected"
    assert (await reader.until("ready")).data == {"replayed": 2}  # the send and its outcome


async def test_a_message_whose_lease_ran_out_is_announced_again_live_and_replayed(
        served: Factory) -> None:
    s = await served()
    for scope, harness in ((A, "claude"), (B, "codex")):
        r = await s.client.post("/api/v1/sessions", json={**scope, "harness": harness})
        assert r.status == 201
    reader = SSEReader(await s.client.get("/api/v1/messages/stream", params=B))
    await reader.until("ready")

    async def send_and_lapse() -> str:
        r = await s.client.post("/api/v1/messages", json={
            "to_workspace": B["workspace"], "to_project": B["project"],
            "from_workspace": A["workspace"], "from_project": A["project"], "body": "do it"})
        mid = str((await r.json())["message_id"])
        r = await s.client.post("/api/v1/messages/pop", json={**B, "lease_seconds": 1})
        assert (await r.json())["message"]["id"] == mid
        return mid

    first = await send_and_lapse()
    got = await collect(reader, 2, "message")  # the send, then the requeue
    assert [e.data["message"]["id"] for e in got] == [first, first]
    assert got[1].data["message"]["requeued"] and got[1].data["message"]["deliveries"] == 1
    resume_from = reader.last_id
    reader.resp.close()
    r = await s.client.post("/api/v1/messages/pop", json={**B})  # a final claim of the first
    assert (await r.json())["message"]["id"] == first
    second = await send_and_lapse()
    await asyncio.sleep(2.5)  # the second's lease runs out while nobody listens
    reader = SSEReader(await s.client.get("/api/v1/messages/stream", params=B,
                                          headers={"Last-Event-ID": resume_from}))
    replayed = await collect(reader, 2, "message")
    assert [e.data["message"]["id"] for e in replayed] == [second, second]
    assert replayed[1].data["message"]["requeued"] is True
    assert replayed[1].data["message"]["state"] == "pending"
    assert replayed[1].data["message"]["body"] == "do it"  # the whole message, on replay


# -- bounds ---------------------------------------------------------------------------

async def test_beyond_the_stream_limit_a_503_with_retry_after(served: Factory) -> None:
    s = await served(max=2)
    held = [await open_inbox(s.client, agent) for agent in ("bob", "carol")]
    resp = await s.client.get("/api/v1/inbox/stream", params={"agent_id": "dave"})
    assert resp.status == 503
    body = await resp.json()
    assert body["code"] == "unavailable" and body["limit"] == "streams_max"
    assert "streams" in body["error"]
    assert int(resp.headers["Retry-After"]) >= 1
    assert s.node.streams.count() == 2
    for r in held:
        r.close()


async def test_a_client_that_disconnects_frees_its_slot_at_once(served: Factory) -> None:
    s = await served(max=1)
    resp = await open_inbox(s.client)
    await SSEReader(resp).until("ready")
    assert s.node.streams.count() == 1
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    resp.close()
    await eventually(lambda: s.node.streams.count() == 0, within=3.0)
    freed = loop.time() - t0
    # The reaper looks every 0.2 s; the bound leaves room for a loaded machine but
    # not for waiting on the next heartbeat (15 s) or the next event.
    assert freed < 1.5, f"slot freed after {freed:.2f}s"
    reader = SSEReader(await open_inbox(s.client, "carol"))  # the one slot is usable again
    await reader.until("ready")


async def test_an_idle_stream_gets_heartbeats(served: Factory) -> None:
    s = await served(heartbeat_secs=0.1)  # due at every look of the reaper (0.2 s)
    reader = SSEReader(await open_inbox(s.client))
    await reader.until("ready")
    with pytest.raises(TimeoutError):
        await reader.next(within=1.2)  # nothing but comment lines arrives
    assert reader.comments >= 2


@pytest.mark.parametrize("bounds", [{"queue_max": 8}, {"queue_bytes_max": 300_000}],
                         ids=["by-count", "by-bytes"])
async def test_a_client_that_stops_reading_is_dropped_and_its_queue_stays_bounded(
        served: Factory, bounds: dict[str, int]) -> None:
    s = await served(write_timeout_secs=1.0, **bounds)
    limit = s.node.streams.settings
    port = s.client.server.port
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, b"GET /api/v1/inbox/stream?agent_id=bob HTTP/1.1\r\n"
                                  b"Host: x\r\nX-Agent-Id: bob\r\n\r\n")
    await eventually(lambda: s.node.streams.count() == 1)
    deepest, heaviest = 0, 0
    try:
        for i in range(160):  # ~9.6 MB of events, far more than the socket buffers hold
            await notify(s.client, f"n{i}", payload=BIG)
            deepest = max([deepest, *(len(sub.queue) for sub in s.node.streams._all)])
            heaviest = max([heaviest, *(sub.queued_bytes for sub in s.node.streams._all)])
            if s.node.streams.count() == 0:
                break
        await eventually(lambda: s.node.streams.count() == 0, within=5.0)
    finally:
        sock.close()
    assert deepest <= limit.queue_max and heaviest <= limit.queue_bytes_max
    metrics = await (await s.client.get("/api/v1/metrics")).text()
    assert "stream_write_timeouts_total" in metrics or "stream_overflows_total" in metrics
    await notify(s.client, "still serving")


async def test_overflow_ends_with_a_resume_event_and_resuming_loses_nothing(
        served: Factory) -> None:
    s = await served(queue_max=4, write_timeout_secs=30.0)
    resp = await open_inbox(s.client)
    reader = SSEReader(resp)
    await reader.until("ready")
    sent = [await notify(s.client, f"n{i}", payload=BIG) for i in range(160)]
    # The client read nothing meanwhile: its queue overflowed while the
    # writes were blocked on full socket buffers.
    seen: list[str] = []
    woken: list[str] = []  # upstream's agent_notified, one per notification too

    def note(ev: Event) -> None:
        if ev.event == "notify":
            seen.append(ev.data["notification"]["id"])
        else:
            assert ev.event == "agent_notified", ev
            woken.append(ev.data["inbox_row_id"])

    while True:
        ev = await reader.next(within=20)
        if ev.event == "resume":
            assert ev.data["reason"] == "overflow"
            break
        note(ev)
    assert len(seen) < len(sent)
    reader = SSEReader(await open_inbox(s.client, last=reader.last_id))
    while (ev := await reader.next(within=20)).event != "ready":
        note(ev)
    assert sorted(set(seen)) == sorted(sent)
    assert sorted(set(woken)) == sorted(sent)


# -- who may open which stream -----------------------------------------------------------

async def test_inbox_stream_is_only_for_the_named_agent(served: Factory) -> None:
    s = await served()
    r = await s.client.get("/api/v1/inbox/stream", params={"agent_id": "bob"},
                           headers={"X-Agent-Id": "mallory"})
    assert r.status == 403 and (await r.json())["code"] == "forbidden"
    r = await s.client.get("/api/v1/inbox/stream")
    assert r.status == 400 and "agent" in (await r.json())["error"]
    assert s.node.streams.count() == 0


async def test_with_api_keys_the_key_decides_whose_inbox(served: Factory) -> None:
    s = await served(auth=AuthSettings(api_keys={"k-bob": "bob"}, require_api_key=True))
    r = await s.client.get("/api/v1/inbox/stream", params={"agent_id": "bob"})
    assert r.status == 401
    r = await s.client.get("/api/v1/inbox/stream", params={"agent_id": "carol"},
                           headers={"X-API-Key": "k-bob"})
    assert r.status == 403
    r = await s.client.get("/api/v1/inbox/stream", headers={"X-API-Key": "k-bob"})
    assert r.status == 200
    await SSEReader(r).until("ready")
    r.close()


async def test_mailbox_stream_needs_a_named_existing_project(served: Factory) -> None:
    s = await served()
    r = await s.client.get("/api/v1/messages/stream")
    assert r.status == 409 and (await r.json())["scope_source"] == "default"
    r = await s.client.get("/api/v1/messages/stream", params={"workspace": "acme"})
    assert r.status == 400
    r = await s.client.get("/api/v1/messages/stream", params={"workspace": "acme",
                                                              "project": "nope"})
    assert r.status == 404 and "does not exist" in (await r.json())["error"]
    assert s.node.streams.count() == 0
