"""Who may do what, over HTTP, on a real node (real SQLite, the real app).

Every row of :data:`common.policy.ACTIONS` is driven through its endpoint
with keys carrying different grant sets (:mod:`tests.daemon.authz_fixtures`);
each answer must be what :func:`common.policy.check` says for that key: a
2xx where the key is allowed, a 403 where it is not. Then the same rows in
anonymous mode, the route table walked without a key, hidden project
names, agent binding, session ownership, author-only changes and the
operator-only endpoints.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from common import policy
from common.policy import Principal
from daemon.api.app import build_app
from daemon.http.appkeys import NODE
from daemon.identity.memory_directory import MemoryDirectory
from daemon.node import Node
from daemon.peer.auth import sign
from daemon.settings import AuthSettings, ClusterSettings, Settings, StoreSettings
from daemon.wiring import build_node
from tests.daemon.authz_fixtures import (
    ALPHA,
    BETA,
    GRANT_SETS,
    ROOT_KEY,
    ROOT_USER,
    WS,
    allowed,
    key_of,
    keys_auth,
)

SECRET = "cluster-secret-for-tests"


def settings_for(db: Path, auth: AuthSettings, secret: str | None = SECRET) -> Settings:
    return Settings(store=StoreSettings(db_path=str(db)),
                    cluster=ClusterSettings(node_id="node1", initial_state="new", secret=secret),
                    auth=auth)


async def running(settings: Settings, directory: Any = None) -> Node:
    node = await build_node(settings, directory=directory)
    await node.start()
    return node


@pytest.fixture
async def keyed(tmp_path: Path, aiohttp_client: Any) -> AsyncIterator[Any]:
    node = await running(settings_for(tmp_path / "keys.db", keys_auth()))
    try:
        client = await aiohttp_client(build_app(node))
        for project, harness in ((ALPHA, "kimi"), (BETA, "claude-code"), ("gamma", "codex")):
            r = await client.post("/api/v1/sessions", headers=bearer(ROOT_KEY),
                                  json={"workspace": WS, "project": project, "harness": harness})
            assert r.status == 201, await r.text()
        yield client
    finally:
        await node.stop()


@pytest.fixture
async def anon(tmp_path: Path, aiohttp_client: Any) -> AsyncIterator[Any]:
    node = await running(settings_for(tmp_path / "anon.db", AuthSettings()))
    try:
        client = await aiohttp_client(build_app(node))
        for project, harness in ((ALPHA, "kimi"), (BETA, "claude-code")):
            r = await client.post("/api/v1/sessions",
                                  json={"workspace": WS, "project": project, "harness": harness})
            assert r.status == 201, await r.text()
        yield client
    finally:
        await node.stop()


def bearer(key: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **headers}


BOX = {"workspace": WS, "project": ALPHA}
Call = Callable[[Any, dict[str, str]], Awaitable[Any]]


def _row_calls() -> dict[str, Call]:
    def send(c: Any, h: dict[str, str]) -> Any:
        return c.post("/api/v1/messages", headers=h, json={
            "to_workspace": WS, "to_project": BETA, "from_workspace": WS, "from_project": ALPHA,
            "body": "please look"})

    return {
        "message.send": send,
        "message.list_inbox": lambda c, h: c.get("/api/v1/messages", headers=h,
                                                 params={**BOX, "box": "inbox"}),
        "message.list_outbox": lambda c, h: c.get("/api/v1/messages", headers=h,
                                                  params={**BOX, "box": "outbox"}),
        "message.pop": lambda c, h: c.post("/api/v1/messages/pop", headers=h, json=BOX),
        "message.cancel": lambda c, h: c.post("/api/v1/messages/cancel", headers=h,
                                              json={**BOX, "all": True}),
        "handoff.read": lambda c, h: c.get("/api/v1/handoff", headers=h, params=BOX),
        "handoff.write": lambda c, h: c.post("/api/v1/handoff", headers=h,
                                             json={**BOX, "body": "for the next session"}),
        "briefing.read": lambda c, h: c.get("/api/v1/briefing", headers=h, params=BOX),
        "session.start": lambda c, h: c.post("/api/v1/sessions", headers=h,
                                             json={**BOX, "harness": "codex"}),
    }


ROW_CALLS = _row_calls()
# Rows without an endpoint of their own yet, and where they are proven instead.
ELSEWHERE = {
    "message.edit": "the web inbox's edit (issue 8); tests/test_policy.py holds the row",
    "message.approve": "needs a message awaiting approval: tests/daemon/test_approvals.py "
                       "(test_an_approver_needs_write_on_the_recipient_project)",
    "project.read": "GET /projects filters by it: test_projects_lists_only_readable_ones",
    "message.complete": "needs a claim held by the caller first: "
                        "tests/daemon/services/test_completion.py (allowed and refused)",
}


def test_every_row_has_an_endpoint_here_or_says_where() -> None:
    assert set(ROW_CALLS) | set(ELSEWHERE) == set(policy.ACTIONS)
    for action in policy.ACTIONS:  # the grant sets allow and refuse every row
        outcomes = {allowed(name, action) for name in GRANT_SETS}
        assert outcomes == {True, False}, action


@pytest.mark.parametrize("action", sorted(ROW_CALLS))
async def test_every_row_over_http_in_keys_mode(keyed: Any, action: str) -> None:
    call = ROW_CALLS[action]
    seen = {}
    node = keyed.server.app[NODE]
    for name in GRANT_SETS:
        before = dict(node.store.version_vector())
        r = await call(keyed, bearer(key_of(name)))
        body = await r.json()
        seen[name] = r.status
        if allowed(name, action):
            assert r.status in (200, 201), (name, body)
        else:
            assert r.status == 403 and body["code"] == "forbidden", (name, body)
            assert dict(node.store.version_vector()) == before, f"{name}: a refusal wrote"
    r = await call(keyed, bearer(ROOT_KEY))
    assert r.status in (200, 201), await r.text()  # root needs no grants
    r = await call(keyed, {})
    assert r.status == 401 and (await r.json())["code"] == "key_required"
    r = await call(keyed, {"X-API-Key": "k-nobody-knows"})
    assert r.status == 401 and (await r.json())["code"] == "unknown_key"
    assert 403 in seen.values() and any(s < 300 for s in seen.values()), seen


@pytest.mark.parametrize("action", sorted(ROW_CALLS))
async def test_every_row_over_http_in_anonymous_mode(anon: Any, action: str) -> None:
    """Anonymous callers are not checked against grants: naming the project is enough."""
    r = await ROW_CALLS[action](anon, {})
    assert r.status in (200, 201), await r.text()


@pytest.mark.parametrize(("path", "body"), [
    ("/api/v1/messages", {"to_workspace": WS, "to_project": BETA, "body": "hi"}),
    ("/api/v1/messages/pop", {}),
    ("/api/v1/messages/cancel", {"all": True}),
])
async def test_anonymous_mail_changes_need_a_named_project(anon: Any, path: str,
                                                           body: dict[str, Any]) -> None:
    r = await anon.post(path, json=body)
    assert r.status == 409 and (await r.json())["scope_source"] == "shared_slot"


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", "/api/v1/inbox", None),
    ("POST", "/api/v1/inbox/read", {"ids": ["x"]}),
    ("POST", "/api/v1/notify", {"to": "bob", "title": "t", "payload": "p"}),
])
async def test_anonymous_inbox_and_notify_need_a_named_agent(anon: Any, method: str, path: str,
                                                             body: Any) -> None:
    r = await anon.request(method, path, json=body)
    assert r.status == 400 and "agent identity required" in (await r.json())["error"]


async def test_projects_lists_only_readable_ones(keyed: Any) -> None:
    async def names(key: str) -> set[str]:
        r = await keyed.get("/api/v1/projects", headers=bearer(key))
        assert r.status == 200
        return {p["project"] for p in (await r.json())["projects"]}

    assert await names(ROOT_KEY) == {ALPHA, BETA, "gamma"}
    assert await names(key_of("alpha-read")) == {ALPHA}
    assert await names(key_of("both-read")) == {ALPHA, BETA}
    assert await names(key_of("none")) == set()


async def test_unreadable_project_names_are_hidden_in_lists(keyed: Any) -> None:
    root = bearer(ROOT_KEY)
    into_alpha = {"to_workspace": WS, "to_project": ALPHA, "from_workspace": WS,
                  "from_project": "gamma", "body": "from a project alpha's readers cannot see"}
    assert (await keyed.post("/api/v1/messages", headers=root, json=into_alpha)).status == 201
    out_of_alpha = {"to_workspace": WS, "to_project": "gamma", "from_workspace": WS,
                    "from_project": ALPHA, "body": "to it"}
    assert (await keyed.post("/api/v1/messages", headers=root, json=out_of_alpha)).status == 201

    reader = bearer(key_of("alpha-read"))
    inbox = await (await keyed.get("/api/v1/messages", headers=reader,
                                   params={**BOX, "box": "inbox"})).json()
    [row] = inbox["messages"]
    assert row["from_project_id"] is None and row["hidden"] is True
    assert "gamma" not in json.dumps(inbox)
    outbox = await (await keyed.get("/api/v1/messages", headers=reader,
                                    params={**BOX, "box": "outbox"})).json()
    [row] = outbox["messages"]
    assert row["to_project"] is None and row["hidden"] is True
    seen_by_root = await (await keyed.get("/api/v1/messages", headers=root,
                                          params={**BOX, "box": "inbox"})).json()
    assert seen_by_root["messages"][0]["from_project_id"] == "gamma"
    assert "hidden" not in seen_by_root["messages"][0]

    popper = bearer(key_of("alpha-write"))
    popped = await (await keyed.post("/api/v1/messages/pop", headers=popper, json=BOX)).json()
    assert popped["message"]["from_project_id"] is None and popped["message"]["hidden"]
    assert popped["provenance"]["from_project"] is None and popped["provenance"]["hidden"]


async def test_from_owner_user_is_the_keys_user(keyed: Any) -> None:
    for key, owner in ((key_of("both-write"), "user-both-write"), (ROOT_KEY, ROOT_USER)):
        r = await keyed.post("/api/v1/messages", headers=bearer(key), json={
            "to_workspace": WS, "to_project": BETA, "from_workspace": WS, "from_project": ALPHA,
            "body": f"from {owner}"})
        assert r.status == 201, await r.text()
        popped = await (await keyed.post("/api/v1/messages/pop", headers=bearer(ROOT_KEY),
                                         json={"workspace": WS, "project": BETA})).json()
        assert popped["message"]["from_owner_user"] == owner
        assert popped["provenance"]["from_owner_user"] == owner


async def test_anonymous_from_owner_user_is_empty(anon: Any) -> None:
    r = await anon.post("/api/v1/messages", json={
        "to_workspace": WS, "to_project": BETA, "from_workspace": WS, "from_project": ALPHA,
        "body": "hi"})
    assert r.status == 201
    popped = await (await anon.post("/api/v1/messages/pop",
                                    json={"workspace": WS, "project": BETA})).json()
    assert popped["message"]["from_owner_user"] is None


async def test_a_session_belongs_to_the_user_who_started_it(keyed: Any) -> None:
    alice, bob = bearer(key_of("both-write")), bearer(key_of("workspace-write"))
    r = await keyed.post("/api/v1/sessions", headers=alice,
                         json={**BOX, "harness": "kimi", "session_id": "sess-alice"})
    assert r.status == 201, await r.text()
    # Bob cannot take Alice's session id over...
    r = await keyed.post("/api/v1/sessions", headers=bob,
                         json={"workspace": WS, "project": BETA, "harness": "codex",
                               "session_id": "sess-alice"})
    assert r.status == 403
    # ...nor claim to be its owner.
    r = await keyed.post("/api/v1/sessions", headers=bob,
                         json={**BOX, "harness": "codex", "owner_user": "user-both-write"})
    assert r.status == 403
    send = {"to_workspace": WS, "to_project": BETA, "body": "scoped by session"}
    # Bob naming Alice's session: ignored, so the sender is a guess and refused.
    r = await keyed.post("/api/v1/messages", headers={**bob, "x-memory-actor-session-id":
                                                      "sess-alice"}, json=send)
    assert r.status == 409, await r.text()
    # ...and ignored for from_agent too when he names the project himself.
    r = await keyed.post("/api/v1/messages", headers={**bob, "x-memory-actor-session-id":
                                                      "sess-alice"},
                         json={**send, "from_workspace": WS, "from_project": ALPHA})
    assert r.status == 201 and (await r.json())["from_agent"] == "other"
    # Alice's own session scopes her send and names her harness.
    r = await keyed.post("/api/v1/messages", headers={**alice, "x-memory-actor-session-id":
                                                      "sess-alice"}, json=send)
    body = await r.json()
    assert r.status == 201, body
    assert (body["from_project"], body["from_agent"]) == (ALPHA, "kimi")


async def test_a_bound_key_fixes_the_agent(tmp_path: Path, aiohttp_client: Any) -> None:
    directory = MemoryDirectory()
    directory.add("k-bot", Principal(mode="keys", user="u-bot", agent="bot-1", agent_bound=True))
    directory.add("k-bot2", Principal(mode="keys", user="u-bot2", agent="bot-2",
                                      agent_bound=True))
    directory.add("k-loose", Principal(mode="keys", user="u-loose"))
    directory.add("k-root", Principal(mode="keys", user="admin", root=True))
    node = await running(settings_for(tmp_path / "bound.db", AuthSettings(mode="keys")),
                         directory)
    try:
        c = await aiohttp_client(build_app(node))
        bot, bot2, loose = bearer("k-bot"), bearer("k-bot2"), bearer("k-loose")
        note = {"to": "bot-2", "title": "t", "payload": "p"}
        assert (await c.post("/api/v1/notify", headers={**bot, "X-Agent-Id": "bot-2"},
                             json=note)).status == 403
        assert (await c.post("/api/v1/notify", headers=bot,
                             json={**note, "agent_id": "bot-2"})).status == 403
        r = await c.post("/api/v1/notify", headers=bot, json=note)
        assert r.status == 201, await r.text()
        inbox = await (await c.get("/api/v1/inbox", headers=bot2)).json()
        assert [n["from"] for n in inbox["messages"]] == ["bot-1"]  # from follows the key
        assert (await c.get("/api/v1/inbox", headers=bot,
                            params={"agent_id": "bot-2"})).status == 403
        assert (await c.get("/api/v1/inbox", headers=bot)).status == 200

        made = await (await c.post("/api/v1/memories", headers=bot,
                                   json={"title": "t", "content": "c"})).json()
        assert made["agent_id"] == "bot-1"
        mid = made["id"]
        for other in (bot2, loose, {**loose, "X-Agent-Id": "bot-1"}):
            assert (await c.put(f"/api/v1/memories/{mid}", headers=other,
                                json={"content": "x"})).status == 403
            assert (await c.delete(f"/api/v1/memories/{mid}", headers=other)).status == 403
        assert (await c.put(f"/api/v1/memories/{mid}", headers=bot,
                            json={"content": "mine"})).status == 200
        assert (await c.delete(f"/api/v1/memories/{mid}", headers=bearer("k-root"))).status == 200

        # An unbound key acts for the agent it names.
        r = await c.post("/api/v1/notify", headers={**loose, "X-Agent-Id": "helper"}, json=note)
        assert r.status == 201
        # A key removed from the directory stops working at once.
        directory.remove("k-bot")
        assert (await c.get("/api/v1/inbox", headers=bot)).status == 401
    finally:
        await node.stop()


async def test_only_the_creator_or_root_deletes_a_subscription(
        tmp_path: Path, aiohttp_client: Any) -> None:
    directory = MemoryDirectory()
    directory.add("k-a", Principal(mode="keys", user="a", agent="agent-a", agent_bound=True))
    directory.add("k-b", Principal(mode="keys", user="b", agent="agent-b", agent_bound=True))
    directory.add("k-root", Principal(mode="keys", user="admin", root=True))
    settings = replace(settings_for(tmp_path / "subs.db", AuthSettings(mode="keys")))
    settings = replace(settings, webhooks=replace(settings.webhooks, allow_loopback_webhooks=True))
    node = await running(settings, directory)
    try:
        c = await aiohttp_client(build_app(node))
        ids = []
        for _ in range(2):
            r = await c.post("/api/v1/subscriptions", headers=bearer("k-a"),
                             json={"url": "http://127.0.0.1:9/hook"})
            assert r.status == 201, await r.text()
            ids.append((await r.json())["id"])
        r = await c.delete(f"/api/v1/subscriptions/{ids[0]}", headers=bearer("k-b"))
        assert r.status == 403
        assert (await c.delete(f"/api/v1/subscriptions/{ids[0]}",
                               headers=bearer("k-a"))).status == 200
        assert (await c.delete(f"/api/v1/subscriptions/{ids[1]}",
                               headers=bearer("k-root"))).status == 200
    finally:
        await node.stop()


async def test_sync_endpoints_need_root_or_the_cluster_signature(keyed: Any) -> None:
    push = {"sender_agent_id": "tool", "memories": [], "deletions": []}
    assert (await keyed.get("/api/v1/sync/since")).status == 401
    assert (await keyed.get("/api/v1/sync/since",
                            headers=bearer(key_of("both-write")))).status == 403
    assert (await keyed.post("/api/v1/sync/push", headers=bearer(key_of("workspace-write")),
                             json=push)).status == 403
    assert (await keyed.get("/api/v1/sync/since", headers=bearer(ROOT_KEY))).status == 200
    assert (await keyed.post("/api/v1/sync/push", headers=bearer(ROOT_KEY),
                             json=push)).status == 200
    boot = (await keyed.get("/api/v1/sync/since", headers=sign(
        SECRET, "tool", "node1", "GET", "/api/v1/sync/since", b"", now_s=_now()))).headers
    raw = json.dumps(push).encode()
    headers = sign(SECRET, "tool", "node1", "POST", "/api/v1/sync/push", raw, now_s=_now(),
                   boot=boot["X-AIM-Boot"])
    r = await keyed.post("/api/v1/sync/push", data=raw,
                         headers={**headers, "Content-Type": "application/json"})
    assert r.status == 200, await r.text()
    forged = {**headers, "X-AIM-Sig": "0" * 64}
    r = await keyed.post("/api/v1/sync/push", data=raw,
                         headers={**forged, "Content-Type": "application/json"})
    assert r.status == 401


def _now() -> float:
    import time

    return time.time()


async def test_anonymous_sync_answers_loopback(anon: Any) -> None:
    assert (await anon.get("/api/v1/sync/since")).status == 200


async def test_root_only_memory_operations_in_keys_mode(keyed: Any) -> None:
    for method, path, body in (("POST", "/api/v1/forget", {"namespace": "x"}),
                               ("POST", "/api/v1/gc", None),
                               ("POST", "/api/v1/import", {"memories": []})):
        r = await keyed.request(method, path, headers=bearer(key_of("workspace-write")),
                                json=body)
        assert r.status == 403, (path, await r.text())
        r = await keyed.request(method, path, headers=bearer(ROOT_KEY), json=body)
        assert r.status == 200, (path, await r.text())


async def test_no_route_but_health_answers_without_a_key(tmp_path: Path,
                                                          aiohttp_client: Any) -> None:
    """Walks the app's own route table, so a route added later is covered too."""
    node = await running(settings_for(tmp_path / "walk.db", keys_auth()))
    try:
        app = build_app(node)
        c = await aiohttp_client(app)
        routes = sorted({(r.method, r.resource.canonical) for r in app.router.routes()
                         if r.resource is not None})
        assert len(routes) > 40
        for method, path in routes:
            if method == "HEAD":
                continue
            if method == "*":  # a route for every method (/mcp): POST stands for them
                method = "POST"
            url = re.sub(r"\{[^}]+\}", "x", path)
            assert "{" not in url, url
            for headers in ({}, {"X-API-Key": "wrong"}, {"Authorization": "Bearer wrong"},
                            {"Authorization": "Basic abc"}, {"X-Agent-Id": "alice"}):
                data = b"{}" if method in ("POST", "PUT") else None
                r = await c.request(method, url, headers=headers, data=data)
                if path == "/api/v1/health":
                    assert r.status == 200
                elif path.startswith("/web/api/") or (path.startswith("/web") and method == "POST"):
                    # The web inbox refuses by its own session check (no cookie, no data).
                    assert r.status in (401, 403), (method, path, headers, r.status)
                    body = await r.json()
                    assert isinstance(body["error"], str) and isinstance(body["code"], str)
                elif path.startswith("/lane/"):
                    # A sibling lane's calls: served on the lanes' local socket only.
                    assert r.status == 404, (method, path, r.status)
                elif path.startswith("/web"):
                    # Pages and static assets carry no data; they redirect or serve the shell.
                    assert r.status in (200, 302, 303, 401, 403, 404), (method, path, r.status)
                else:
                    assert r.status == 401, (method, path, headers, r.status, await r.text())
                    body = await r.json()
                    assert isinstance(body["error"], str) and isinstance(body["code"], str)
        # unknown routes are no way in either
        assert (await c.get("/api/v1/nothing-here")).status == 401
    finally:
        await node.stop()


