"""Project mail on one node: every rule of the project-messaging document."""

from __future__ import annotations

import asyncio
import io

import pytest

from common import limits
from common.vocab import FROM_AGENT_UNNAMED

A = {"workspace": "default", "project": "project-a"}
B = {"workspace": "default", "project": "project-b"}


async def start(client, scope, harness="claude-code", session_id=None):  # type: ignore[no-untyped-def]
    body = {**scope, "harness": harness}
    if session_id:
        body["session_id"] = session_id
    resp = await client.post("/api/v1/sessions", json=body)
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def send(client, body="please add /v1/export", *, headers=None, **extra):  # type: ignore[no-untyped-def]
    payload = {"to_workspace": B["workspace"], "to_project": B["project"],
               "from_workspace": A["workspace"], "from_project": A["project"], "body": body}
    payload.update(extra)
    return await client.post("/api/v1/messages", json=payload, headers=headers)


async def pop(client, scope=B, **extra):  # type: ignore[no-untyped-def]
    return await client.post("/api/v1/messages/pop", json={**scope, **extra})


@pytest.fixture
async def projects(client):  # type: ignore[no-untyped-def]
    await start(client, A, "kimi", "sess-a")
    await start(client, B, "claude-code", "sess-b")
    return client


async def test_send_list_pop_cycle(projects) -> None:  # type: ignore[no-untyped-def]
    c = projects
    r = await send(c, subject="export endpoint")
    assert r.status == 201, await r.text()
    sent = await r.json()
    assert sent["state"] == "pending" and sent["from_project"] == "project-a"
    listing = await (await c.get("/api/v1/messages", params={**B, "box": "inbox"})).json()
    assert listing["count"] == 1
    row = listing["messages"][0]
    assert row["id"] == sent["message_id"] and row["subject"] == "export endpoint"
    assert row["from_workspace_id"] == "default" and row["from_project_id"] == "project-a"
    out = await (await c.get("/api/v1/messages", params={**A, "box": "outbox"})).json()
    assert [m["id"] for m in out["messages"]] == [sent["message_id"]]

    p = await (await pop(c)).json()
    assert p["message"]["id"] == sent["message_id"]
    assert "please add /v1/export" in p["message"]["body"]
    assert p["message"]["body"].startswith("<untrusted-input")
    assert p["provenance"]["from_project"] == "project-a"
    assert "untrusted" in p["security_notice"]
    again = await (await pop(c)).json()
    assert again["message"] is None
    listing = await (await c.get("/api/v1/messages", params={**B, "box": "inbox"})).json()
    assert listing["count"] == 0


async def test_unknown_recipient_fails_closed(projects) -> None:  # type: ignore[no-untyped-def]
    r = await projects.post("/api/v1/messages", json={
        "to_workspace": "default", "to_project": "project-typo", **{
            "from_workspace": "default", "from_project": "project-a"}, "body": "hi"})
    assert r.status == 404
    assert "project-typo" in (await r.json())["error"]


async def test_fifo_and_pop_by_id(projects) -> None:  # type: ignore[no-untyped-def]
    ids = []
    for i in range(5):
        ids.append((await (await send(projects, body=f"m{i}")).json())["message_id"])
    got = await (await pop(projects, message_id=ids[3])).json()
    assert got["message"]["id"] == ids[3]
    order = []
    for _ in range(4):
        order.append((await (await pop(projects)).json())["message"]["id"])
    assert order == [ids[0], ids[1], ids[2], ids[4]]
    r = await pop(projects, message_id=ids[3])
    assert r.status == 409


async def test_fifty_concurrent_pops_one_winner(projects) -> None:  # type: ignore[no-untyped-def]
    mid = (await (await send(projects)).json())["message_id"]
    results = await asyncio.gather(*(pop(projects, request_id=f"r{i}") for i in range(50)))
    bodies = [await r.json() for r in results]
    assert all(r.status == 200 for r in results)
    winners = [b for b in bodies if b["message"] is not None]
    assert len(winners) == 1 and winners[0]["message"]["id"] == mid


