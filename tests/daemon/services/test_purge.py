"""Project and workspace purge, and the empty-project cleanup, over HTTP on a
real node (real SQLite, the real app): what goes, what stays, the audit
record, who may (403 otherwise), and bad input refused with nothing written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from daemon.api.app import build_app
from tests.daemon.authz_fixtures import ROOT_KEY, key_of, keys_auth
from tests.daemon.identity.test_authz import bearer, running, settings_for
from tests.daemon.rowcounts import written

WS = "ws"


async def session(client: Any, project: str, key: str = ROOT_KEY, ws: str = WS) -> None:
    r = await client.post("/api/v1/sessions", headers=bearer(key),
                          json={"workspace": ws, "project": project, "harness": "codex"})
    assert r.status == 201, await r.text()


async def send(client: Any, to: str, frm: str, text: str, ws: str = WS) -> str:
    r = await client.post("/api/v1/messages", headers=bearer(ROOT_KEY), json={
        "to_workspace": ws, "to_project": to, "from_workspace": ws, "from_project": frm,
        "body": text})
    assert r.status == 201, await r.text()
    return str((await r.json())["message_id"])


async def box(client: Any, project: str, which: str = "inbox") -> list[dict[str, Any]]:
    r = await client.get("/api/v1/messages", headers=bearer(ROOT_KEY),
                         params={"box": which, "workspace": WS, "project": project})
    assert r.status == 200, await r.text()
    return list((await r.json())["messages"])


async def projects(client: Any) -> set[str]:
    r = await client.get("/api/v1/projects", headers=bearer(ROOT_KEY))
    return {f"{p['workspace']}/{p['project']}" for p in (await r.json())["projects"]}


@pytest.fixture
async def served(tmp_path: Path, aiohttp_client: Any) -> AsyncIterator[tuple[Any, Path]]:
    data = tmp_path / "data"
    data.mkdir()
    node = await running(settings_for(data / "node.db", keys_auth()))
    try:
        client = await aiohttp_client(build_app(node))
        for project in ("alpha", "beta", "gamma"):
            await session(client, project)
        yield client, data
    finally:
        await node.stop()


async def test_a_project_purge_removes_its_mail_sessions_and_memories(served: Any) -> None:
    client, _ = served
    await send(client, "alpha", "beta", "to alpha 1")
    mid = await send(client, "alpha", "beta", "to alpha 2")
    r = await client.post("/api/v1/messages/pop", headers=bearer(ROOT_KEY),
                          json={"workspace": WS, "project": "alpha"})
    assert r.status == 200
    kept = await send(client, "beta", "alpha", "alpha's outbox, beta's inbox")
    for ns, title in (("ws/alpha", "a"), ("ws/alpha/notes", "b"), ("ws/beta", "c")):
        r = await client.post("/api/v1/memories", headers=bearer(ROOT_KEY),
                              json={"title": title, "content": "x", "namespace": ns})
        assert r.status == 201, await r.text()
    r = await client.post("/api/v1/projects/ws/alpha/purge", headers=bearer(ROOT_KEY),
                          json={"reason": "project archived"})
    assert r.status == 200, await r.text()
    got = await r.json()
    assert got["messages_removed"] == 2 and got["memories_removed"] == 2
    assert await box(client, "alpha") == []
    assert "ws/alpha" not in await projects(client)
    assert [m["id"] for m in await box(client, "beta")] == [kept]  # the recipient's stays
    r = await client.post("/api/v1/messages/pop", headers=bearer(ROOT_KEY),
                          json={"workspace": WS, "project": "alpha", "message_id": mid})
    assert r.status == 200 and (await r.json())["message"] is None  # gone: nothing to claim
    r = await client.post("/api/v1/messages", headers=bearer(ROOT_KEY), json={
        "to_workspace": WS, "to_project": "alpha", "from_workspace": WS,
        "from_project": "beta", "body": "hello?"})
    assert r.status == 404  # the project no longer exists: fail closed
    r = await client.get("/api/v1/memories", headers=bearer(ROOT_KEY),
                         params={"namespace": "_audit/purge"})
    audit = (await r.json())["memories"]
    assert len(audit) == 1 and audit[0]["id"] == got["audit_id"]
    assert audit[0]["metadata"]["purge"]["reason"] == "project archived"
    assert audit[0]["metadata"]["purge"]["by_user"] == "admin"
    names = {m["namespace"] for m in (await (await client.get(
        "/api/v1/memories", headers=bearer(ROOT_KEY))).json())["memories"]}
    assert names == {"ws/beta", "_audit/purge"}
    await session(client, "alpha")  # a new session brings the project back, empty
    assert "ws/alpha" in await projects(client)
    assert await box(client, "alpha") == []


async def test_a_retry_with_the_same_key_is_the_same_purge(served: Any) -> None:
    client, _ = served
    await send(client, "alpha", "beta", "one")
    hdr = {**bearer(ROOT_KEY), "Idempotency-Key": "purge-1"}
    first = await (await client.delete("/api/v1/projects/ws/alpha", headers=hdr)).json()
    await session(client, "alpha")
    later = await send(client, "alpha", "beta", "sent after the purge")
    r = await client.delete("/api/v1/projects/ws/alpha", headers=hdr)
    assert r.status == 200
    again = await r.json()
    assert again["purge_id"] == first["purge_id"] and again["audit_id"] == first["audit_id"]
    assert [m["id"] for m in await box(client, "alpha")] == [later]


async def test_a_workspace_purge_takes_every_project_of_it(served: Any) -> None:
    client, _ = served
    await session(client, "elsewhere", ws="other")
    await send(client, "alpha", "beta", "a")
    await send(client, "gamma", "alpha", "g")
    r = await client.post("/api/v1/workspaces/ws/purge", headers=bearer(ROOT_KEY))
    assert r.status == 200, await r.text()
    got = await r.json()
    assert got["projects"] == ["alpha", "beta", "gamma"] and got["messages_removed"] == 2
    assert await projects(client) == {"other/elsewhere"}


@pytest.mark.parametrize(("key", "path", "status"), [
    (key_of("alpha-write"), "/api/v1/projects/ws/alpha/purge", 403),
    (key_of("both-write"), "/api/v1/projects/ws/alpha/purge", 403),
    (key_of("workspace-write"), "/api/v1/projects/ws/alpha/purge", 200),
    (key_of("other-workspace"), "/api/v1/projects/ws/alpha/purge", 403),
    (key_of("workspace-write"), "/api/v1/workspaces/ws/purge", 403),
    (ROOT_KEY, "/api/v1/workspaces/ws/purge", 200),
    ("no-such-key", "/api/v1/projects/ws/alpha/purge", 401),
])
async def test_who_may_purge(served: Any, key: str, path: str, status: int) -> None:
    client, data = served
    await send(client, "alpha", "beta", "m")
    before = written(data)
    r = await client.post(path, headers=bearer(key))
    assert r.status == status, await r.text()
    if status != 200:
        assert written(data) == before
        assert "error" in await r.json()


@pytest.mark.parametrize(("method", "path", "body", "status"), [
    ("POST", "/api/v1/projects/ws/nosuch/purge", None, 404),
    ("POST", "/api/v1/workspaces/nosuch/purge", None, 404),
    ("POST", "/api/v1/projects/ws/bad%20name/purge", None, 400),
    ("POST", "/api/v1/projects/ws/alpha/purge", {"reason": "x" * 501}, 400),
    ("POST", "/api/v1/projects/ws/alpha/purge", {"why": "unknown field"}, 400),
    ("POST", "/api/v1/projects/ws/alpha/purge", [1], 400),
    ("POST", "/api/v1/projects/cleanup", {"idle_secs": -1}, 400),
])
async def test_bad_input_is_refused_and_writes_nothing(served: Any, method: str, path: str,
                                                       body: Any, status: int) -> None:
    client, data = served
    await send(client, "alpha", "beta", "m")
    before = written(data)
    r = await client.request(method, path, headers=bearer(ROOT_KEY), json=body)
    assert r.status == status, await r.text()
    assert written(data) == before


async def test_cleanup_removes_only_idle_projects_no_message_names(served: Any) -> None:
    client, _ = served
    await send(client, "alpha", "beta", "keeps alpha as recipient and beta as sender")
    r = await client.post("/api/v1/projects/cleanup", headers=bearer(ROOT_KEY),
                          json={"idle_secs": 3600})
    assert (await r.json())["removed"] == []  # nothing idle long enough
    r = await client.post("/api/v1/projects/cleanup", headers=bearer(ROOT_KEY),
                          json={"idle_secs": 0})
    assert r.status == 200, await r.text()
    assert (await r.json())["removed"] == ["ws/gamma"]
    assert await projects(client) == {"ws/alpha", "ws/beta"}
    r = await client.post("/api/v1/projects/cleanup", headers=bearer(key_of("workspace-write")),
                          json={"idle_secs": 0})
    assert r.status == 403
