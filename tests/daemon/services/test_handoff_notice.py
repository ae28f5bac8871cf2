"""The count-only inbox notice of ``GET /handoff`` (and ``/api/v1/handoff``): it counts
only mail the asking harness could pop, and says so when it knows no harness."""

from __future__ import annotations

from tests.daemon.services.test_mail import A, B, send, start


async def _notice(client, **params):  # type: ignore[no-untyped-def]
    resp = await client.get("/handoff", params={"inbox_only": "1", **params})
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_counts_only_mail_this_harness_could_pop(client) -> None:  # type: ignore[no-untyped-def]
    await start(client, A, "kimi", "sess-a")
    await start(client, B, "claude-code", "sess-b")
    await start(client, B, "codex", "sess-b-codex")
    assert (await send(client, body="shared")).status == 201
    assert (await send(client, body="for codex", to_agent="codex")).status == 201

    codex = await _notice(client, **B, harness="codex")
    claude = await _notice(client, **B, harness="claude-code")
    assert codex["pending_message_count"] == 2 and "2 cross-project messages" in codex["notice"]
    assert claude["pending_message_count"] == 1
    assert "1 cross-project message waiting in the default/project-b inbox" in claude["notice"]
    assert 'workspace "default", project "project-b"' in claude["notice"]
    assert "untrusted input" in claude["notice"]
    assert "for codex" not in codex["notice"] and "shared" not in codex["notice"]

    # the session names the harness when the caller does not
    resp = await client.get("/handoff", params={"inbox_only": "1"},
                            headers={"x-memory-actor-session-id": "sess-b-codex"})
    session = await resp.json()
    assert (session["pending_message_count"], session["harness"]) == (2, "codex")
    assert session["scope_source"] == "session"

    # no harness known: shared mail only, and the answer says why
    unknown = await _notice(client, **B)
    assert unknown["pending_message_count"] == 1 and unknown["harness"] is None
    assert "no harness known" in unknown["hint"]

    # the same answer under /api/v1/handoff
    resp = await client.get("/api/v1/handoff", params={"inbox_only": "1", **B, "harness": "codex"})
    assert (await resp.json())["pending_message_count"] == 2


async def test_no_mail_no_notice(client) -> None:  # type: ignore[no-untyped-def]
    await start(client, A, "kimi", "sess-a")
    empty = await _notice(client, **A, harness="kimi")
    assert empty["notice"] is None and empty["pending_message_count"] == 0