async def test_keys_mode_without_a_secret_refuses_peer_routes(tmp_path: Path,
                                                              aiohttp_client: Any) -> None:
    node = await running(settings_for(tmp_path / "nosecret.db", keys_auth(), secret=None))
    try:
        c = await aiohttp_client(build_app(node))
        r = await c.post("/peer/v1/msgs", data=b"\x90",
                         headers={"Content-Type": "application/msgpack", "X-AIM-Node": "x"})
        assert r.status == 401 and (await r.json())["code"] == "peer_secret_required"
    finally:
        await node.stop()


async def test_metrics_and_cluster_status_need_a_key(keyed: Any) -> None:
    for path in ("/api/v1/metrics", "/api/v1/cluster/status"):
        assert (await keyed.get(path)).status == 401
        assert (await keyed.get(path, headers=bearer(key_of("none")))).status == 200
    assert (await keyed.get("/api/v1/health")).status == 200


async def test_both_key_headers_must_agree(keyed: Any) -> None:
    r = await keyed.get("/api/v1/projects", headers={**bearer(ROOT_KEY), "X-API-Key": "other"})
    assert r.status == 401
    r = await keyed.get("/api/v1/projects", headers={**bearer(ROOT_KEY), "X-API-Key": ROOT_KEY})
    assert r.status == 200


