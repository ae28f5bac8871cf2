"""The web inbox's JSON endpoints on one real node: sessions, the CSRF rules,
editing through the owner, paged history, hidden project names, logins.
(The pages themselves are driven in a real browser in tests/e2e/test_web_browser.py.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from common import limits
from common.policy import KEYS, Principal, ProjectGrant
from common.vocab import NATURE_MEANINGS, NATURES
from daemon.api.app import build_app
from daemon.wiring import build_node
from tests.daemon.conftest import make_settings

A = {"workspace": "default", "project": "project-a"}
B = {"workspace": "default", "project": "project-b"}
UI = {"X-AI-Memory-UI": "1"}
INBOX_JS = (Path(__file__).resolve().parents[3] / "daemon" / "web" / "inbox.js").read_text()


async def start(client: Any, scope: dict[str, str], harness: str = "claude-code") -> None:
    r = await client.post("/api/v1/sessions", json={**scope, "harness": harness})
    assert r.status == 201, await r.text()


def origin(client: Any) -> str:
    return str(client.make_url("/")).rstrip("/")


async def login_anonymous(client: Any) -> dict[str, Any]:
    r = await client.get("/web/inbox")
    assert r.status == 200
    assert "script-src 'self'" in r.headers["Content-Security-Policy"]
    assert "unsafe-inline" not in r.headers["Content-Security-Policy"]
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    me = await (await client.get("/web/api/me")).json()
    assert me["anonymous"] is True and me["csrf_token"]
    return me


def hdrs(client: Any, me: dict[str, Any], **extra: str) -> dict[str, str]:
    return {**UI, "Origin": origin(client), "X-CSRF-Token": me["csrf_token"], **extra}


async def web_send(client: Any, me: dict[str, Any], body: str = "hello",
                   **extra: Any) -> Any:
    payload = {"from_workspace": "default", "from_project": "project-a",
               "to_workspace": "default", "to_project": "project-b", "body": body, **extra}
    return await client.post("/web/api/messages", json=payload, headers=hdrs(client, me))


async def received(client: Any, page: int = 0, box: str = "received",
                   scope: dict[str, str] = B) -> dict[str, Any]:
    r = await client.get("/web/api/history", params={**scope, "box": box, "page": str(page)})
    assert r.status == 200, await r.text()
    return dict(await r.json())


async def test_the_root_opens_the_inbox_with_or_without_a_slash(client: Any) -> None:
    for path in ("/web", "/web/"):  # docs/web.md says to open /web/
        r = await client.get(path, allow_redirects=False)
        assert r.status == 302 and r.headers["Location"] == "/web/inbox", path
    r = await client.get("/web/")
    assert r.status == 200 and r.content_type == "text/html"
    assert r.url.path == "/web/inbox"


@pytest.fixture
async def web(client: Any) -> Any:
    await start(client, A, "kimi")
    await start(client, B, "claude-code")
    return client


async def test_csrf_refusals_write_nothing(web: Any) -> None:
    me = await login_anonymous(web)
    payload = {"from_workspace": "default", "from_project": "project-a",
               "to_workspace": "default", "to_project": "project-b", "body": "x"}
    good = hdrs(web, me)
    cases = {
        "cross-origin": {**good, "Origin": "https://evil.example"},
        "no origin": {k: v for k, v in good.items() if k != "Origin"},
        "no token": {k: v for k, v in good.items() if k != "X-CSRF-Token"},
        "no UI header": {k: v for k, v in good.items() if k != "X-AI-Memory-UI"},
        "wrong token": {**good, "X-CSRF-Token": "x" * 43},
    }
    for why, h in cases.items():
        r = await web.post("/web/api/messages", json=payload, headers=h)
        assert r.status == 403, why
        body = await r.json()
        assert body["code"] == "csrf_refused" and body["error"], why
    # A cross-site HTML form: urlencoded, no custom header, foreign origin.
    r = await web.post("/web/api/messages", data=payload,
                       headers={"Origin": "https://evil.example"})
    assert r.status == 403
    assert (await received(web))["messages"] == []
    r = await web_send(web, me)
    assert r.status == 201, await r.text()


async def test_another_sessions_token_is_refused(web: Any, aiohttp_client: Any) -> None:
    me1 = await login_anonymous(web)
    second = await aiohttp_client(web.server.app)  # a second browser, its own cookie jar
    me2 = await login_anonymous(second)
    assert me1["csrf_token"] != me2["csrf_token"]
    payload = {"from_workspace": "default", "from_project": "project-a",
               "to_workspace": "default", "to_project": "project-b", "body": "x"}
    r = await web.post("/web/api/messages", json=payload,
                       headers={**UI, "Origin": origin(web), "X-CSRF-Token": me2["csrf_token"]})
    assert r.status == 403
    assert (await received(web))["messages"] == []


async def test_history_pages_at_50_newest_first_and_reading_claims_nothing(web: Any) -> None:
    me = await login_anonymous(web)
    ids = []
    for i in range(53):
        r = await web_send(web, me, body=f"m{i}", subject=f"s{i}")
        ids.append((await r.json())["message_id"])
    first = await received(web)
    assert len(first["messages"]) == 50 and first["has_next"] and not first["has_previous"]
    assert [m["id"] for m in first["messages"]] == ids[::-1][:50]
    second = await received(web, page=1)
    assert [m["id"] for m in second["messages"]] == ids[::-1][50:]
    assert not second["has_next"] and second["has_previous"]
    sent = await received(web, box="sent", scope=A)
    assert sent["messages"][0]["id"] == ids[-1] and sent["has_next"]
    assert {m["state"] for m in first["messages"]} == {"pending"}
    listing = await (await web.get("/api/v1/messages", params={**B, "box": "inbox",
                                                              "limit": "200"})).json()
    assert listing["count"] == 53  # reading never claimed anything
    bad = await web.get("/web/api/history", params={**B, "box": "trash"})
    assert bad.status == 400 and (await bad.json())["code"]


async def test_the_page_is_told_what_the_provenance_words_mean(web: Any) -> None:
    """"From agent: other" and "Nature: unknown" are shown with their meaning;
    the page reads the words from /web/api/me (common/vocab.py defines them)."""
    me = await login_anonymous(web)
    assert me["meanings"]["nature"] == NATURE_MEANINGS
    assert set(NATURE_MEANINGS) == set(NATURES)
    assert me["meanings"]["from_agent"]["other"].startswith("no harness named")
    r = await web_send(web, me)
    assert r.status == 201
    [row] = (await received(web))["messages"]
    assert row["from_agent"] in me["meanings"]["from_agent"]  # a web send is "web", explained
    assert row["nature"] in me["meanings"]["nature"]
    assert 'meant("from_agent", m.from_agent)' in INBOX_JS and 'meant("nature", m.nature)' in INBOX_JS


async def test_edit_save_requeue_keeps_id_and_place(web: Any) -> None:
    me = await login_anonymous(web)
    ids = [(await (await web_send(web, me, body=f"b{i}")).json())["message_id"] for i in range(3)]
    target = ids[0]
    r = await web.post(f"/web/api/messages/{target}/edit", json={}, headers=hdrs(web, me))
    assert r.status == 200, await r.text()
    held = await (await web.get("/web/api/held", params=B)).json()
    assert held["count"] == 1 and held["messages"][0]["id"] == target
    # An agent's pop meanwhile gets the next message.
    p = await (await web.post("/api/v1/messages/pop", json=B)).json()
    assert p["message"]["id"] == ids[1]
    r = await web.post(f"/web/api/messages/{target}/save",
                       json={"subject": "new subject", "body": "token sk-abcdefghijklmnopqrstuvwx1234"},
                       headers=hdrs(web, me))
    assert r.status == 200, await r.text()
    saved = await r.json()
    assert saved["message"]["id"] == target and saved["scrubbed"] >= 1
    assert "sk-abcdefghijklmnopqrstuvwx1234" not in saved["message"]["body"]
    pending = await (await web.get("/api/v1/messages", params={**B, "box": "inbox"})).json()
    assert [m["id"] for m in pending["messages"]] == [target, ids[2]]  # its old place
    assert pending["messages"][0]["subject"] == "new subject"
    # Discard: back unchanged.
    await web.post(f"/web/api/messages/{ids[2]}/edit", json={}, headers=hdrs(web, me))
    r = await web.post(f"/web/api/messages/{ids[2]}/discard", json={}, headers=hdrs(web, me))
    assert r.status == 200
    row = next(m for m in (await received(web))["messages"] if m["id"] == ids[2])
    assert row["state"] == "pending" and row["body"] == "b2"


async def test_editing_a_collected_message_is_a_clear_409(web: Any) -> None:
    me = await login_anonymous(web)
    mid = (await (await web_send(web, me)).json())["message_id"]
    await web.post("/api/v1/messages/pop", json=B)
    r = await web.post(f"/web/api/messages/{mid}/edit", json={}, headers=hdrs(web, me))
    assert r.status == 409
    body = await r.json()
    assert "collected" in body["error"] and body["code"] == "conflict"
    # Held, then collected cannot happen: the pop skips it. A save of a message
    # nobody holds is refused too.
    mid2 = (await (await web_send(web, me)).json())["message_id"]
    r = await web.post(f"/web/api/messages/{mid2}/save", json={"body": "x"},
                       headers=hdrs(web, me))
    assert r.status == 409


async def test_send_needs_existing_projects_and_a_registered_agent(web: Any) -> None:
    me = await login_anonymous(web)
    r = await web_send(web, me, to_agent="codex")
    assert r.status == 404 and "codex" in (await r.json())["error"]
    r = await web.post("/web/api/messages", headers=hdrs(web, me), json={
        "from_workspace": "default", "from_project": "nowhere", "to_workspace": "default",
        "to_project": "project-b", "body": "x"})
    assert r.status == 404
    projects = await (await web.get("/api/v1/projects")).json()
    assert {p["project"] for p in projects["projects"]} == {"project-a", "project-b"}
    h = await (await web.get("/web/api/harnesses", params=B)).json()
    assert h["harnesses"] == ["claude-code"]


class FakeDirectory:
    """A fake beside the identity seam (issue 7): keys and passwords in a dict."""

    def __init__(self) -> None:
        reader = Principal(mode=KEYS, user="rita", grants=(
            ProjectGrant("default", "project-b", "write"),))
        self.keys = {"aim_rita": reader}
        self.passwords = {("rita", "s3cret-pw"): reader}

    async def resolve(self, secret: str) -> Principal | None:
        return self.keys.get(secret)

    async def verify_password(self, name: str, password: str) -> Principal | None:
        return self.passwords.get((name, password))

    async def principal_for_user(self, name: str) -> Principal | None:
        return next((p for (user, _), p in self.passwords.items() if user == name), None)


ROOT = Principal(mode=KEYS, user="root", root=True)


@pytest.fixture
async def keyed(tmp_path: Any, aiohttp_client: Any) -> Any:
    base = make_settings(tmp_path / "node.db")
    node = await build_node(replace(base, auth=replace(base.auth, mode=KEYS)))
    node.directory = node.identity = FakeDirectory()  # type: ignore[assignment]
    await node.start()
    try:
        client = await aiohttp_client(build_app(node))
        yield client
    finally:
        await node.stop()


async def test_password_and_key_login_grants_and_hidden_names(keyed: Any) -> None:
    c = keyed
    r = await c.get("/web/inbox", allow_redirects=False)
    assert r.status == 302 and r.headers["Location"] == "/web/login"
    assert (await c.get("/web/api/me")).status == 401
    bad = await c.post("/web/login", json={"user": "rita", "password": "nope"},
                       headers={**UI, "Origin": origin(c)})
    assert bad.status == 401
    cross = await c.post("/web/login", json={"user": "rita", "password": "s3cret-pw"},
                         headers={**UI, "Origin": "https://evil.example"})
    assert cross.status == 403
    ok = await c.post("/web/login", json={"user": "rita", "password": "s3cret-pw"},
                      headers={**UI, "Origin": origin(c)})
    assert ok.status == 201, await ok.text()
    me = await (await c.get("/web/api/me")).json()
    assert me["name"] == "rita" and not me["anonymous"]
    # Projects come from sessions; rita may read only project-b.
    from daemon.http.appkeys import NODE
    n = c.server.app[NODE]
    from daemon.services import mail
    for scope, harness in ((A, "kimi"), (B, "claude-code")):
        await mail.start_session(n, ROOT, workspace=scope["workspace"], project=scope["project"],
                                 harness=harness, session_id=f"s-{harness}", owner_user=None)
    await mail.send(n, ROOT, mail.SendRequest(to_workspace="default", to_project="project-b",
                                        body="from a", from_workspace="default",
                                        from_project="project-a"),
                    session_id=None, owner_user=None, idempotency_key=None)
    projects = await (await c.get("/web/api/projects")).json()
    assert [p["project"] for p in projects["projects"]] == ["project-b"]
    rows = (await received(c))["messages"]
    assert rows[0]["from_project"] is None and rows[0]["from_hidden"] is True
    assert (await c.get("/web/api/history", params={**A, "box": "received"})).status == 403
    # Editing needs write on the sender project too.
    r = await c.post(f"/web/api/messages/{rows[0]['id']}/edit", json={}, headers=hdrs(c, me))
    assert r.status == 403
    out = await c.post("/web/logout", json={}, headers=hdrs(c, me))
    assert out.status == 200
    assert (await c.get("/web/api/me")).status == 401
    key = await c.post("/web/login", json={"key": "aim_rita"}, headers={**UI, "Origin": origin(c)})
    assert key.status == 201


async def test_login_refuses_a_body_over_its_own_limit(keyed: Any) -> None:
    # The login takes limits.web_login_body_max_bytes, not the general 2 MiB
    # cap: a body one byte over is refused with 413, declared or chunked.
    c = keyed
    h = {**UI, "Origin": origin(c), "Content-Type": "application/json"}
    creds = json.dumps({"user": "rita", "password": "s3cret-pw"})
    fits = creds + " " * (limits.web_login_body_max_bytes - len(creds))
    assert limits.web_login_body_max_bytes < limits.request_body_max_bytes
    ok = await c.post("/web/login", data=fits, headers=h)
    assert ok.status == 201, await ok.text()
    over = fits + " "
    r = await c.post("/web/login", data=over, headers=h)
    assert r.status == 413
    assert "limits.web_login_body_max_bytes" in (await r.json())["error"]

    async def chunked() -> AsyncIterator[bytes]:
        yield over[:100].encode()
        yield over[100:].encode()

    r = await c.post("/web/login", data=chunked(), headers=h)  # no Content-Length
    assert r.status == 413
    assert "limits.web_login_body_max_bytes" in (await r.json())["error"]


async def test_legacy_basic_login_reads_and_sends_only_with_a_write_token(keyed: Any) -> None:
    import base64
    c = keyed
    basic = {"Authorization": "Basic " + base64.b64encode(b"x:aim_rita").decode()}
    r = await c.get("/web/legacy")
    assert r.status == 401 and "Basic" in r.headers["WWW-Authenticate"]
    assert (await c.get("/web/legacy", headers=basic)).status == 200
    me = await (await c.get("/web/api/me", headers=basic)).json()
    assert me["legacy"] is True and me["csrf_token"] is None and me["can_edit"] is False
    from daemon.http.appkeys import NODE
    from daemon.services import mail
    n = c.server.app[NODE]
    await mail.start_session(n, ROOT, workspace="default", project="project-b", harness="codex",
                             session_id="s1", owner_user=None)
    payload = {"from_workspace": "default", "from_project": "project-b",
               "to_workspace": "default", "to_project": "project-b", "body": "hi"}
    base = {**basic, **UI, "Origin": origin(c)}
    assert (await c.post("/web/api/messages", json=payload, headers=base)).status == 403
    # A wrong token is a 403 (a 401 would make the browser forget its Basic login).
    r = await c.post("/web/api/messages", json=payload,
                     headers={**base, "X-AI-Memory-Write-Token": "aim_not_a_key"})
    assert r.status == 403 and "WWW-Authenticate" not in r.headers
    assert (await r.json())["code"] == "write_token_refused"
    r = await c.post("/web/api/messages", json=payload,
                     headers={**base, "X-AI-Memory-Write-Token": "aim_rita"})
    assert r.status == 201, await r.text()
    mid = (await r.json())["message_id"]
    r = await c.post(f"/web/api/messages/{mid}/edit", json={}, headers=base)
    assert r.status == 403  # the legacy login cannot edit


@pytest.fixture
async def directory_node(tmp_path: Any, aiohttp_client: Any) -> Any:
    """One keys-mode node with the real replicated directory and a root key."""
    from daemon.identity.secrets import new_secret
    root = new_secret()
    base = make_settings(tmp_path / "dir.db")
    node = await build_node(replace(base, auth=replace(base.auth, mode=KEYS,
                                                       bootstrap_root_key=root)))
    await node.start()
    try:
        yield await aiohttp_client(build_app(node)), {"Authorization": f"Bearer {root}"}
    finally:
        await node.stop()


async def test_web_sessions_follow_the_real_directory(directory_node: Any) -> None:
    """Password and key logins against the replicated users, keys and grants; a
    grant revoked, a key revoked or a user removed after the login counts at
    the session's next request."""
    c, root = directory_node
    for scope, harness in ((A, "kimi"), (B, "codex")):
        r = await c.post("/api/v1/sessions", json={**scope, "harness": harness}, headers=root)
        assert r.status == 201, await r.text()
    r = await c.post("/api/v1/admin/users", json={"name": "rita", "password": "s3cret-pw"},
                     headers=root)
    assert r.status == 201, await r.text()
    grant = {"user": "rita", "workspace": "default", "project": "project-b", "access": "write"}
    assert (await c.post("/api/v1/admin/grants", json=grant, headers=root)).status == 201
    wrong = await c.post("/web/login", json={"user": "rita", "password": "nope"},
                         headers={**UI, "Origin": origin(c)})
    assert wrong.status == 401
    ok = await c.post("/web/login", json={"user": "rita", "password": "s3cret-pw"},
                      headers={**UI, "Origin": origin(c)})
    assert ok.status == 201, await ok.text()
    assert (await c.get("/web/api/history", params={**B, "box": "received"})).status == 200
    assert (await c.get("/web/api/history", params={**A, "box": "received"})).status == 403

    revoked = await c.delete("/api/v1/admin/grants", params={**grant, "access": "read"},
                             headers=root)
    assert revoked.status == 200, await revoked.text()
    assert (await c.get("/web/api/history", params={**B, "box": "received"})).status == 403

    made = await (await c.post("/api/v1/admin/keys", json={"user": "rita"}, headers=root)).json()
    c.session.cookie_jar.clear()
    ok = await c.post("/web/login", json={"key": made["key"]}, headers={**UI, "Origin": origin(c)})
    assert ok.status == 201, await ok.text()
    assert (await c.get("/web/api/me")).status == 200
    assert (await c.delete(f"/api/v1/admin/keys/{made['id']}", headers=root)).status == 200
    assert (await c.get("/web/api/me")).status == 401  # the key's session ended with it

    c.session.cookie_jar.clear()
    ok = await c.post("/web/login", json={"user": "rita", "password": "s3cret-pw"},
                      headers={**UI, "Origin": origin(c)})
    assert ok.status == 201
    assert (await c.delete("/api/v1/admin/users/rita", headers=root)).status == 200
    assert (await c.get("/web/api/me")).status == 401  # and the user's with the user