async def test_cap_256_then_refused(projects) -> None:  # type: ignore[no-untyped-def]
    sends = await asyncio.gather(*(send(projects, body=f"n{i}")
                                   for i in range(limits.mailbox_pending_max)))
    assert [r.status for r in sends] == [201] * limits.mailbox_pending_max
    r = await send(projects, body="one too many")
    assert r.status == 429
    assert "256" in (await r.json())["error"]
    await pop(projects)
    assert (await send(projects, body="room again")).status == 201


async def test_concurrent_sends_never_exceed_cap(projects) -> None:  # type: ignore[no-untyped-def]
    n = limits.mailbox_pending_max + 40

    async def send_until_decided(i: int) -> int:
        # A client retries a 503 (on a loaded machine a send can outlast the
        # claim timeout) with the same idempotency key, which lands at most once.
        for _ in range(20):
            r = await projects.post("/api/v1/messages", headers={"Idempotency-Key": f"cap-{i}"},
                                    json={"to_workspace": B["workspace"],
                                          "to_project": B["project"], "body": f"x{i}",
                                          "from_workspace": A["workspace"],
                                          "from_project": A["project"]})
            if r.status != 503:
                return r.status
            await asyncio.sleep(0.2)
        raise AssertionError(f"send {i} stayed unavailable")

    statuses = sorted(await asyncio.gather(*(send_until_decided(i) for i in range(n))))
    assert statuses.count(201) == limits.mailbox_pending_max
    assert statuses.count(429) == 40


async def test_isolation_non_recipient_cannot_see_or_pop(projects) -> None:  # type: ignore[no-untyped-def]
    await send(projects)
    other = await (await projects.get("/api/v1/messages", params={**A, "box": "inbox"})).json()
    assert other["count"] == 0
    got = await (await pop(projects, scope=A)).json()
    assert got["message"] is None
    still = await (await projects.get("/api/v1/messages", params={**B})).json()
    assert still["count"] == 1


async def test_recipient_cannot_cancel_sender_can(projects) -> None:  # type: ignore[no-untyped-def]
    mid = (await (await send(projects)).json())["message_id"]
    r = await projects.post("/api/v1/messages/cancel", json={**B, "message_id": mid})
    assert r.status == 403
    r = await projects.post("/api/v1/messages/cancel", json={**A, "message_id": mid})
    assert r.status == 200 and (await r.json())["cancelled"] == [mid]
    assert (await (await pop(projects)).json())["message"] is None
    # A retried cancel is idempotent: nothing more is cancelled, nothing fails.
    r = await projects.post("/api/v1/messages/cancel", json={**A, "message_id": mid})
    assert r.status == 200 and (await r.json())["cancelled"] == [mid]


async def test_claimed_cannot_be_cancelled(projects) -> None:  # type: ignore[no-untyped-def]
    mid = (await (await send(projects)).json())["message_id"]
    await pop(projects)
    r = await projects.post("/api/v1/messages/cancel", json={**A, "message_id": mid})
    assert r.status == 409


async def test_cancel_all_clears_outbox(projects) -> None:  # type: ignore[no-untyped-def]
    for i in range(3):
        await send(projects, body=f"c{i}")
    r = await projects.post("/api/v1/messages/cancel", json={**A, "all": True})
    assert (await r.json())["count"] == 3
    assert (await (await projects.get("/api/v1/messages", params=B)).json())["count"] == 0


async def test_inferred_scope_mutations_change_nothing(projects) -> None:  # type: ignore[no-untyped-def]
    mid = (await (await send(projects)).json())["message_id"]
    # No scope and no session: pop, cancel and send all refuse and name the project.
    r = await projects.post("/api/v1/messages/pop", json={})
    assert r.status == 409
    err = await r.json()
    assert err["scope_source"] == "shared_slot" and "refusing to pop" in err["error"]
    r = await projects.post("/api/v1/messages/cancel", json={"all": True})
    assert r.status == 409
    r = await projects.post("/api/v1/messages", json={
        "to_workspace": "default", "to_project": "project-b", "body": "guess"})
    assert r.status == 409
    listing = await (await projects.get("/api/v1/messages", params=B)).json()
    assert [m["id"] for m in listing["messages"]] == [mid]
    # list still answers an inferred scope, and says so.
    inferred = await (await projects.get("/api/v1/messages")).json()
    assert inferred["scope_source"] == "shared_slot" and "hint" in inferred
    assert inferred["resolved_scope"] == {"workspace": "default", "project": "project-b"}


