"""Bad input on notify, inbox and mark-read: a 4xx with a clear error, never
a 500, and nothing written."""

from __future__ import annotations

from typing import Any

import pytest

from common import limits
from tests.daemon._fixtures_handlers import Bad, assert_refused

ME = {"X-Agent-Id": "alice"}
OK = {"target_agent_id": "bob", "title": "hi", "payload": "p"}
HOSTILE_IDS = ["'; DROP TABLE notes;--", "<script>alert(1)</script>", "bob smith", "\u202ebob",
               "b" * (limits.agent_id_max_chars + 1), "", "bob\x00"]


def with_(**fields: Any) -> dict[str, Any]:
    return {**OK, **fields}


NOTIFY = [
    Bad("malformed json", raw=b'{"to": "bob",', headers=ME),
    Bad("empty body", raw=b"   ", headers=ME),
    Bad("array body", body=[OK], headers=ME),
    Bad("no sender", body=OK),
    Bad("sender disagrees", body=with_(agent_id="mallory"), headers=ME, status=403),
    Bad("missing target", body={"title": "hi"}, headers=ME),
    Bad("missing title", body={"to": "bob", "body": "b"}, headers=ME),
    Bad("empty title", body=with_(title=""), headers=ME),
    Bad("title wrong type", body=with_(title=["hi"]), headers=ME),
    Bad("payload wrong type", body=with_(payload={"a": 1}), headers=ME),
    Bad("payload too long", body=with_(payload="p" * (limits.notify_payload_max_chars + 1)),
        headers=ME),
    Bad("10k-char unicode title", body=with_(title="\u0634" * 10_000), headers=ME),
    Bad("priority as string", body=with_(priority="5"), headers=ME),
    Bad("priority as bool", body=with_(priority=False), headers=ME),
    Bad("priority zero", body=with_(priority=0), headers=ME),
    Bad("priority eleven", body=with_(priority=11), headers=ME),
    Bad("unknown tier", body=with_(tier="urgent"), headers=ME),
    Bad("tier number", body=with_(tier=1), headers=ME),
    Bad("aliases disagree", body={"to": "bob", "target_agent_id": "carol", "title": "x"},
        headers=ME),
    Bad("title aliases disagree", body={"to": "bob", "title": "a", "subject": "b"}, headers=ME),
    Bad("NUL in title", body=with_(title="a\x00"), headers=ME),
    Bad("escape in payload", body=with_(payload="\x1b]0;pwned\x07"), headers=ME),
    *(Bad(f"target {v!r}", body=with_(target_agent_id=v), headers=ME) for v in HOSTILE_IDS),
    *(Bad(f"sender {v!r}", body=with_(agent_id=v)) for v in HOSTILE_IDS if v),
    Bad("X-Agent-Id hostile", body=OK, headers={"X-Agent-Id": "al ice"}),
    Bad("Idempotency-Key hostile", body=OK, headers={**ME, "Idempotency-Key": "k;k"}),
    Bad("oversized body", body=with_(payload="x" * (limits.request_body_max_bytes + 1)),
        headers=ME, status=413),
]


@pytest.mark.parametrize("bad", NOTIFY, ids=lambda b: b.name)
async def test_notify_refuses(client: Any, node: Any, bad: Bad) -> None:
    await assert_refused(client, node, "POST", "/api/v1/notify", bad)


INBOX = [
    Bad("no identity", params={}),
    Bad("another agent's inbox", params={"agent_id": "bob"}, headers=ME, status=403),
    Bad("as_agent of another", params={"as_agent": "bob"}, headers=ME, status=403),
    Bad("limit zero", params={"limit": "0"}, headers=ME),
    Bad("limit over max", params={"limit": str(limits.inbox_limit_max + 1)}, headers=ME),
    Bad("limit not a number", params={"limit": "all"}, headers=ME),
    Bad("min_priority high", params={"min_priority": "11"}, headers=ME),
    Bad("since garbage", params={"since": "last week"}, headers=ME),
    Bad("unread_only garbage", params={"unread_only": "maybe"}, headers=ME),
    Bad("mark_read garbage", params={"mark_read": "please"}, headers=ME),
    Bad("consistency unknown", params={"consistency": "strong"}, headers=ME),
    *(Bad(f"agent_id {v!r}", params={"agent_id": v}) for v in HOSTILE_IDS if v),
    Bad("X-Agent-Id hostile", params={}, headers={"X-Agent-Id": "<script>"}),
]


@pytest.mark.parametrize("bad", INBOX, ids=lambda b: b.name)
async def test_inbox_refuses(client: Any, node: Any, bad: Bad) -> None:
    await assert_refused(client, node, "GET", "/api/v1/inbox", bad)


MARK = [
    Bad("malformed json", raw=b'{"ids": [', headers=ME),
    Bad("ids missing", body={}, headers=ME),
    Bad("ids not a list", body={"ids": "a,b"}, headers=ME),
    Bad("id not a string", body={"ids": [1]}, headers=ME),
    Bad("id out of pattern", body={"ids": ["'; DROP TABLE notes;--"]}, headers=ME),
    Bad("id with NUL", body={"ids": ["a\x00"]}, headers=ME),
    Bad("too many ids", body={"ids": [f"i{n}" for n in range(limits.mark_read_ids_max + 1)]},
        headers=ME),
    Bad("no identity", body={"ids": ["a"]}),
    Bad("marking for another", body={"agent_id": "bob", "ids": ["a"]}, headers=ME, status=403),
    Bad("consistency unknown", body={"ids": ["a"]}, params={"consistency": "all"}, headers=ME),
    Bad("oversized body", body={"ids": ["x" * (limits.request_body_max_bytes + 1)]}, headers=ME,
        status=413),
]


@pytest.mark.parametrize("bad", MARK, ids=lambda b: b.name)
async def test_mark_read_refuses(client: Any, node: Any, bad: Bad) -> None:
    await assert_refused(client, node, "POST", "/api/v1/inbox/read", bad)


@pytest.mark.parametrize("text", ["'; DROP TABLE notes; --", "<img src=x onerror=alert(1)>",
                                  "\u202egnp.exe", "\U0001f4a5" * 900, "line1\nline2\ttab"])
async def test_hostile_but_legal_text_is_delivered_verbatim(client: Any, text: str) -> None:
    resp = await client.post("/api/v1/notify", headers=ME,
                             json={"to": "bob", "subject": text, "body": text * 2})
    assert resp.status == 201, await resp.text()
    inbox = await (await client.get("/api/v1/inbox", headers={"X-Agent-Id": "bob"})).json()
    assert inbox["messages"][0]["title"] == text
    assert inbox["messages"][0]["payload"] == text * 2
