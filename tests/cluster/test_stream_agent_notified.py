"""Upstream's ``agent_notified`` across a real three-node cluster: a notify
through node 1 is both events on a stream held on node 3, and a stream cut
between the two events of one notification resumes on node 2 with the one
still owed, then the rest, nothing twice.
"""

from __future__ import annotations

import hashlib

import aiohttp
import pytest

from tests.cluster.harness import Cluster
from tests.sse import Event, SSEReader

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(180)]


async def _notify(session: aiohttp.ClientSession, url: str, title: str) -> str:
    async with session.post(url + "/api/v1/notify",
                            json={"target_agent_id": "bob", "title": title, "payload": title * 3},
                            headers={"X-Agent-Id": "alice"}) as r:
        assert r.status == 201, await r.text()
        return str((await r.json())["id"])


async def _open(session: aiohttp.ClientSession, url: str, last: str | None = None) -> SSEReader:
    # As upstream's clients connect: X-Agent-Id, no agent_id in the query.
    headers = {"X-Agent-Id": "bob", **({"Last-Event-ID": last} if last else {})}
    resp = await session.get(url + "/api/v1/inbox/stream", headers=headers,
                             timeout=aiohttp.ClientTimeout(total=None))
    assert resp.status == 200, await resp.text()
    return SSEReader(resp)


def _kind(ev: Event) -> tuple[str, str]:
    return (ev.event, ev.data["notification"]["id"] if ev.event == "notify"
            else ev.data["inbox_row_id"])


async def test_agent_notified_across_nodes_and_a_resume_between_the_two(
        cluster: Cluster) -> None:
    async with aiohttp.ClientSession() as session:
        on3 = await _open(session, cluster.url("node3"))
        await on3.until("ready")
        a = await _notify(session, cluster.url("node1"), "a")
        first, second = await on3.next(), await on3.next()
        assert [_kind(first), _kind(second)] == [("notify", a), ("agent_notified", a)]
        assert second.data["recipient_agent_id"] == "bob"
        assert second.data["sender_agent_id"] == "alice"
        assert second.data["content_digest"] == "sha256:" + hashlib.sha256(b"aaa").hexdigest()
        assert second.data["notified_at"] == first.data["notification"]["created_at"]
        on3.resp.close()  # as if the connection broke after the first event
        later = [await _notify(session, cluster.url(f"node{1 + i % 3}"), f"b{i}")
                 for i in range(3)]

        on2 = await _open(session, cluster.url("node2"), last=first.id)
        got = []
        while (ev := await on2.next()).event != "ready":
            got.append(_kind(ev))
        on2.resp.close()
        # The same wake on every node: the correlation id is the op's id.
        again = await _open(session, cluster.url("node1"), last=first.id)
        wake = await again.next()
        again.resp.close()
    want = [("agent_notified", a)]
    for n in later:
        want += [("notify", n), ("agent_notified", n)]
    assert got == want
    assert wake.data == second.data