async def test_session_header_binds_scope(projects) -> None:  # type: ignore[no-untyped-def]
    await send(projects)
    r = await projects.post("/api/v1/messages/pop", json={},
                            headers={"x-memory-actor-session-id": "sess-b"})
    assert r.status == 200 and (await r.json())["message"] is not None
    r = await projects.post("/api/v1/messages/pop", json={},
                            headers={"x-memory-actor-session-id": "no-such-session"})
    assert r.status == 409 and (await r.json())["scope_source"] == "default_after_mismatch"


async def test_retried_pop_same_request_id_same_message(projects) -> None:  # type: ignore[no-untyped-def]
    first = (await (await send(projects, body="one")).json())["message_id"]
    await send(projects, body="two")
    a = await (await pop(projects, request_id="req-1")).json()
    b = await (await pop(projects, request_id="req-1")).json()
    assert a["message"]["id"] == b["message"]["id"] == first
    c = await (await pop(projects, request_id="req-2")).json()
    assert c["message"]["id"] != first


async def test_to_agent_restricts_claim(projects) -> None:  # type: ignore[no-untyped-def]
    await start(projects, B, "codex", "sess-b2")
    r = await send(projects, to_agent="codex")
    assert r.status == 201
    mid = (await r.json())["message_id"]
    assert (await (await pop(projects, agent="claude-code")).json())["message"] is None
    r = await pop(projects, agent="claude-code", message_id=mid)
    assert r.status == 403
    got = await (await pop(projects, agent="codex")).json()
    assert got["message"]["id"] == mid
    r = await send(projects, to_agent="gemini")
    assert r.status == 404


async def test_measured_needs_evidence_and_secrets_scrubbed(projects) -> None:  # type: ignore[no-untyped-def]
    r = await send(projects, nature="measured")
    assert r.status == 400
    r = await send(projects, nature="measured", evidence="   ")
    assert r.status == 400
    secret = "AKIAABCDEFGHIJKLMNOP and token ghp_" + "a" * 36
    r = await send(projects, body=f"use {secret}", nature="measured",
                   evidence="tests/export.py:42 password=hunter2hunter2")
    assert r.status == 201
    assert (await r.json())["scrubbed"] >= 3
    row = (await (await projects.get("/api/v1/messages", params=B)).json())["messages"][0]
    assert "AKIA" not in row["body"] and "ghp_" not in row["body"]
    assert "hunter2" not in row["evidence"] and row["nature"] == "measured"


async def test_caps_with_visible_marker(projects) -> None:  # type: ignore[no-untyped-def]
    r = await send(projects, subject="s" * 500, body="b" * 20_000)
    assert r.status == 201
    assert (await r.json())["truncated"] == {"subject": True, "body": True, "evidence": False}
    row = (await (await projects.get("/api/v1/messages", params=B)).json())["messages"][0]
    assert len(row["subject"]) == limits.message_subject_max_chars
    assert "\n" not in row["subject"]  # the subject stays one line, marker included
    assert row["subject"].endswith(limits.truncation_marker_inline)
    assert len(row["body"]) == limits.message_body_max_chars
    assert row["body"].endswith(limits.truncation_marker)


async def test_truncated_evidence_is_reported(projects) -> None:  # type: ignore[no-untyped-def]
    r = await send(projects, nature="measured", evidence="tests/x.py:1 " + "e" * 5000)
    assert r.status == 201, await r.text()
    assert (await r.json())["truncated"] == {"subject": False, "body": False, "evidence": True}
    row = (await (await projects.get("/api/v1/messages", params=B)).json())["messages"][0]
    assert len(row["evidence"]) == limits.message_evidence_max_chars
    assert row["evidence"].endswith(limits.truncation_marker)