async def test_a_held_message_is_listed_as_editing_by_get_messages(web: Any) -> None:
    me = await login_anonymous(web)
    ids = [(await (await web_send(web, me, body=f"b{i}")).json())["message_id"] for i in range(3)]
    r = await web.post(f"/web/api/messages/{ids[1]}/edit", json={}, headers=hdrs(web, me))
    assert r.status == 200, await r.text()
    inbox = await (await web.get("/api/v1/messages", params={**B, "box": "inbox"})).json()
    assert [(m["id"], m["state"]) for m in inbox["messages"]] == [
        (ids[0], "pending"), (ids[1], "editing"), (ids[2], "pending")]
    assert inbox["count"] == 3
    outbox = await (await web.get("/api/v1/messages", params={**A, "box": "outbox"})).json()
    assert [m["state"] for m in outbox["messages"]] == ["pending", "editing", "pending"]
    # Still skipped by pops: the next pops take ids[0] and ids[2].
    got = [(await (await web.post("/api/v1/messages/pop", json=B)).json())["message"]["id"]
           for _ in range(2)]
    assert got == [ids[0], ids[2]]
    r = await web.post(f"/web/api/messages/{ids[1]}/discard", json={}, headers=hdrs(web, me))
    assert r.status == 200
    inbox = await (await web.get("/api/v1/messages", params={**B, "box": "inbox"})).json()
    assert [(m["id"], m["state"]) for m in inbox["messages"]] == [(ids[1], "pending")]