async def test_a_signature_header_is_no_way_in_without_a_cluster_secret(
        tmp_path: Path, aiohttp_client: Any) -> None:
    node = await running(settings_for(tmp_path / "nosig.db", keys_auth(), secret=None))
    try:
        c = await aiohttp_client(build_app(node))
        fake = {"X-AIM-Sig": "0" * 64, "X-AIM-Node": "tool"}
        for method, path in (("POST", "/api/v1/admin/backup"), ("GET", "/api/v1/sync/since")):
            r = await c.request(method, path, headers=fake)
            assert r.status == 401 and (await r.json())["code"] == "key_required", path
        r = await c.post("/api/v1/admin/backup", headers=bearer(ROOT_KEY))
        assert r.status == 200 and r.headers["Content-Type"] == "application/vnd.sqlite3"
        await r.read()
        r = await c.post("/api/v1/admin/backup", headers=bearer(key_of("workspace-write")))
        assert r.status == 403
    finally:
        await node.stop()


async def test_the_prompt_hooks_notice_is_authorized_like_a_session_start(keyed: Any) -> None:
    notice = {**BOX, "inbox_only": "1"}
    r = await keyed.get("/api/v1/handoff", headers=bearer(key_of("alpha-read")), params=notice)
    assert r.status == 403 and (await r.json())["access"] == "write"
    r = await keyed.get("/api/v1/handoff", headers=bearer(key_of("alpha-read")), params=BOX)
    assert r.status == 200  # the session-start handoff itself needs read
    r = await keyed.get("/api/v1/handoff", headers=bearer(key_of("alpha-write")), params=notice)
    assert r.status == 200


