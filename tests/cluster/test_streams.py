"""Push streams across a real three-node cluster (processes on loopback,
peers through the proxy net): a notify through node 1 wakes a stream held
on node 3, and how fast; a resumed stream misses nothing, even on another
node; project mail wakes a mailbox stream on a node that is not the owner.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.cluster.harness import Cluster
from tests.sse import SSEReader

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(180)]

EVENTS = 200
# The figure measured on the 2-core test machine under its usual load is in
# docs/performance.md ("Push streams"). The bound below is loose on purpose:
# noise from other processes must not trip it, but a stream that waited for
# anti-entropy (one catch-up interval, 2 s here) or polled would.
P99_BOUND_MS = 1000.0
MEDIAN_BOUND_MS = 200.0


@pytest.fixture
def slow_sync_cluster(tmp_path: Path) -> Iterator[Cluster]:
    # Anti-entropy every 2 s (the default): an event may only be fast if it
    # rode on the write's own replication.
    c = Cluster(tmp_path, catchup_interval_secs=2.0)
    try:
        c.start()
        yield c
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()


async def _notify(session: aiohttp.ClientSession, url: str, title: str, to: str = "bob") -> str:
    async with session.post(url + "/api/v1/notify", json={"target_agent_id": to, "title": title},
                            headers={"X-Agent-Id": "alice"}) as r:
        assert r.status == 201, await r.text()
        return str((await r.json())["id"])


async def _open(session: aiohttp.ClientSession, url: str, last: str | None = None,
                agent: str = "bob") -> aiohttp.ClientResponse:
    headers = {"X-Agent-Id": agent, **({"Last-Event-ID": last} if last else {})}
    resp = await session.get(url + "/api/v1/inbox/stream", params={"agent_id": agent},
                             headers=headers, timeout=aiohttp.ClientTimeout(total=None))
    assert resp.status == 200, await resp.text()
    return resp


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def test_a_notify_through_node1_reaches_a_stream_on_node3_fast(
        slow_sync_cluster: Cluster) -> None:
    c = slow_sync_cluster
    async with aiohttp.ClientSession() as session:
        reader = SSEReader(await _open(session, c.url("node3")))
        await reader.until("ready")
        sent_at: dict[str, float] = {}
        latencies: list[float] = []

        async def receive() -> None:
            while len(latencies) < EVENTS:
                ev = await reader.next(within=30)
                if ev.event == "notify":
                    title = ev.data["notification"]["title"]
                    latencies.append((time.perf_counter() - sent_at[title]) * 1000)

        receiver = asyncio.create_task(receive())
        for i in range(EVENTS):
            title = f"n{i}"
            sent_at[title] = time.perf_counter()
            await _notify(session, c.url("node1"), title)
        await asyncio.wait_for(receiver, 30)
        reader.resp.close()
    p50, p99 = _pct(latencies, 0.50), _pct(latencies, 0.99)
    print(f"\nnotify via node1 -> SSE on node3 over {EVENTS} events: "
          f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(latencies):.1f} ms")
    assert len(latencies) == EVENTS
    assert p50 < MEDIAN_BOUND_MS, latencies
    assert p99 < P99_BOUND_MS, latencies


async def test_resume_on_another_node_misses_nothing(cluster: Cluster) -> None:
    async with aiohttp.ClientSession() as session:
        reader = SSEReader(await _open(session, cluster.url("node3")))
        await reader.until("ready")
        before = [await _notify(session, cluster.url(f"node{1 + i % 3}"), f"a{i}")
                  for i in range(6)]
        seen: list[str] = []
        while len(seen) < 4:
            ev = await reader.next()
            if ev.event == "notify":
                seen.append(ev.data["notification"]["id"])
        cursor = reader.last_id
        reader.resp.close()
        # Written through every node while nobody listens.
        during = [await _notify(session, cluster.url(f"node{1 + i % 3}"), f"b{i}")
                  for i in range(9)]
        resumed = SSEReader(await _open(session, cluster.url("node2"), last=cursor))
        while (ev := await resumed.next()).event != "ready":
            if ev.event == "notify":  # each also comes as upstream's agent_notified
                seen.append(ev.data["notification"]["id"])
        after = await _notify(session, cluster.url("node1"), "c")
        while (ev := await resumed.next()).event != "notify":
            pass
        seen.append(ev.data["notification"]["id"])
        resumed.resp.close()
    assert set(seen) == {*before, *during, after}
    # A duplicate is allowed by the contract only for ops held past a gap;
    # on a healthy cluster there are none.
    assert len(seen) == len(set(seen))


async def test_mail_sent_through_node1_wakes_a_mailbox_stream_on_every_node(
        cluster: Cluster) -> None:
    a = {"workspace": "acme", "project": "sender"}
    b = {"workspace": "acme", "project": "receiver"}
    for scope in (a, b):
        code, body = cluster.call("node1", "POST", "/api/v1/sessions",
                                  {**scope, "harness": "claude"})
        assert code == 201, body
    async with aiohttp.ClientSession() as session:
        readers: list[SSEReader] = []
        for nid in cluster.ids:
            async with asyncio.timeout(10):
                while True:  # the session may still be on its way to this node
                    resp = await session.get(cluster.url(nid) + "/api/v1/messages/stream",
                                             params=b, timeout=aiohttp.ClientTimeout(total=None))
                    if resp.status == 200:
                        break
                    assert resp.status == 404, await resp.text()
                    resp.close()
                    await asyncio.sleep(0.1)
            reader = SSEReader(resp)
            await reader.until("ready")
            readers.append(reader)
        payload: dict[str, Any] = {"to_workspace": b["workspace"], "to_project": b["project"],
                                   "from_workspace": a["workspace"],
                                   "from_project": a["project"], "body": "hello from A"}
        async with session.post(cluster.url("node1") + "/api/v1/messages", json=payload) as r:
            assert r.status == 201, await r.text()
            msg_id = (await r.json())["message_id"]
        try:
            for reader in readers:
                ev = await reader.until("message", within=10)
                assert ev.data["message"]["id"] == msg_id
                assert ev.data["message"]["body"] == "hello from A"
        finally:
            for reader in readers:
                reader.resp.close()


async def test_a_resume_on_a_node_cut_off_from_the_others_still_replays(cluster: Cluster) -> None:
    async with aiohttp.ClientSession() as session:
        reader = SSEReader(await _open(session, cluster.url("node3"), agent="una"))
        ready = await reader.until("ready")
        sent = [await _notify(session, cluster.url("node1"), f"u{i}", to="una") for i in range(3)]
        reader.resp.close()
        async with asyncio.timeout(10):  # node3 holds them (W=2 may have been 1+2)
            while True:
                code, body = cluster.call("node3", "GET", "/api/v1/inbox?agent_id=una"
                                          "&consistency=local", headers={"X-Agent-Id": "una"})
                if code == 200 and body["count"] == 3:
                    break
                await asyncio.sleep(0.05)
        cluster.kill9("node1")
        cluster.kill9("node2")
        # No read quorum now; the resume replays what this node holds anyway.
        resumed = SSEReader(await _open(session, cluster.url("node3"), last=ready.id,
                                        agent="una"))
        got = []
        while (ev := await resumed.next(within=15)).event != "ready":
            if ev.event == "notify":
                got.append(ev.data["notification"]["id"])
        resumed.resp.close()
    assert got == sent
