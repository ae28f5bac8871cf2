"""Bad input on every memories endpoint: a 4xx with a clear error, never a
500, and nothing written. Hostile but legal text is stored verbatim."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from common import limits
from tests.daemon._fixtures_handlers import Bad, assert_refused

OK = {"title": "t", "content": "c"}
BIG = limits.request_body_max_bytes
HOSTILE_IDS = ["'; DROP TABLE memories;--", "<script>alert(1)</script>", "a b", "\u202eevil",
               "x" * 129, "alice\n", "bob|cat"]


def with_(**fields: Any) -> dict[str, Any]:
    return {**OK, **fields}


CREATE = [
    Bad("malformed json", raw=b'{"title": "t", "content": '),
    Bad("empty body", raw=b""),
    Bad("not utf-8", raw=b'{"title": "\xff\xfe", "content": "c"}'),
    Bad("array body", body=[OK]),
    Bad("string body", body="title"),
    Bad("missing title", body={"content": "c"}),
    Bad("missing content", body={"title": "t"}),
    Bad("empty title", body=with_(title="")),
    Bad("title wrong type", body=with_(title=123)),
    Bad("content null", body=with_(content=None)),
    Bad("priority as string", body=with_(priority="5")),
    Bad("priority as float", body=with_(priority=5.5)),
    Bad("priority as bool", body=with_(priority=True)),
    Bad("priority too low", body=with_(priority=0)),
    Bad("priority too high", body=with_(priority=11)),
    Bad("confidence as string", body=with_(confidence="0.5")),
    Bad("confidence above 1", body=with_(confidence=1.5)),
    Bad("confidence NaN", raw=b'{"title": "t", "content": "c", "confidence": NaN}'),
    Bad("unknown tier", body=with_(tier="huge")),
    Bad("tier wrong case", body=with_(tier="LONG")),
    Bad("tier empty", body=with_(tier="")),
    Bad("tags not a list", body=with_(tags="a,b")),
    Bad("tag not a string", body=with_(tags=[1])),
    Bad("tag with comma", body=with_(tags=["a,b"])),
    Bad("tag with escape code", body=with_(tags=["\x1b[31mred"])),
    Bad("too many tags", body=with_(tags=[f"t{i}" for i in range(limits.tags_max + 1)])),
    Bad("metadata not an object", body=with_(metadata=["x"])),
    Bad("metadata too big", body=with_(metadata={"k": "v" * limits.memory_metadata_max_bytes})),
    Bad("ttl negative", body=with_(ttl_secs=-1)),
    Bad("ttl as string", body=with_(ttl_secs="60")),
    Bad("ttl absurd", body=with_(ttl_secs=limits.memory_ttl_secs_max + 1)),
    Bad("expires_at garbage", body=with_(expires_at="next tuesday")),
    Bad("expires_at in the past", body=with_(expires_at="2000-01-01T00:00:00Z")),
    Bad("ttl and expires_at", body=with_(ttl_secs=5, expires_at="2999-01-01T00:00:00Z")),
    Bad("NUL in title", body=with_(title="a\x00b")),
    Bad("bell in content", body=with_(content="ding\x07")),
    Bad("C1 control in content", body=with_(content="x\x85y")),
    Bad("newline in namespace", body=with_(namespace="ns\nother")),
    Bad("namespace too long", body=with_(namespace="n" * (limits.namespace_max_chars + 1))),
    Bad("10k-char unicode title", body=with_(title="\U0001f600" * 10_000)),
    Bad("source empty", body=with_(source="")),
    *(Bad(f"agent_id {v!r}", body=with_(agent_id=v)) for v in HOSTILE_IDS),
    Bad("agent_id empty", body=with_(agent_id="")),
    Bad("X-Agent-Id hostile", body=OK, headers={"X-Agent-Id": "<script>"}),
    Bad("X-Agent-Id disagrees", body=with_(agent_id="bob"), headers={"X-Agent-Id": "alice"},
        status=403),
    Bad("Idempotency-Key hostile", body=OK, headers={"Idempotency-Key": "a key; DROP"}),
    Bad("Idempotency-Key too long", body=OK, headers={"Idempotency-Key": "k" * 129}),
    Bad("oversized body", body=with_(content="x" * (BIG + 1)), status=413),
    Bad("content over its limit", body=with_(content="x" * (limits.memory_content_max_chars + 1))),
]


@pytest.mark.parametrize("bad", CREATE, ids=lambda b: b.name)
async def test_create_refuses(client: Any, node: Any, bad: Bad) -> None:
    await assert_refused(client, node, "POST", "/api/v1/memories", bad)


@pytest.fixture
async def memory_id(client: Any) -> str:
    resp = await client.post("/api/v1/memories", json=OK)
    return str((await resp.json())["id"])


UPDATE = [
    Bad("malformed json", raw=b"{"),
    Bad("empty object", body={}),
    Bad("only agent_id", body={"agent_id": "x"}),
    Bad("priority as string", body={"priority": "9"}),
    Bad("unknown tier", body={"tier": "forever"}),
    Bad("title with NUL", body={"title": "\x00"}),
    Bad("tags wrong type", body={"tags": {"a": 1}}),
    Bad("confidence negative", body={"confidence": -0.1}),
    Bad("expires_at garbage", body={"expires_at": "soon"}),
    Bad("oversized body", body={"content": "x" * (BIG + 1)}, status=413),
]


@pytest.mark.parametrize("bad", UPDATE, ids=lambda b: b.name)
async def test_update_refuses(client: Any, node: Any, memory_id: str, bad: Bad) -> None:
    await assert_refused(client, node, "PUT", f"/api/v1/memories/{memory_id}", bad)


@pytest.mark.parametrize("method,suffix,body", [
    ("GET", "", None), ("PUT", "", {"title": "x"}), ("DELETE", "", None),
    ("POST", "/promote", None)])
@pytest.mark.parametrize("bad_id", ["'%3B DROP TABLE memories%3B--", "%3Cscript%3E", "a%20b",
                                    "x" * 129, "%E2%80%AEevil"])
async def test_hostile_path_ids(client: Any, node: Any, method: str, suffix: str,
                                body: Any, bad_id: str) -> None:
    path = f"/api/v1/memories/{bad_id}{suffix}"
    error = await assert_refused(client, node, method, path, Bad("hostile id", body=body))
    assert "memory id" in error


LIST = [
    Bad("limit zero", params={"limit": "0"}),
    Bad("limit over max", params={"limit": str(limits.memory_list_limit_max + 1)}),
    Bad("limit not a number", params={"limit": "ten"}),
    Bad("offset negative", params={"offset": "-1"}),
    Bad("unknown tier", params={"tier": "eternal"}),
    Bad("min_priority too high", params={"min_priority": "11"}),
    Bad("tag with control char", params={"tags": "a,\x07"}),
    Bad("agent_id hostile", params={"agent_id": "<script>"}),
    Bad("namespace with newline", params={"namespace": "a\nb"}),
]


@pytest.mark.parametrize("bad", LIST, ids=lambda b: b.name)
async def test_list_refuses(client: Any, node: Any, bad: Bad) -> None:
    await assert_refused(client, node, "GET", "/api/v1/memories", bad)


BULK = [
    Bad("malformed json", raw=b"[{"),
    Bad("object without memories", body={"items": []}),
    Bad("a string", body="memories"),
    Bad("over the item limit", body=[OK] * (limits.bulk_create_max + 1), status=413),
    Bad("oversized body", body=[with_(content="x" * (BIG // 2))] * 3, status=413),
    Bad("X-Agent-Id hostile", body=[OK], headers={"X-Agent-Id": "a b"}),
    Bad("Idempotency-Key hostile", body=[OK], headers={"Idempotency-Key": "<k>"}),
]


@pytest.mark.parametrize("bad", BULK, ids=lambda b: b.name)
async def test_bulk_refuses(client: Any, node: Any, bad: Bad) -> None:
    await assert_refused(client, node, "POST", "/api/v1/memories/bulk", bad)


LEGAL_HOSTILE_TEXT = [
    "'; DROP TABLE memories; --",
    "<script>alert('x')</script>",
    "\u202eRTL override\u202c and \u200b zero width",
    "\U0001f600" * 1000,
    "tab\tnewline\ncarriage\r",
    '{"json": "in text"} \\ backslash',
    "Robert'); DELETE FROM notes WHERE ('1'='1",
]


@pytest.mark.parametrize("text", LEGAL_HOSTILE_TEXT)
async def test_hostile_but_legal_text_round_trips(client: Any, text: str) -> None:
    one_line = re.sub(r"[\x00-\x1f,]", " ", text)[:100]
    resp = await client.post("/api/v1/memories", json={
        "title": text, "content": text * 3, "tags": [one_line],
        "metadata": {text: text}, "namespace": one_line})
    assert resp.status == 201, await resp.text()
    mem = await resp.json()
    got = await (await client.get(f"/api/v1/memories/{mem['id']}")).json()
    assert got["title"] == text and got["content"] == text * 3
    assert got["metadata"][text] == text
    listing = await (await client.get("/api/v1/memories",
                                      params={"namespace": got["namespace"]})).json()
    assert [m["id"] for m in listing["memories"]] == [mem["id"]]


async def test_deeply_nested_json_is_a_400(client: Any, node: Any) -> None:
    await assert_refused(client, node, "POST", "/api/v1/memories",
                         Bad("deep nesting", raw=b'{"title": "t", "content": "c", "metadata": '
                             + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001))


async def test_chunked_body_over_the_limit_is_a_413(client: Any, node: Any) -> None:
    item = json.dumps(with_(content="x" * 800_000)).encode()  # three of these exceed 2 MiB
    chunks = [b"[", item, b",", item, b",", item, b"]"]

    async def stream() -> Any:
        for chunk in chunks:
            yield chunk

    before = node.store.version_vector()
    resp = await client.post("/api/v1/memories/bulk", data=stream(),
                             headers={"Content-Type": "application/json"})
    assert resp.status == 413, (resp.status, (await resp.text())[:200])
    assert node.store.version_vector() == before