async def test_token_assignments_scrubbed_end_to_end(projects) -> None:  # type: ignore[no-untyped-def]
    body = ("deploy with token=abc123def456 and GITHUB_TOKEN=zzzzzzzzzz "
            "CLIENT_SECRET=s3cr3tvalue curl -H 'Authorization: Bearer abcdefghijklmnopqrstuv'")
    r = await send(projects, body=body, subject="rotate DB_PASSWORD=hunter2hunter2")
    assert r.status == 201, await r.text()
    assert (await r.json())["scrubbed"] == 5
    row = (await (await projects.get("/api/v1/messages", params=B)).json())["messages"][0]
    for leaked in ("abc123def456", "zzzzzzzzzz", "s3cr3tvalue", "abcdefghijklmnopqrstuv",
                   "hunter2"):
        assert leaked not in row["body"] and leaked not in row["subject"]
    assert "GITHUB_TOKEN=[REDACTED:assignment]" in row["body"]


async def test_handoff_notice_count_only(projects) -> None:  # type: ignore[no-untyped-def]
    await send(projects, body="SECRET-BODY-TEXT", subject="SUBJ")
    r = await projects.get("/api/v1/handoff", params={**B, "inbox_only": "1"})
    out = await r.json()
    assert out["pending_message_count"] == 1
    assert "1 cross-project message" in out["notice"]
    assert "SECRET-BODY-TEXT" not in out["notice"] and "SUBJ" not in out["notice"]
    empty = await (await projects.get("/api/v1/handoff", params={**A, "inbox_only": "1"})).json()
    assert empty["notice"] is None and empty["pending_message_count"] == 0
    brief = await (await projects.get("/api/v1/briefing", params=B)).json()
    assert brief["pending_message_count"] == 1


async def test_idempotent_send(projects) -> None:  # type: ignore[no-untyped-def]
    h = {"Idempotency-Key": "k-1"}
    payload = {"to_workspace": "default", "to_project": "project-b",
               "from_workspace": "default", "from_project": "project-a", "body": "once"}
    a = await (await projects.post("/api/v1/messages", json=payload, headers=h)).json()
    b = await (await projects.post("/api/v1/messages", json=payload, headers=h)).json()
    assert a["message_id"] == b["message_id"]
    assert (await (await projects.get("/api/v1/messages", params=B)).json())["count"] == 1


async def test_a_fresh_send_is_not_looked_up_and_a_keyed_one_is(  # type: ignore[no-untyped-def]
        projects, monkeypatch) -> None:
    # The entry node reads a send's message from the store before the owner
    # decides only when its id can repeat (an Idempotency-Key's). The ids the
    # service mints must count as fresh: when they became uuid7 and the check
    # still said "uuid4", every send paid that read (1-node send+pop halved).
    import uuid

    from daemon.http.appkeys import NODE
    store = projects.server.app[NODE].store
    looked_up: list[str] = []
    real = store.message

    async def counting(msg_id: str):  # type: ignore[no-untyped-def]
        looked_up.append(msg_id)
        return await real(msg_id)
    monkeypatch.setattr(store, "message", counting)
    fresh = await (await send(projects, body="fresh")).json()
    assert uuid.UUID(fresh["message_id"]).version == 7 and looked_up == []
    keyed = await (await projects.post("/api/v1/messages", headers={"Idempotency-Key": "k-9"}, json={
        "to_workspace": "default", "to_project": "project-b", "from_workspace": "default",
        "from_project": "project-a", "body": "keyed"})).json()
    assert looked_up == [keyed["message_id"]]


@pytest.mark.parametrize("body", [
    {"to_workspace": "default", "to_project": "project-b", "from_workspace": "default",
     "from_project": "project-a"},
    {"to_workspace": "default", "to_project": "bad name!", "body": "x"},
    {"to_workspace": "default", "to_project": "project-b", "body": 5},
    {"to_workspace": "default", "to_project": "project-b", "body": "x\x00y",
     "from_workspace": "default", "from_project": "project-a"},
    {"to_workspace": "default", "to_project": "project-b", "body": "x", "nature": "vibes",
     "from_workspace": "default", "from_project": "project-a"},
    {"to_workspace": "default", "to_project": "project-b", "body": "x",
     "from_workspace": "default"},
])
async def test_bad_send_input_is_4xx_and_writes_nothing(projects, body) -> None:  # type: ignore[no-untyped-def]
    r = await projects.post("/api/v1/messages", json=body)
    assert 400 <= r.status < 500
    assert "error" in await r.json()
    assert (await (await projects.get("/api/v1/messages", params=B)).json())["count"] == 0


