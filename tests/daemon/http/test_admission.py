"""Deciding admission hooks for message_send: a real hook on loopback
allows or refuses sends before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp import web

from common.errors import BadRequest
from daemon.api.app import build_app
from daemon.http.admission import AdmissionHook, parse_hooks
from daemon.settings import ClusterSettings, MailSettings, Settings, StoreSettings
from daemon.webhooks.config import WebhookSettings
from daemon.webhooks.signing import SIGNATURE_V2, TIMESTAMP, verify_timestamped
from daemon.wiring import build_node

SECRET = "hook-secret"
A = {"workspace": "default", "project": "proj-a"}
B = {"workspace": "default", "project": "proj-b"}


@pytest.fixture
async def hook(aiohttp_server):  # type: ignore[no-untyped-def]
    seen: list[dict] = []

    async def decide(request: web.Request) -> web.Response:
        raw = await request.read()
        assert verify_timestamped(SECRET, request.headers[TIMESTAMP], raw,
                                  request.headers[SIGNATURE_V2])
        msg = json.loads(raw)["message"]
        seen.append(msg)
        if "forbidden" in msg["body"]:
            return web.json_response({"decision": "reject", "reason": "no forbidden words"})
        return web.json_response({"decision": "allow"})

    app = web.Application()
    app.router.add_post("/decide", decide)
    server = await aiohttp_server(app)
    return f"http://127.0.0.1:{server.port}/decide", seen


async def client_for(tmp_path: Path, aiohttp_client, hooks) -> tuple:  # type: ignore[no-untyped-def]
    settings = Settings(
        store=StoreSettings(db_path=str(tmp_path / "n.db")),
        cluster=ClusterSettings(node_id="node1"),
        mail=MailSettings(admission=tuple(hooks)),
        webhooks=WebhookSettings(allow_loopback_webhooks=True))
    node = await build_node(settings)
    await node.start()
    client = await aiohttp_client(build_app(node))
    for scope, harness in ((A, "kimi"), (B, "claude")):
        await client.post("/api/v1/sessions", json={**scope, "harness": harness})
    return node, client


async def send(client, body: str, to=B):  # type: ignore[no-untyped-def]
    return await client.post("/api/v1/messages", json={
        "to_workspace": to["workspace"], "to_project": to["project"],
        "from_workspace": "default", "from_project": "proj-a", "body": body})


async def pending(client, scope=B) -> int:  # type: ignore[no-untyped-def]
    return (await (await client.get("/api/v1/messages", params=scope)).json())["count"]


async def test_allow_and_reject(tmp_path, aiohttp_client, hook) -> None:  # type: ignore[no-untyped-def]
    url, seen = hook
    node, client = await client_for(tmp_path, aiohttp_client, [AdmissionHook(url, SECRET)])
    try:
        r = await send(client, "ship it, key AKIAABCDEFGHIJKLMNOP")
        assert r.status == 201
        assert "AKIA" not in seen[-1]["body"]  # the hook sees the scrubbed message
        r = await send(client, "a forbidden request")
        assert r.status == 403
        body = await r.json()
        assert body["code"] == "admission_rejected" and "no forbidden words" in body["error"]
        assert await pending(client) == 1
    finally:
        await node.stop()


async def test_unreachable_hook_fails_closed_or_open(tmp_path, aiohttp_client) -> None:  # type: ignore[no-untyped-def]
    from tests.cluster.harness import free_port

    dead = f"http://127.0.0.1:{free_port()}/decide"
    node, client = await client_for(tmp_path, aiohttp_client, [
        AdmissionHook(dead, SECRET, timeout_ms=500, project="proj-b"),
        AdmissionHook(dead, SECRET, timeout_ms=500, on_error="allow", project="proj-a")])
    try:
        r = await send(client, "hello")
        assert r.status == 503 and r.headers.get("Retry-After")
        assert await pending(client) == 0
        r = await send(client, "to myself", to=A)  # only the fail-open hook matches
        assert r.status == 201
        assert await pending(client, A) == 1
    finally:
        await node.stop()


async def test_hook_for_another_recipient_does_not_apply(tmp_path, aiohttp_client, hook) -> None:  # type: ignore[no-untyped-def]
    url, seen = hook
    node, client = await client_for(tmp_path, aiohttp_client,
                                    [AdmissionHook(url, SECRET, project="proj-z")])
    try:
        assert (await send(client, "a forbidden request")).status == 201
        assert seen == []
    finally:
        await node.stop()


def test_hook_config_is_validated() -> None:
    hooks = parse_hooks([{"url": "https://hooks.example/decide", "secret": "s"}])
    assert hooks[0].on_error == "reject"
    for bad in ([{"url": "ftp://x", "secret": "s"}], [{"url": "https://x", "secret": ""}],
                [{"url": "https://x", "secret": "s", "on_error": "maybe"}],
                [{"url": "https://x", "secret": "s", "surprise": 1}]):
        with pytest.raises(BadRequest):
            parse_hooks(bad)


def test_hooks_load_from_the_node_config(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from daemon.settings import load_settings

    conf = tmp_path / "node.toml"
    conf.write_text('[[mail.admission]]\nurl = "https://policy.example/decide"\n'
                    'secret = "s"\nproject = "proj-b"\non_error = "allow"\n')
    (hook,) = load_settings({}, env={}, config_path=conf).mail.admission
    assert hook.project == "proj-b" and hook.on_error == "allow" and hook.workspace is None


async def test_a_web_send_passes_the_sanitizer_and_the_hooks_first(  # type: ignore[no-untyped-def]
        tmp_path, aiohttp_client, hook) -> None:
    """PM-73: a send from the web inbox (``/web/api/messages``) is scrubbed
    and put to the admission hooks before it is stored, as ``POST /messages``."""
    url, seen = hook
    node, client = await client_for(tmp_path, aiohttp_client, [AdmissionHook(url, SECRET)])
    try:
        assert (await client.get("/web/inbox")).status == 200  # the anonymous web session
        me = await (await client.get("/web/api/me")).json()
        web_headers = {"X-AI-Memory-UI": "1", "X-CSRF-Token": me["csrf_token"],
                       "Origin": str(client.make_url("/")).rstrip("/")}

        async def web_send(body: str):  # type: ignore[no-untyped-def]
            return await client.post("/web/api/messages", headers=web_headers, json={
                "from_workspace": "default", "from_project": "proj-a",
                "to_workspace": "default", "to_project": "proj-b", "body": body})

        r = await web_send("a forbidden request from the page")
        assert r.status == 403, await r.text()
        assert (await r.json())["code"] == "admission_rejected"
        assert await pending(client) == 0  # refused before anything was written
        assert [m["body"] for m in seen] == ["a forbidden request from the page"]
        r = await web_send("ship it, key AKIAABCDEFGHIJKLMNOP")
        assert r.status == 201, await r.text()
        assert "AKIA" not in seen[-1]["body"]  # the hook saw the scrubbed text
        listing = await (await client.get("/api/v1/messages", params=B)).json()
        assert listing["count"] == 1 and "AKIA" not in listing["messages"][0]["body"]
    finally:
        await node.stop()
