"""Handoffs and the project brief over HTTP, on a real node: ``POST /handoff``
stores a single-use handoff, ``GET /handoff`` returns it once (then ``null``),
compiles the brief within its byte budget when asked, and the
``inbox_only=1`` path claims nothing."""

from __future__ import annotations

from typing import Any

from common import limits
from common.handoffs import box_project
from daemon.http.appkeys import NODE
from daemon.services.handoff import Page, Pointer, compile_brief
from tests.daemon.services.test_mail import A, B, send, start


async def _write(client: Any, body: str, scope: dict[str, str] = B, **extra: Any) -> Any:
    resp = await client.post("/handoff", json={**scope, "body": body, **extra})
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def _get(client: Any, **params: str) -> Any:
    resp = await client.get("/handoff", params=params)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_a_handoff_is_returned_once(client) -> None:  # type: ignore[no-untyped-def]
    await start(client, B, "claude-code", "sess-b")
    wrote = await _write(client, "JWT rotation is broken; try session cookies next.",
                         subject="auth refactor", from_agent="codex")
    assert wrote["state"] == "pending" and wrote["replaced"] == 0
    assert wrote["from_agent"] == "codex"

    first = await _get(client, **B, harness="claude-code")
    h = first["handoff"]
    assert h["id"] == wrote["handoff_id"] and h["subject"] == "auth refactor"
    assert "session cookies" in h["body"] and h["from_agent"] == "codex"
    assert first["request_id"] == h["request_id"]
    assert "session cookies" in first["context"] and first["brief"] is None

    # retrying with the claim's request id answers the same handoff ...
    again = await _get(client, **B, request_id=first["request_id"])
    assert again["handoff"]["id"] == h["id"]
    # ... and any other session start finds nothing
    later = await _get(client, **B)
    assert later["handoff"] is None and later["context"] is None


async def test_a_new_handoff_retracts_the_older_one(client) -> None:  # type: ignore[no-untyped-def]
    await start(client, B, "claude-code", "sess-b")
    await _write(client, "old news")
    newer = await _write(client, "the latest state")
    assert newer["replaced"] == 1
    got = await _get(client, **B)
    assert got["handoff"]["body"] == "the latest state"
    assert (await _get(client, **B))["handoff"] is None


async def test_handoffs_are_not_mail(client) -> None:  # type: ignore[no-untyped-def]
    await start(client, A, "kimi", "sess-a")
    await start(client, B, "claude-code", "sess-b")
    await _write(client, "for the next session only", B)
    inbox = await (await client.get("/api/v1/messages", params=B)).json()
    outbox = await (await client.get("/api/v1/messages", params={**B, "box": "outbox"})).json()
    assert inbox["count"] == 0 and outbox["count"] == 0
    notice = await _get(client, **B, inbox_only="1")
    assert notice["pending_message_count"] == 0 and notice["notice"] is None
    popped = await (await client.post("/api/v1/messages/pop", json=B)).json()
    assert popped["message"] is None
    cancel = await (await client.post("/api/v1/messages/cancel", json={**B, "all": True})).json()
    assert cancel["count"] == 0
    # the reserved mailbox cannot be named as a project
    bad = await client.get("/api/v1/messages", params={**B, "project": box_project("project-b")})
    assert bad.status == 400
    assert (await _get(client, **B))["handoff"]["body"] == "for the next session only"


async def test_inbox_only_claims_nothing(client) -> None:  # type: ignore[no-untyped-def]
    await start(client, A, "kimi", "sess-a")
    await start(client, B, "claude-code", "sess-b")
    assert (await send(client, body="shared")).status == 201
    await _write(client, "keep me for the session start")
    for _ in range(3):
        notice = await _get(client, **B, inbox_only="1", handoff="0", recovery="0",
                            profile_digest="0", harness="claude-code")
        assert set(notice) == {"notice", "pending_message_count", "workspace", "project",
                               "scope_source", "harness", "unread_notification_count",
                               "notification_agent", "notification_senders"}
        assert notice["unread_notification_count"] is None  # no agent named: none counted
        assert notice["pending_message_count"] == 1
        assert "default/project-b inbox" in notice["notice"]
    # handoff=0 on the full path claims nothing either
    skipped = await _get(client, **B, handoff="0")
    assert skipped["handoff"] is None and "request_id" not in skipped
    full = await _get(client, **B, harness="claude-code")
    assert full["handoff"]["body"] == "keep me for the session start"
    assert full["context"].index("keep me") < full["context"].index("cross-project message")


