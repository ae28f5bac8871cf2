"""Upstream's ``agent_notified`` on the inbox stream, beside our ``notify``.

A client written for the upstream daemon opens ``GET /api/v1/inbox/stream``
with nothing but ``X-Agent-Id`` and listens for ``agent_notified``; ours
listens for ``notify``. Each notification is both events, in that order,
and a resume from either event's id sends what follows it and nothing twice
(the first event's id says the second is still owed). One real node, real
SQLite, the real app on a loopback port; the cross-node case is in
``tests/cluster/test_stream_agent_notified.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

from daemon.http.stream_hub import Owed, decode_event_id, encode_event_id
from tests.sse import Event, SSEReader

BODY_WORDS = "the secret plan is in the body"


async def notify(client: Any, title: str, to: str = "bob", payload: str = BODY_WORDS) -> dict[str, Any]:
    resp = await client.post("/api/v1/notify", json={"target_agent_id": to, "title": title,
                                                     "payload": payload},
                             headers={"X-Agent-Id": "alice"})
    assert resp.status == 201, await resp.text()
    return dict(await resp.json())


async def open_inbox(client: Any, last: str | None = None, agent: str = "bob") -> SSEReader:
    headers = {"X-Agent-Id": agent, **({"Last-Event-ID": last} if last else {})}
    resp = await client.get("/api/v1/inbox/stream", headers=headers)
    assert resp.status == 200, await resp.text()
    return SSEReader(resp)


async def until_ready(reader: SSEReader) -> list[Event]:
    out = []
    while (ev := await reader.next()).event != "ready":
        out.append(ev)
    return out


def kinds(events: list[Event]) -> list[tuple[str, str]]:
    """(event, notification id) of each event, whichever of the two it is."""
    return [(e.event, e.data["notification"]["id"] if e.event == "notify"
             else e.data["inbox_row_id"]) for e in events]


class RawSSE:
    """An SSE client on a bare socket, as upstream's clients connect: a GET with
    ``Accept: text/event-stream`` and ``X-Agent-Id``, no query, no cursor."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int, agent: str) -> RawSSE:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /api/v1/inbox/stream HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n"
                     f"Accept: text/event-stream\r\nX-Agent-Id: {agent}\r\n\r\n".encode())
        await writer.drain()
        status = await reader.readline()
        assert b" 200 " in status, status
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass  # the response headers
        return cls(reader, writer)

    async def event(self) -> tuple[str, dict[str, Any]]:
        name, data = "message", []
        while True:
            line = (await asyncio.wait_for(self.reader.readline(), 10)).decode().rstrip("\r\n")
            if line == "":
                if data:
                    return name, json.loads("\n".join(data))
                name = "message"
                continue
            field, _, value = line.partition(":")
            if field == "event":
                name = value.strip()
            elif field == "data":
                data.append(value.removeprefix(" "))

    def close(self) -> None:
        self.writer.close()


async def test_an_upstream_client_hears_agent_notified_with_nothing_extra(client: Any) -> None:
    raw = await RawSSE.open(client.server.port, "bob")
    try:
        assert (await raw.event())[0] == "ready"
        sent = await notify(client, "deploy status")
        await notify(client, "not for bob", to="carol")
        mine = await notify(client, "second", payload="other words")
        got = [await raw.event() for _ in range(4)]
    finally:
        raw.close()
    assert [name for name, _ in got] == ["notify", "agent_notified"] * 2
    note, wake = got[0][1]["notification"], got[1][1]
    assert wake == {
        "event": "agent_notified",
        "recipient_agent_id": "bob",
        "sender_agent_id": "alice",
        "inbox_row_id": sent["id"],
        "correlation_id": wake["correlation_id"],
        "namespace": note["namespace"],
        "content_digest": "sha256:" + hashlib.sha256(BODY_WORDS.encode()).hexdigest(),
        "notified_at": note["created_at"],
    }
    origin, _, seq = wake["correlation_id"].rpartition("#")
    assert origin and int(seq) > 0
    assert BODY_WORDS not in json.dumps(wake) and "deploy status" not in json.dumps(wake)
    assert got[3][1]["inbox_row_id"] == mine["id"]
    assert got[3][1]["correlation_id"] != wake["correlation_id"]


