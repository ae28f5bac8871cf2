"""Replies, threads and completion on one real node (real SQLite, the real
app): notify and mail threads, ``POST /messages/reply`` and
``/messages/complete``, who may complete (keys mode, allowed and refused),
and bad input refused with nothing written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from daemon.api.app import build_app
from daemon.wiring import build_node
from tests.daemon.authz_fixtures import ALPHA, BETA, ROOT_KEY, WS, key_of, keys_auth
from tests.daemon.identity.test_authz import bearer, settings_for

A = {"workspace": "default", "project": "project-a"}
B = {"workspace": "default", "project": "project-b"}


@pytest.fixture
async def projects(client: Any) -> Any:
    for scope, harness in ((A, "kimi"), (B, "claude-code")):
        r = await client.post("/api/v1/sessions", json={**scope, "harness": harness})
        assert r.status == 201, await r.text()
    return client


async def send(c: Any, **extra: Any) -> dict[str, Any]:
    r = await c.post("/api/v1/messages", json={
        "to_workspace": B["workspace"], "to_project": B["project"],
        "from_workspace": A["workspace"], "from_project": A["project"],
        "body": "please add /v1/export", **extra})
    assert r.status == 201, await r.text()
    out: dict[str, Any] = await r.json()
    return out


async def pop(c: Any, headers: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    r = await c.post("/api/v1/messages/pop", json={**B, **extra}, headers=headers or {})
    assert r.status == 200, await r.text()
    out: dict[str, Any] = await r.json()
    return out


async def complete(c: Any, mid: str, headers: dict[str, str] | None = None,
                   **extra: Any) -> Any:
    return await c.post("/api/v1/messages/complete", headers=headers or {},
                        json={"message_id": mid, "result": "done", **extra})


async def listed(c: Any, scope: dict[str, str], **params: Any) -> list[dict[str, Any]]:
    r = await c.get("/api/v1/messages", params={**scope, **params})
    assert r.status == 200, await r.text()
    rows: list[dict[str, Any]] = (await r.json())["messages"]
    return rows


# -- threads -----------------------------------------------------------------------

async def test_a_reply_goes_to_the_sender_in_the_thread(projects: Any) -> None:
    c = projects
    first = await send(c, subject="export endpoint")
    assert first["thread_id"] == first["message_id"] and first["in_reply_to"] is None
    r = await c.post("/api/v1/messages/reply", json={
        "message_id": first["message_id"], "body": "which format?"})
    assert r.status == 201, await r.text()
    answer = await r.json()
    assert (answer["to_workspace"], answer["to_project"]) == (A["workspace"], A["project"])
    assert (answer["from_workspace"], answer["from_project"]) == (B["workspace"], B["project"])
    assert answer["in_reply_to"] == first["message_id"]
    assert answer["thread_id"] == first["message_id"]
    inbox_a = await listed(c, A, box="inbox")
    assert [m["subject"] for m in inbox_a] == ["Re: export endpoint"]
    # a reply to the reply stays in the first message's thread
    again = await send(c, body="NDJSON", in_reply_to=answer["message_id"])
    assert again["thread_id"] == first["message_id"]
    assert again["in_reply_to"] == answer["message_id"]
    unrelated = await send(c, body="something else")
    thread = await listed(c, B, box="inbox", thread_id=first["message_id"])
    assert [m["id"] for m in thread] == [first["message_id"], again["message_id"]]
    assert unrelated["message_id"] not in {m["id"] for m in thread}
    sent = await listed(c, A, box="outbox", thread_id=first["message_id"], all="true")
    assert [m["id"] for m in sent] == [again["message_id"], first["message_id"]]


async def test_the_decision_convention_keeps_working(projects: Any) -> None:
    c = projects
    q = await send(c, subject="decision: Accept the known-flake exception?",
                   body="question: accept?\noptions:\n- id: accept")
    r = await c.post("/api/v1/messages/reply", json={
        "message_id": q["message_id"], "body": f"question_id: {q['message_id']}\noption: accept"})
    assert r.status == 201, await r.text()
    inbox_a = await listed(c, A, box="inbox")
    assert [m["subject"] for m in inbox_a] == [f"decision-reply: {q['message_id']}"]
    # the plain send the document describes still works, and is not threaded
    plain = await c.post("/api/v1/messages", json={
        "to_workspace": A["workspace"], "to_project": A["project"],
        "from_workspace": B["workspace"], "from_project": B["project"],
        "subject": f"decision-reply: {q['message_id']}", "body": "option: reject"})
    assert plain.status == 201
    assert (await plain.json())["thread_id"] == (await plain.json())["message_id"]


async def test_notify_reply_to_answers_the_sender(client: Any) -> None:
    alice, bob = {"X-Agent-Id": "alice"}, {"X-Agent-Id": "bob"}
    r = await client.post("/api/v1/notify", headers=alice,
                          json={"target_agent_id": "bob", "title": "review?", "payload": "pr 12"})
    assert r.status == 201, await r.text()
    first = await r.json()
    assert first["thread_id"] == first["id"] and first["in_reply_to"] is None
    r = await client.post("/api/v1/notify", headers=bob,
                          json={"reply_to": first["id"], "title": "done", "payload": "lgtm"})
    assert r.status == 201, await r.text()
    answer = await r.json()
    assert answer["to"] == "alice" and answer["in_reply_to"] == first["id"]
    assert answer["thread_id"] == first["id"]
    await client.post("/api/v1/notify", headers=bob,
                      json={"target_agent_id": "alice", "title": "other", "payload": "x"})
    box = await (await client.get("/api/v1/inbox", headers=alice,
                                  params={"agent_id": "alice", "thread_id": first["id"]})).json()
    assert [m["id"] for m in box["messages"]] == [answer["id"]]
    assert box["messages"][0]["in_reply_to"] == first["id"]
    # carol neither received nor sent it: the id is not hers to answer (and not revealed)
    r = await client.post("/api/v1/notify", headers={"X-Agent-Id": "carol"},
                          json={"reply_to": first["id"], "title": "me too", "payload": "?"})
    assert r.status == 404
    # reply_to names the target; another target is refused
    r = await client.post("/api/v1/notify", headers=bob, json={
        "reply_to": first["id"], "target_agent_id": "carol", "title": "t", "payload": "p"})
    assert r.status == 400


# -- completion ----------------------------------------------------------------------

async def test_the_claimer_completes_and_the_sender_sees_it(projects: Any) -> None:
    c = projects
    sent = await send(c)
    r = await complete(c, sent["message_id"])
    assert r.status == 409  # pending: nothing to complete yet
    popped = await pop(c, headers={"X-Agent-Id": "worker"})
    mid = popped["message"]["id"]
    r = await complete(c, mid, headers={"X-Agent-Id": "someone-else"})
    assert r.status == 403
    r = await complete(c, mid, headers={"X-Agent-Id": "worker"}, result="blocked",
                       note="needs a token: api_key=sk-live-0123456789abcdef0123456789")
    assert r.status == 200, await r.text()
    done = await r.json()
    assert done["completion"]["result"] == "blocked" and done["scrubbed"] >= 1
    assert "sk-live-0123456789abcdef" not in done["completion"]["note"]
    # the same answer again is a replay; a different one is a conflict
    again = await complete(c, mid, headers={"X-Agent-Id": "worker"}, result="blocked",
                           note="needs a token: api_key=sk-live-0123456789abcdef0123456789")
    assert again.status == 200 and (await again.json())["replayed"] is True
    other = await complete(c, mid, headers={"X-Agent-Id": "worker"}, result="done")
    assert other.status == 409
    outbox = await listed(c, A, box="outbox", all="true")
    row = next(m for m in outbox if m["id"] == mid)
    assert row["state"] == "claimed"
    assert row["completion"]["result"] == "blocked"
    assert row["completion"]["note"] == done["completion"]["note"]
    assert await listed(c, A, box="outbox") == []  # pending only, as before


async def test_a_session_claim_is_completed_by_that_session(projects: Any) -> None:
    c = projects
    r = await c.post("/api/v1/sessions", json={**B, "harness": "codex", "session_id": "s-1"})
    assert r.status == 201
    sent = await send(c)
    popped = await pop(c, headers={"x-memory-actor-session-id": "s-1"})
    assert popped["message"]["id"] == sent["message_id"]
    r = await complete(c, sent["message_id"], headers={"x-memory-actor-session-id": "s-2"})
    assert r.status == 403
    r = await complete(c, sent["message_id"], headers={"x-memory-actor-session-id": "s-1"}, result="rejected",
                       note="out of scope")
    assert r.status == 200, await r.text()


async def test_a_claim_without_any_identity_cannot_be_completed(projects: Any) -> None:
    sent = await send(projects)
    await pop(projects)  # anonymous, no session, no X-Agent-Id
    r = await complete(projects, sent["message_id"], headers={"X-Agent-Id": "worker"})
    assert r.status == 403
    assert "recorded no session, key or agent id" in (await r.json())["error"]


@pytest.mark.parametrize("body", [
    {"message_id": "m", "result": "finished"},
    {"message_id": "m"},
    {"result": "done"},
    {"message_id": "a/b", "result": "done"},
    {"message_id": "m", "result": 1},
    {"message_id": "m", "result": "done", "note": ["not", "text"]},
])
async def test_bad_completion_input_is_a_400_and_writes_nothing(
        projects: Any, node: Any, body: dict[str, Any]) -> None:
    before = dict(node.store.version_vector())  # any write, of any kind, moves it
    r = await projects.post("/api/v1/messages/complete", json=body)
    assert r.status == 400, await r.text()
    assert dict(node.store.version_vector()) == before


async def test_refused_replies_and_completions_write_nothing(projects: Any, node: Any) -> None:
    c = projects
    sent = await send(c)
    await pop(c, headers={"X-Agent-Id": "worker"})
    before = dict(node.store.version_vector())
    assert (await complete(c, sent["message_id"], headers={"X-Agent-Id": "x"})).status == 403
    assert (await complete(c, "no-such-message")).status == 404
    r = await c.post("/api/v1/messages/reply", json={"message_id": "no-such", "body": "b"})
    assert r.status == 404
    r = await c.post("/api/v1/messages", json={
        "to_workspace": B["workspace"], "to_project": B["project"], **{
            "from_workspace": A["workspace"], "from_project": A["project"]},
        "body": "b", "in_reply_to": "no-such"})
    assert r.status == 404
    assert dict(node.store.version_vector()) == before


# -- grants (keys mode) ---------------------------------------------------------------

@pytest.fixture
async def keyed(tmp_path: Path, aiohttp_client: Any) -> AsyncIterator[Any]:
    node = await build_node(settings_for(tmp_path / "keys.db", keys_auth()))
    await node.start()
    try:
        client = await aiohttp_client(build_app(node))
        for project, harness in ((ALPHA, "kimi"), (BETA, "claude-code")):
            r = await client.post("/api/v1/sessions", headers=bearer(ROOT_KEY),
                                  json={"workspace": WS, "project": project, "harness": harness})
            assert r.status == 201, await r.text()
        yield client
    finally:
        await node.stop()


async def test_grants_and_the_claiming_key(keyed: Any) -> None:
    c = keyed
    r = await c.post("/api/v1/messages", headers=bearer(key_of("both-write")), json={
        "to_workspace": WS, "to_project": ALPHA, "from_workspace": WS, "from_project": BETA,
        "body": "please"})
    assert r.status == 201, await r.text()
    mid = (await r.json())["message_id"]
    r = await c.post("/api/v1/messages/pop", headers=bearer(key_of("alpha-write")),
                     json={"workspace": WS, "project": ALPHA})
    assert (await r.json())["message"]["id"] == mid
    # read only on the mailbox: refused by the policy table
    r = await complete(c, mid, headers=bearer(key_of("both-read")))
    assert r.status == 403
    # write on the mailbox, but not the key that claimed it
    r = await complete(c, mid, headers=bearer(key_of("workspace-write")))
    assert r.status == 403
    # a key that may not read the project learns nothing of the message
    r = await complete(c, mid, headers=bearer(key_of("other-workspace")))
    assert r.status == 404
    r = await complete(c, mid, headers=bearer(key_of("alpha-write")), note="shipped")
    assert r.status == 200, await r.text()
    # the sender's outbox (read on beta) shows the outcome
    r = await c.get("/api/v1/messages", headers=bearer(key_of("beta-write")),
                    params={"workspace": WS, "project": BETA, "box": "outbox", "all": "true"})
    row = (await r.json())["messages"][0]
    assert row["completion"]["result"] == "done" and row["completion"]["note"] == "shipped"
    # a reply needs write on both projects, like a send
    r = await c.post("/api/v1/messages/reply", headers=bearer(key_of("alpha-write")),
                     json={"message_id": mid, "body": "done, see notes"})
    assert r.status == 403
    r = await c.post("/api/v1/messages/reply", headers=bearer(key_of("both-write")),
                     json={"message_id": mid, "body": "done, see notes"})
    assert r.status == 201, await r.text()