async def test_writing_needs_a_named_existing_project(client) -> None:  # type: ignore[no-untyped-def]
    await start(client, A, "kimi", "sess-a")
    guessed = await client.post("/handoff", json={"body": "x"})
    assert guessed.status == 409 and (await guessed.json())["scope_source"] == "shared_slot"
    unknown = await client.post("/api/v1/handoff", json={**B, "body": "x"})
    assert unknown.status == 404
    empty = await client.post("/handoff", json={**A, "body": "   "})
    assert empty.status == 400
    # the session names the project, and its harness
    bound = await client.post("/handoff", json={"body": "from my session"},
                              headers={"x-memory-actor-session-id": "sess-a"})
    assert bound.status == 201 and (await bound.json())["from_agent"] == "kimi"


async def test_an_inferred_scope_claims_no_handoff_and_names_no_inbox(client) -> None:  # type: ignore[no-untyped-def]
    await start(client, A, "kimi", "sess-a")
    await start(client, B, "claude-code", "sess-b")
    assert (await send(client, body="shared")).status == 201
    await _write(client, "not for a guess")
    guessed = await _get(client)  # no project named: the server infers one (shared_slot)
    assert guessed["scope_source"] == "shared_slot" and guessed["handoff"] is None
    assert "no handoff was claimed" in guessed["handoff_hint"]
    assert "this project's inbox" in guessed["notice"]
    assert "default/project-b" not in guessed["notice"]
    assert (await _get(client, **B))["handoff"]["body"] == "not for a guess"


async def test_secrets_are_scrubbed_and_the_body_capped(client) -> None:  # type: ignore[no-untyped-def]
    await start(client, B, "claude-code", "sess-b")
    long = "GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789 " + "x" * (
        limits.handoff_body_max_chars + 10)
    wrote = await _write(client, long)
    assert wrote["truncated"]["body"] and wrote["scrubbed"] >= 1
    body = (await _get(client, **B))["handoff"]["body"]
    assert "ghp_abcdefghij" not in body and "truncated by ai-memory" in body


async def test_a_handoff_is_in_no_webhook_event(client) -> None:  # type: ignore[no-untyped-def]
    from common.handoffs import box_key
    from common.ops import MSG_SEND, Op
    from daemon.webhooks.events import classify

    op = Op("n1", 1, 1 << 16, MSG_SEND, box_key("default", "p"), {"id": "x"}, 0)
    assert classify(op, None, "n1") is None
    assert client.server.app[NODE] is not None


# -- the brief --------------------------------------------------------------------------

async def _memory(client: Any, title: str, content: str, namespace: str,
                  tags: list[str] | None = None, priority: int = 5) -> str:
    resp = await client.post("/api/v1/memories", json={
        "title": title, "content": content, "namespace": namespace, "tags": tags or [],
        "priority": priority, "tier": "long"}, headers={"X-Agent-Id": "alice"})
    assert resp.status == 201, await resp.text()
    return str((await resp.json())["id"])


async def test_the_brief_holds_pinned_rules_and_slots_pages(client) -> None:  # type: ignore[no-untyped-def]
    await start(client, B, "claude-code", "sess-b")
    ns = "default/project-b"
    pinned = await _memory(client, "Architecture", "Three nodes, one owner per mailbox.", ns,
                           ["pinned"])
    rule = await _memory(client, "style", "Run make check before committing.", ns + "/_rules")
    slot = await _memory(client, "_slots/current-task", "Handoffs and briefs.", ns)
    plain = await _memory(client, "scratch", "not a page, a recent pointer", ns + "/notes")
    await _memory(client, "elsewhere", "another project's rule", "default/project-a/_rules")
    await _memory(client, "lookalike", "a project whose name only starts alike",
                  "default/project-b2/_rules")

    off = await _get(client, **B, handoff="0")
    assert off["brief"] is None  # only when asked (the hook asks when .ai-memory.toml opts in)
    got = (await _get(client, **B, brief="1", handoff="0"))["brief"]
    assert [(p["id"], p["section"], p["path"], p["whole"]) for p in got["pages"]] == [
        (pinned, "pinned", "Architecture", True),
        (rule, "_rules", "_rules/style", True),
        (slot, "_slots", "_slots/current-task", True)]
    assert [r["id"] for r in got["recent"]] == [plain]
    text = got["text"]
    assert text.startswith("# Project brief: default/project-b\n")
    assert text.index("Three nodes") < text.index("make check") < text.index("Handoffs and")
    assert "notes/scratch" in text and "not a page" not in text
    assert "another project" not in text and "starts alike" not in text
    assert got["bytes"] == len(text.encode()) <= got["budget_bytes"]