async def test_a_guessed_scope_is_not_named_to_who_may_not_read_it(keyed: Any) -> None:
    # The last active project must be gamma. The fixture starts it last, but
    # sessions started within one millisecond tie, and a tie goes to the
    # first name (beta, which the outsider may read): start gamma again once
    # the clock has moved on.
    await asyncio.sleep(0.01)
    r = await keyed.post("/api/v1/sessions", headers=bearer(ROOT_KEY),
                         json={"workspace": WS, "project": "gamma", "harness": "codex"})
    assert r.status in (200, 201), await r.text()
    outsider = bearer(key_of("both-write"))
    for method, path, body in (
            ("POST", "/api/v1/messages/pop", {}),
            ("POST", "/api/v1/messages/cancel", {"all": True}),
            ("POST", "/api/v1/messages", {"to_workspace": WS, "to_project": BETA, "body": "x"}),
            ("GET", "/api/v1/briefing", None), ("GET", "/api/v1/messages", None)):
        r = await keyed.request(method, path, headers=outsider, json=body)
        text = await r.text()
        assert r.status in (403, 409), (path, text)
        assert "gamma" not in text, (path, text)
    r = await keyed.post("/api/v1/messages/pop", headers=bearer(ROOT_KEY), json={})
    assert r.status == 409 and (await r.json())["resolved_scope"]["project"] == "gamma"