async def test_mcp_memory_message_list_shows_a_held_message_as_editing(web: Any) -> None:
    me = await login_anonymous(web)
    ids = [(await (await web_send(web, me, body=f"b{i}")).json())["message_id"] for i in range(2)]
    r = await web.post(f"/web/api/messages/{ids[0]}/edit", json={}, headers=hdrs(web, me))
    assert r.status == 200, await r.text()
    got = await web.post("/mcp", headers={"Accept": "application/json, text/event-stream",
                                          "MCP-Protocol-Version": "2025-06-18"}, json={
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "memory_message_list", "arguments": {**B, "box": "inbox"}}})
    result = (await got.json())["result"]
    assert result["isError"] is False, result
    rows = result["structuredContent"]["messages"]
    assert [(m["id"], m["state"]) for m in rows] == [(ids[0], "editing"), (ids[1], "pending")]


# -- replies (the composer's Reply) ------------------------------------------------

async def test_a_web_reply_is_threaded_and_proposes_its_subject(web: Any) -> None:
    me = await login_anonymous(web)
    sent = {}
    for name, subject in (("plain", "paging"), ("question", "decision: Accept the flake?"),
                          ("again", "Re: cursors"), ("bare", None)):
        r = await web_send(web, me, body=name, subject=subject)
        assert r.status == 201, await r.text()
        sent[name] = (await r.json())["message_id"]
    rows = {m["id"]: m for m in (await received(web))["messages"]}
    assert rows[sent["plain"]]["reply_subject"] == "Re: paging"
    assert rows[sent["question"]]["reply_subject"] == f"decision-reply: {sent['question']}"
    assert rows[sent["again"]]["reply_subject"] == "Re: cursors"
    assert rows[sent["bare"]]["reply_subject"] is None

    back = {"from_project": "project-b", "to_project": "project-a"}
    r = await web_send(web, me, body="which cursor?", in_reply_to=sent["plain"], **back)
    assert r.status == 201, await r.text()
    first = await r.json()
    assert first["in_reply_to"] == sent["plain"] and first["thread_id"] == sent["plain"]
    r = await web_send(web, me, body="opaque", in_reply_to=first["message_id"])
    again = await r.json()
    assert again["in_reply_to"] == first["message_id"] and again["thread_id"] == sent["plain"]
    thread = await web.get("/web/api/history", params={**B, "box": "received",
                                                       "thread_id": sent["plain"]})
    assert [m["id"] for m in (await thread.json())["messages"]] == [again["message_id"],
                                                                   sent["plain"]]
    r = await web_send(web, me, body="x", in_reply_to="no-such-message", **back)
    assert r.status == 404
    r = await web_send(web, me, body="x", in_reply_to="not an id", **back)
    assert r.status == 400