async def test_both_events_of_one_notification_and_a_resume_after_each(client: Any) -> None:
    reader = await open_inbox(client)
    await reader.until("ready")
    a = (await notify(client, "a"))["id"]
    b = (await notify(client, "b"))["id"]
    live = [await reader.next() for _ in range(4)]
    reader.resp.close()
    assert kinds(live) == [("notify", a), ("agent_notified", a), ("notify", b),
                           ("agent_notified", b)]
    # The first event's id owes the second; the second's is a plain cursor.
    cursor, owed = decode_event_id(live[0].id or "")
    assert owed is not None and (owed.record, owed.done) == (a, 1)
    assert decode_event_id(live[1].id or "") == (cursor, None)
    c = (await notify(client, "c"))["id"]  # while nobody listens

    after_notify = await until_ready(await open_inbox(client, last=live[0].id))
    assert kinds(after_notify) == [("agent_notified", a), ("notify", b), ("agent_notified", b),
                                   ("notify", c), ("agent_notified", c)]
    assert after_notify[0].data == live[1].data  # the same event, nothing else of a again

    after_wake = await until_ready(await open_inbox(client, last=live[1].id))
    assert kinds(after_wake) == [("notify", b), ("agent_notified", b), ("notify", c),
                                 ("agent_notified", c)]

    after_last = await open_inbox(client, last=live[3].id)
    assert kinds(await until_ready(after_last)) == [("notify", c), ("agent_notified", c)]
    d = (await notify(client, "d"))["id"]  # and live again after the replay
    assert kinds([await after_last.next(), await after_last.next()]) == [
        ("notify", d), ("agent_notified", d)]


async def test_an_owed_event_whose_op_the_cursor_does_not_cover_comes_once(client: Any) -> None:
    """An id may owe the rest of an op its cursor does not cover (an op replayed past
    the stream's snapshot): the replay then sends only the rest of that op."""
    reader = await open_inbox(client)
    start = (await reader.until("ready")).id or ""
    a = (await notify(client, "a"))["id"]
    b = (await notify(client, "b"))["id"]
    first = await reader.next()
    reader.resp.close()
    _, owed = decode_event_id(first.id or "")
    assert owed is not None
    before_a, _ = decode_event_id(start)
    resumed = await until_ready(await open_inbox(client, last=encode_event_id(before_a, owed)))
    assert kinds(resumed) == [("agent_notified", a), ("notify", b), ("agent_notified", b)]


async def test_an_id_owing_another_agents_notification_shows_nothing_of_it(client: Any) -> None:
    reader = await open_inbox(client)
    start = (await reader.until("ready")).id or ""
    reader.resp.close()
    theirs = (await notify(client, "for carol", to="carol"))["id"]
    cursor, _ = decode_event_id(start)
    # A forged id: the cursor covers carol's op, and it claims her record is owed.
    covering = {o: s + 10 for o, s in cursor.items()} or {"node1": 10}
    forged = encode_event_id(covering, Owed(next(iter(covering)), 1, theirs, 1))
    got = await until_ready(await open_inbox(client, last=forged))
    assert got == []


async def test_an_owed_part_that_is_not_ours_is_a_400(client: Any) -> None:
    good = encode_event_id({"node1": 3})
    for bad in (good + ".!!!", good + ".W10", good + "." + good[3:],
                encode_event_id({"node1": 3}, Owed("node1", 3, "x" * 500, 1))):
        resp = await client.get("/api/v1/inbox/stream",
                                headers={"X-Agent-Id": "bob", "Last-Event-ID": bad})
        assert resp.status == 400, bad
        assert (await resp.json())["code"] == "bad_last_event_id"


async def test_the_mailbox_stream_ids_stay_plain_cursors(client: Any) -> None:
    for scope in ({"workspace": "acme", "project": "a"}, {"workspace": "acme", "project": "b"}):
        r = await client.post("/api/v1/sessions", json={**scope, "harness": "claude"})
        assert r.status == 201
    resp = await client.get("/api/v1/messages/stream", params={"workspace": "acme",
                                                                "project": "b"})
    reader = SSEReader(resp)
    await reader.until("ready")
    r = await client.post("/api/v1/messages", json={
        "to_workspace": "acme", "to_project": "b", "from_workspace": "acme",
        "from_project": "a", "body": "hi"})
    assert r.status == 201
    ev = await reader.until("message")
    assert decode_event_id(ev.id or "")[1] is None
    reader.resp.close()


async def test_an_owed_event_of_an_op_this_node_has_not_got_yet_comes_live_alone(
        client: Any) -> None:
    """Resumed on a node that lacks the op the id owes (its read quorum failed, say):
    when the op arrives, only the owed event goes out, not the ``notify`` again."""
    await notify(client, "before")  # so the node's own origin shows in the cursor
    reader = await open_inbox(client)
    cursor, _ = decode_event_id((await reader.until("ready")).id or "")
    reader.resp.close()
    [(origin, seq)] = cursor.items()
    ahead = encode_event_id({origin: seq + 1}, Owed(origin, seq + 1, "not-here-yet", 1))
    resumed = await open_inbox(client, last=ahead)
    assert await until_ready(resumed) == []
    a = (await notify(client, "a"))["id"]  # the op the id spoke of
    b = (await notify(client, "b"))["id"]
    got = [await resumed.next() for _ in range(3)]
    assert kinds(got) == [("agent_notified", a), ("notify", b), ("agent_notified", b)]
    assert got[0].data["correlation_id"] == f"{origin}#{seq + 1}"