async def test_mail_grants_no_access_to_the_other_project(keyed: Any) -> None:
    """PM-94: sending (and receiving, and popping) mail grants nothing: a key
    with write on alpha only, after it received and claimed mail from beta,
    still may not read beta's mailbox, handoff, brief or project name, nor
    send to beta."""
    c = keyed
    root, alpha = bearer(ROOT_KEY), bearer(key_of("alpha-write"))
    r = await c.post("/api/v1/messages", headers=root, json={
        "from_workspace": WS, "from_project": BETA, "to_workspace": WS, "to_project": ALPHA,
        "body": "please review beta's export"})
    assert r.status == 201, await r.text()
    r = await c.post("/api/v1/handoff", headers=root,
                     json={"workspace": WS, "project": BETA, "body": "beta's own handoff"})
    assert r.status == 201, await r.text()
    popped = await c.post("/api/v1/messages/pop", headers=alpha, json=BOX)
    assert popped.status == 200 and (await popped.json())["message"] is not None
    beta = {"workspace": WS, "project": BETA}
    for method, path, kwargs in (
            ("GET", "/api/v1/messages", {"params": {**beta, "box": "inbox"}}),
            ("GET", "/api/v1/messages", {"params": {**beta, "box": "outbox"}}),
            ("GET", "/api/v1/handoff", {"params": {**beta, "handoff": "0"}}),
            ("GET", "/api/v1/briefing", {"params": beta}),
            ("POST", "/api/v1/messages/pop", {"json": beta}),
            ("POST", "/api/v1/messages", {"json": {
                "from_workspace": WS, "from_project": ALPHA, "to_workspace": WS,
                "to_project": BETA, "body": "a reply"}})):
        r = await c.request(method, path, headers=alpha, **kwargs)
        assert r.status == 403, (method, path, r.status, await r.text())
    listed = await (await c.get("/api/v1/projects", headers=alpha)).json()
    assert [p["project"] for p in listed["projects"]] == [ALPHA]
    # beta's handoff is still there, untouched by alpha's attempts
    got = await (await c.get("/api/v1/handoff", headers=root, params=beta)).json()
    assert got["handoff"]["body"] == "beta's own handoff"