async def test_a_web_reply_needs_write_on_the_senders_project(keyed: Any) -> None:
    c = keyed
    ok = await c.post("/web/login", json={"user": "rita", "password": "s3cret-pw"},
                      headers={**UI, "Origin": origin(c)})
    assert ok.status == 201, await ok.text()
    me = await (await c.get("/web/api/me")).json()
    from daemon.http.appkeys import NODE
    from daemon.services import mail
    n = c.server.app[NODE]
    for scope, harness in ((A, "kimi"), (B, "claude-code")):
        await mail.start_session(n, ROOT, workspace=scope["workspace"], project=scope["project"],
                                 harness=harness, session_id=f"s-{harness}", owner_user=None)

    async def root_send(frm: str, to: str) -> str:
        out = await mail.send(n, ROOT, mail.SendRequest(
            to_workspace="default", to_project=to, body="ask", from_workspace="default",
            from_project=frm, subject="ask"), session_id=None, owner_user=None,
            idempotency_key=None)
        return str(out["message_id"])

    asked = await root_send("project-a", "project-b")
    [row] = (await received(c))["messages"]
    assert row["id"] == asked and row["from_hidden"] and row["reply_subject"] == "Re: ask"
    # rita may write project-b only: the reply to project-a is refused, nothing sent.
    r = await c.post("/web/api/messages", headers=hdrs(c, me), json={
        "from_workspace": "default", "from_project": "project-b", "to_workspace": "default",
        "to_project": "project-a", "body": "yes", "in_reply_to": asked})
    assert r.status == 403
    assert (await r.json())["error"] == "message.send needs write on default/project-a"
    assert await n.store.mailbox_messages("default", "project-a", limit=10) == []
    # A message rita may not read cannot be answered even where she may write.
    private = await root_send("project-a", "project-a")
    r = await c.post("/web/api/messages", headers=hdrs(c, me), json={
        "from_workspace": "default", "from_project": "project-b", "to_workspace": "default",
        "to_project": "project-b", "body": "yes", "in_reply_to": private})
    assert r.status == 404
    assert [m["id"] for m in (await received(c))["messages"]] == [asked]


async def test_the_web_rows_show_a_lease_and_deliveries_never_the_token(web: Any) -> None:
    me = await login_anonymous(web)
    r = await web_send(web, me, body="leased work")
    mid = (await r.json())["message_id"]
    r = await web.post("/api/v1/messages/pop", json={**B, "lease_seconds": 1})
    token = (await r.json())["message"]["claim_token"]
    row = next(m for m in (await received(web))["messages"] if m["id"] == mid)
    assert row["state"] == "claimed" and row["lease_until"] and row["deliveries"] == 1
    assert token not in json.dumps(row)
    await asyncio.sleep(2.2)  # the lease runs out: back in the queue
    row = next(m for m in (await received(web))["messages"] if m["id"] == mid)
    assert (row["state"], row["lease_until"], row["deliveries"]) == ("pending", None, 1)
    r = await web.post("/api/v1/messages/pop", json={**B})
    assert (await r.json())["message"]["id"] == mid
    row = next(m for m in (await received(web))["messages"] if m["id"] == mid)
    assert (row["state"], row["lease_until"], row["deliveries"]) == ("claimed", None, 2)