async def test_malformed_json_and_oversize(projects) -> None:  # type: ignore[no-untyped-def]
    r = await projects.post("/api/v1/messages", data=b"{not json",
                            headers={"Content-Type": "application/json"})
    assert r.status == 400
    r = await projects.post("/api/v1/messages/pop", data=b"[1,2]",
                            headers={"Content-Type": "application/json"})
    assert r.status == 400
    big = b'{"body": "' + b"x" * (limits.request_body_max_bytes + 10) + b'"}'
    r = await projects.post("/api/v1/messages", data=io.BytesIO(big),
                            headers={"Content-Type": "application/json"})
    assert r.status == 413


async def test_owner_sheds_load_beyond_its_queue_bound(projects, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """More requests waiting at a mailbox owner than limits.mailbox_requests_max
    get a fast 503 with Retry-After instead of queueing past their clients'
    patience; the others are served and nothing is claimed twice."""
    for i in range(20):
        await send(projects, body=f"load-{i}")
    monkeypatch.setattr(limits, "mailbox_requests_max", 3)
    # A fresh owner slot: the first pops queue while the mailbox loads.
    from daemon.http.appkeys import NODE

    projects.server.app[NODE].core.claims.slots.clear()
    results = await asyncio.gather(*(pop(projects, request_id=f"burst-{i}") for i in range(20)))
    statuses = [r.status for r in results]
    assert 503 in statuses and 200 in statuses, statuses
    shed = [r for r in results if r.status == 503]
    assert all(r.headers.get("Retry-After") for r in shed)
    got = [(await r.json())["message"]["id"] for r in results if r.status == 200]
    assert len(got) == len(set(got))


async def test_a_pop_from_a_project_that_does_not_exist_leaves_no_mailbox(
        client) -> None:  # type: ignore[no-untyped-def]
    """The README's first `message pop` meets no project: the refusal takes no
    mailbox ownership and logs nothing (`cluster status` listed
    `mbox:default/nosuch@1025` after it)."""
    before = await (await client.get("/api/v1/cluster/status")).json()
    nosuch = {"workspace": "default", "project": "nosuch"}
    for _ in range(2):
        reply = await (await pop(client, nosuch, request_id="pop-1")).json()
        assert reply["message"] is None and reply["project_exists"] is False, reply
    after = await (await client.get("/api/v1/cluster/status")).json()
    assert after["owned_mailboxes"] == {}
    assert after["vv"] == before["vv"]  # not even a "nothing pending" decision was logged
    await start(client, nosuch)  # once it exists, its mailbox works as any other
    assert (await (await pop(client, nosuch)).json())["message"] is None
    assert list((await (await client.get("/api/v1/cluster/status")).json())[
        "owned_mailboxes"]) == ["mbox:default/nosuch"]


async def test_a_new_session_in_an_existing_project_is_created(client) -> None:  # type: ignore[no-untyped-def]
    first = await start(client, A, "kimi", "sess-1")
    assert first["created"] is True
    # The project exists now; another session id in it is still a new session.
    second = await start(client, A, "codex", "sess-2")
    assert second["created"] is True
    again = await start(client, A, "codex", "sess-2")
    assert again["created"] is False


# -- rules of the source document that need a node's answers (docs/rules.md) ------------

SESSION_HEADER = "x-memory-actor-session-id"


async def inbox(client, scope=B, **params):  # type: ignore[no-untyped-def]
    r = await client.get("/api/v1/messages", params={**scope, "box": "inbox", **params})
    assert r.status == 200, await r.text()
    return await r.json()


async def test_a_memory_written_into_a_project_is_not_mail(node, projects) -> None:  # type: ignore[no-untyped-def]
    """PM-17: knowledge written into another project's namespace (a page,
    a memory) is stored there and never surfaces as mail."""
    for title in ("report for project-b", "wiki page: export design"):
        r = await projects.post("/api/v1/memories", headers={"X-Agent-Id": "kimi"}, json={
            "title": title, "content": "please add /v1/export",
            "namespace": "default/project-b", "tags": ["report"]})
        assert r.status == 201, await r.text()
    listing = await inbox(projects)
    assert listing["count"] == 0 and listing["messages"] == []
    out = await (await projects.get("/api/v1/messages", params={**A, "box": "outbox"})).json()
    assert out["count"] == 0
    notice = await (await projects.get("/handoff", params={**B, "inbox_only": "1"})).json()
    assert notice["pending_message_count"] == 0 and notice["notice"] is None
    assert (await (await pop(projects)).json())["message"] is None
    assert (await node.store.snapshot())["messages"] == {}
    # ...while a send is mail at once
    assert (await send(projects)).status == 201
    assert (await inbox(projects))["count"] == 1


async def test_a_sessions_harness_names_the_sender_only_for_its_own_project(projects) -> None:  # type: ignore[no-untyped-def]
    """PM-27: a recorded session of the sending project names ``from_agent``
    over the one the client passed; a session of another project does not."""
    own = await send(projects, body="own session", from_agent="codex",
                     headers={SESSION_HEADER: "sess-a"})
    assert own.status == 201, await own.text()
    assert (await own.json())["from_agent"] == "kimi"  # sess-a's harness, not "codex"
    foreign = await send(projects, body="B's session", from_agent="codex",
                         headers={SESSION_HEADER: "sess-b"})
    assert foreign.status == 201 and (await foreign.json())["from_agent"] == "codex"
    unnamed = await send(projects, body="B's session, no name",
                         headers={SESSION_HEADER: "sess-b"})
    assert unnamed.status == 201
    assert (await unnamed.json())["from_agent"] == FROM_AGENT_UNNAMED  # never claude-code
    stored = {m["body"]: m["from_agent"] for m in (await inbox(projects))["messages"]}
    assert stored == {"own session": "kimi", "B's session": "codex",
                      "B's session, no name": FROM_AGENT_UNNAMED}


async def test_a_claim_records_only_a_session_that_exists(node, projects) -> None:  # type: ignore[no-untyped-def]
    """PM-33: a pop names its claimer's session only when that session row
    exists; a session id nobody started is not recorded."""
    first = (await (await send(projects, body="one")).json())["message_id"]
    second = (await (await send(projects, body="two")).json())["message_id"]
    ghost = await projects.post("/api/v1/messages/pop", json=B,
                                headers={SESSION_HEADER: "sess-never-started"})
    assert (await ghost.json())["message"]["id"] == first
    real = await projects.post("/api/v1/messages/pop", json=B, headers={SESSION_HEADER: "sess-b"})
    assert (await real.json())["message"]["id"] == second
    terminals = (await node.store.snapshot())["terminals"]
    assert terminals[first]["state"] == "claimed"
    assert terminals[first]["claimed_by_session"] is None
    assert terminals[second]["claimed_by_session"] == "sess-b"
    assert terminals[second]["claimed_by_agent"] == "claude-code"


async def test_decision_text_is_opaque_and_anyone_with_write_may_answer(node, projects) -> None:  # type: ignore[no-untyped-def]
    """PM-51: the server keeps subject and body as text. It has no decision
    fields (a send naming one stores and does the same as a send without it:
    unknown fields are ignored, docs/api.md), no operator-mailbox flag, and no
    rule for who may answer: a reply is an ordinary send from any project,
    and the question stays pending."""
    subject = "decision: Accept the known-flake exception?"
    text = ("options:\n  - accept\n  - reject\nrequires_root: true\n"
            "correlation: flake-42\nanswer with decision-reply: <message_id>")
    r = await send(projects, body=text, subject=subject, requires_root=True,
                   decision={"options": ["accept", "reject"]}, operator_mailbox=True,
                   allowed_responders=["root"], reply_to="project-z")
    assert r.status == 201, await r.text()
    qid = (await r.json())["message_id"]
    [row] = (await inbox(projects))["messages"]
    assert row["id"] == qid and row["subject"] == subject and row["body"] == text
    assert row["state"] == "pending" and row["nature"] == "unknown"
    assert set(row) == {"id", "subject", "body", "state", "nature", "evidence",
                        "from_workspace_id", "from_project_id", "from_agent", "from_owner_user",
                        "to_workspace", "to_project", "to_agent", "created_at",
                        "in_reply_to", "thread_id", "completion",  # threads: generic
                        "approval_required", "lease_until", "deliveries"}  # leases: generic
    assert row["approval_required"] is False  # the approval queue's flag, not a decision field
    stored = (await node.store.snapshot())["messages"][qid]
    assert stored["in_reply_to"] is None and stored["thread_id"] == qid  # a plain send
    for word in ("requires_root", "decision", "operator", "responder", "reply_to", "project-z"):
        assert not any(word in str(k) or word == v for k, v in stored.items()
                       if k not in ("body", "subject", "in_reply_to", "thread_id")), word
    # Any project may answer (write on the asking project is the only rule);
    # a reply claims, closes and marks nothing.
    await start(projects, {"workspace": "default", "project": "project-c"}, "codex", "sess-c")
    for frm in (B, {"workspace": "default", "project": "project-c"}):
        reply = await projects.post("/api/v1/messages", json={
            "from_workspace": frm["workspace"], "from_project": frm["project"],
            "to_workspace": A["workspace"], "to_project": A["project"],
            "subject": f"decision-reply: {qid}", "body": "accept"})
        assert reply.status == 201, await reply.text()
    replies = (await inbox(projects, A))["messages"]
    assert [m["subject"] for m in replies] == [f"decision-reply: {qid}"] * 2
    assert [m["id"] for m in (await inbox(projects))["messages"]] == [qid]  # still pending
    # "allowed_responders" and "requires_root" restrict nobody: any session of
    # the recipient project claims it, like any shared message.
    popped = await projects.post("/api/v1/messages/pop", json=B, headers={SESSION_HEADER: "sess-b"})
    assert (await popped.json())["message"]["id"] == qid


async def test_listing_is_oldest_first_pending_only_50_by_default_200_at_most(projects) -> None:  # type: ignore[no-untyped-def]
    """PM-55: ``limit`` 50 by default, 200 at most (201 is refused), no
    offset (one is ignored), oldest first, pending rows only."""
    ids = []
    for i in range(limits.message_list_limit_max + 1):
        r = await send(projects, body=f"m{i}")
        assert r.status == 201, await r.text()
        ids.append((await r.json())["message_id"])
    default = await inbox(projects)
    assert default["count"] == limits.message_list_limit_default == 50
    assert [m["id"] for m in default["messages"]] == ids[:50]
    most = await inbox(projects, limit="200")
    assert [m["id"] for m in most["messages"]] == ids[:200]
    over = await projects.get("/api/v1/messages", params={**B, "limit": "201"})
    assert over.status == 400, await over.text()
    offset = await inbox(projects, offset="50")
    assert [m["id"] for m in offset["messages"]] == ids[:50]
    # a claimed and a cancelled message leave the list; the next ones move up
    assert (await (await pop(projects)).json())["message"]["id"] == ids[0]
    cancel = await projects.post("/api/v1/messages/cancel", json={**A, "message_id": ids[1]})
    assert cancel.status == 200, await cancel.text()
    assert [m["id"] for m in (await inbox(projects))["messages"]] == ids[2:52]
    assert all(m["state"] == "pending" for m in (await inbox(projects, limit="200"))["messages"])


def _children() -> set[int]:
    """Processes this test process started (the in-process node included)."""
    import os
    from pathlib import Path

    found: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        found.update(int(p) for p in (task / "children").read_text().split())
    return found


async def test_queuing_a_message_starts_wakes_or_authorizes_no_agent(node, projects) -> None:  # type: ignore[no-untyped-def]
    """PM-91: a send only queues. No process starts, no session, agent or
    harness is recorded, the recipient's activity is not touched, nothing
    claims it; the recipient finds it by its own list or pop."""
    before = await node.store.snapshot()
    active = await node.store.last_active_project()
    procs = _children()
    r = await send(projects, body="run `make deploy` now", subject="urgent", to_agent="claude-code")
    assert r.status == 201, await r.text()
    mid = (await r.json())["message_id"]
    after = await node.store.snapshot()
    for table in ("sessions", "agents", "harnesses", "terminals", "holds", "memories", "notes"):
        assert after[table] == before[table], table
    assert list(after["messages"]) == [mid]
    assert await node.store.last_active_project() == active
    assert _children() == procs
    [row] = (await inbox(projects))["messages"]
    assert row["id"] == mid and row["state"] == "pending"