async def test_the_brief_keeps_within_its_budget(client) -> None:  # type: ignore[no-untyped-def]
    await start(client, B, "claude-code", "sess-b")
    ns = "default/project-b/_rules"
    for i in range(12):
        await _memory(client, f"rule-{i:02}", f"rule {i}: " + "é" * 600, ns)
    budget = 2048
    got = (await _get(client, **B, brief="1", handoff="0", brief_budget=str(budget)))["brief"]
    assert got["bytes"] == len(got["text"].encode()) <= budget
    assert got["pages"] and got["omitted"]  # some shown as excerpts, the rest left out
    assert not any(p["whole"] for p in got["pages"])
    assert all(len(e["path"]) for e in got["omitted"])
    roomy = (await _get(client, **B, brief="1", handoff="0",
                        brief_budget=str(limits.brief_budget_bytes_max)))["brief"]
    assert all(p["whole"] for p in roomy["pages"]) and len(roomy["pages"]) == 12
    assert roomy["bytes"] <= limits.brief_budget_bytes_max
    too_small = await client.get("/handoff", params={**B, "brief": "1", "brief_budget": "10"})
    assert too_small.status == 400


def test_compile_brief_excerpts_first_then_whole_bodies_in_order() -> None:
    pages = [Page(f"id{i}", "_rules/", f"_rules/r{i}", f"{i}" * 1000) for i in range(3)]
    recent = [Pointer("idx", "notes/x", "2026-12-04T00:00:00.000Z")]
    for budget in range(600, 5000, 97):
        out = compile_brief("w/p", pages, recent, budget)
        assert out["bytes"] == len(out["text"].encode()) <= budget
        whole = [p["whole"] for p in out["pages"]]
        assert whole == sorted(whole, reverse=True)  # whole bodies come first, in order
    # one whole body and two excerpts fit; the pointer after them
    out = compile_brief("w/p", pages, recent, 2000)
    assert [p["whole"] for p in out["pages"]] == [True, False, False]
    assert out["recent"] and out["text"].endswith("- notes/x (memory idx, 2026-12-04T00:00:00.000Z)\n")


async def test_inbox_only_records_nothing_and_leaves_the_active_project(client, node) -> None:  # type: ignore[no-untyped-def]
    """PM-109: the count-only notice writes nothing (no session, no claim, no
    empty-pop decision) and does not move the shared-slot project, whatever
    the session header and harness; the full session start does claim."""
    await start(client, B, "claude-code", "sess-b")
    await start(client, A, "kimi", "sess-a")  # A is now the most recently active project
    assert (await send(client, body="shared")).status == 201
    await _write(client, "a pending handoff for B")
    vv = dict(node.store.version_vector())
    sessions = (await node.store.snapshot())["sessions"]
    for headers in ({}, {"x-memory-actor-session-id": "sess-b"},
                    {"x-memory-actor-session-id": "sess-brand-new"}):
        resp = await client.get("/handoff", headers=headers,
                                params={**B, "inbox_only": "1", "harness": "codex"})
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["pending_message_count"] == 1
    assert dict(node.store.version_vector()) == vv  # nothing written, of any kind
    assert (await node.store.snapshot())["sessions"] == sessions
    assert await node.store.last_active_project() == ("default", "project-a")
    guessed = await _get(client, inbox_only="1")  # no scope: the shared slot still names A
    assert guessed["scope_source"] == "shared_slot" and guessed["project"] == "project-a"
    assert dict(node.store.version_vector()) == vv
    # The full path on the same project claims the handoff: a write.
    assert (await _get(client, **B))["handoff"]["body"] == "a pending handoff for B"
    assert dict(node.store.version_vector()) != vv
