"""The approval queue on a real node over HTTP: a real admission hook on
loopback answers ``pending``; the message is held (not poppable, listed),
an approver approves it into its place or rejects it for good, the
decisions reach a real webhook receiver and the push stream, and only a
key with write on the recipient project may decide."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from daemon.api.app import build_app
from daemon.http.admission import AdmissionHook
from daemon.settings import ClusterSettings, MailSettings, Settings, StoreSettings
from daemon.webhooks.config import WebhookSettings
from daemon.webhooks.signing import SIGNATURE_V2, TIMESTAMP, verify_timestamped
from daemon.wiring import build_node
from tests.daemon.authz_fixtures import ROOT_KEY, key_of, keys_auth
from tests.daemon.services.test_web_api import UI, hdrs, login_anonymous

SECRET = "hook-secret"
SUB_SECRET = "sub-secret"
A = {"workspace": "ws", "project": "alpha"}
B = {"workspace": "ws", "project": "beta"}


@pytest.fixture
async def hook(aiohttp_server):  # type: ignore[no-untyped-def]
    """A deciding hook: "hold" in the body -> pending, "no" -> reject."""
    async def decide(request: web.Request) -> web.Response:
        raw = await request.read()
        assert verify_timestamped(SECRET, request.headers[TIMESTAMP], raw,
                                  request.headers[SIGNATURE_V2])
        body = json.loads(raw)["message"]["body"]
        if "hold" in body:
            return web.json_response({"decision": "pending", "reason": "a person must look"})
        if body.startswith("no "):
            return web.json_response({"decision": "reject", "reason": "not this"})
        return web.json_response({"decision": "allow"})

    app = web.Application()
    app.router.add_post("/decide", decide)
    server = await aiohttp_server(app)
    return f"http://127.0.0.1:{server.port}/decide"


@pytest.fixture
async def receiver(aiohttp_server):  # type: ignore[no-untyped-def]
    """A webhook receiver that checks the document's signature recipe."""
    got: list[dict[str, Any]] = []

    async def take(request: web.Request) -> web.Response:
        raw = await request.read()
        assert verify_timestamped(SUB_SECRET, request.headers[TIMESTAMP], raw,
                                  request.headers[SIGNATURE_V2])
        got.append(json.loads(raw))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", take)
    server = await aiohttp_server(app)
    return f"http://127.0.0.1:{server.port}/hook", got


async def start(tmp_path: Path, aiohttp_client: Any, hook_url: str, **extra: Any) -> tuple:
    settings = Settings(
        store=StoreSettings(db_path=str(tmp_path / "n.db")),
        cluster=ClusterSettings(node_id="node1"),
        mail=MailSettings(admission=(AdmissionHook(hook_url, SECRET, project="beta"),)),
        webhooks=WebhookSettings(allow_loopback_webhooks=True, backoff_base_secs=0.05,
                                 backoff_max_secs=0.2),
        **extra)
    node = await build_node(settings)
    await node.start()
    client = await aiohttp_client(build_app(node))
    return node, client


def root(**h: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {ROOT_KEY}", **h}


async def setup_projects(client: Any, headers: dict[str, str]) -> None:
    for scope, harness in ((A, "kimi"), (B, "claude")):
        r = await client.post("/api/v1/sessions", json={**scope, "harness": harness},
                              headers=headers)
        assert r.status == 201, await r.text()


async def send(client: Any, body: str, headers: dict[str, str]) -> Any:
    return await client.post("/api/v1/messages", headers=headers, json={
        "to_workspace": "ws", "to_project": "beta", "from_workspace": "ws",
        "from_project": "alpha", "subject": body[:20], "body": body})


async def pop(client: Any, headers: dict[str, str], **extra: Any) -> Any:
    r = await client.post("/api/v1/messages/pop", json={**B, **extra}, headers=headers)
    assert r.status == 200, await r.text()
    return (await r.json())["message"]


async def test_pending_is_held_listed_and_approved_into_its_place(
        tmp_path, aiohttp_client, hook, receiver) -> None:  # type: ignore[no-untyped-def]
    url, got = receiver
    node, c = await start(tmp_path, aiohttp_client, hook)
    h: dict[str, str] = {}
    try:
        await setup_projects(c, h)
        r = await c.post("/api/v1/subscriptions", headers={"X-Agent-Id": "ops"}, json={
            "url": url, "secret": SUB_SECRET,
            "events": "approval_requested,approval_decided"})
        assert r.status == 201, await r.text()
        r = await send(c, "please hold this one", h)
        assert r.status == 201, await r.text()
        held = await r.json()
        assert held["state"] == "awaiting_approval"
        assert held["approval_note"] == "a person must look"
        second = await (await send(c, "an ordinary one", h)).json()
        assert second["state"] == "pending"

        # Not in the inbox, not poppable, by id or by order; listed as awaiting.
        inbox = await (await c.get("/api/v1/messages", params=B, headers=h)).json()
        assert [m["id"] for m in inbox["messages"]] == [second["message_id"]]
        r = await c.post("/api/v1/messages/pop", headers=h,
                         json={**B, "message_id": held["message_id"]})
        assert r.status == 409
        listed = await (await c.get("/api/v1/approvals", params=B, headers=h)).json()
        assert [m["id"] for m in listed["messages"]] == [held["message_id"]]
        assert listed["messages"][0]["state"] == "awaiting_approval"
        me = await login_anonymous(c)
        history = await (await c.get("/web/api/history",
                                     params={**B, "box": "received"})).json()
        states = {m["id"]: m["state"] for m in history["messages"]}
        assert states[held["message_id"]] == "awaiting_approval"
        web_list = await (await c.get("/web/api/approvals", params=B)).json()
        assert [m["id"] for m in web_list["messages"]] == [held["message_id"]]
        # The web inbox decides with its session's CSRF token, never without.
        r = await c.post(f"/web/api/messages/{held['message_id']}/approve", json={},
                         headers=UI)
        assert r.status == 403

        r = await c.post(f"/web/api/messages/{held['message_id']}/approve",
                         json={"reason": "looked fine"}, headers=hdrs(c, me))
        assert r.status == 200, await r.text()
        done = await r.json()
        assert done["decision"] == "approved" and done["message"]["state"] == "pending"
        assert done["message"]["approval_reason"] == "looked fine"
        again = await c.post(f"/api/v1/approvals/{held['message_id']}/reject", headers=h,
                             json={})
        assert again.status == 409
        assert (await again.json())["code"] == "already_decided"
        # It went back to its original place: ahead of the one sent after it.
        first = await pop(c, h)
        assert first["id"] == held["message_id"]
        assert (await pop(c, h))["id"] == second["message_id"]
        assert (await c.get("/api/v1/approvals", params=B, headers=h)).status == 200

        for _ in range(100):
            if len(got) >= 2:
                break
            await asyncio.sleep(0.05)
        events = {e["event"]: e for e in got}
        assert events["approval_requested"]["id"] == held["message_id"]
        assert events["approval_requested"]["note"] == "a person must look"
        assert "body" not in events["approval_requested"]
        assert events["approval_decided"]["decision"] == "approved"
        assert events["approval_decided"]["reason"] == "looked fine"
    finally:
        await node.stop()


async def test_a_rejected_message_is_never_poppable(tmp_path, aiohttp_client, hook) -> None:  # type: ignore[no-untyped-def]
    node, c = await start(tmp_path, aiohttp_client, hook)
    h: dict[str, str] = {}
    try:
        await setup_projects(c, h)
        held = await (await send(c, "hold me", h)).json()
        r = await c.post(f"/api/v1/approvals/{held['message_id']}/reject", headers=h,
                         json={"reason": "no thanks"})
        assert r.status == 200
        assert (await r.json())["message"]["state"] == "rejected"
        assert await pop(c, h) is None
        r = await c.post("/api/v1/messages/pop", headers=h,
                         json={**B, "message_id": held["message_id"]})
        assert r.status == 409
        r = await c.post(f"/api/v1/approvals/{held['message_id']}/approve", headers=h, json={})
        assert r.status == 409
        body = await r.json()
        assert body["decision"] == "rejected" and body["state"] == "rejected"
        listed = await (await c.get("/api/v1/approvals", params=B, headers=h)).json()
        assert listed["count"] == 0
        # A plain rejection by the hook still refuses the send outright.
        r = await send(c, "no way", h)
        assert r.status == 403 and (await r.json())["code"] == "admission_rejected"
    finally:
        await node.stop()


async def test_bad_input_is_refused(tmp_path, aiohttp_client, hook) -> None:  # type: ignore[no-untyped-def]
    node, c = await start(tmp_path, aiohttp_client, hook)
    h: dict[str, str] = {}
    try:
        await setup_projects(c, h)
        held = await (await send(c, "hold me", h)).json()
        mid = held["message_id"]
        assert (await c.post("/api/v1/approvals/nope/approve", headers=h, json={})).status == 404
        assert (await c.post("/api/v1/approvals/bad%20id/approve", headers=h,
                             json={})).status == 400
        assert (await c.post(f"/api/v1/approvals/{mid}/approve", headers=h,
                             json={"reason": 5})).status == 400
        assert (await c.post(f"/api/v1/approvals/{mid}/approve", headers=h,
                             json={"reason": "x" * 6000})).status == 400
        assert (await c.post(f"/api/v1/approvals/{mid}/approve", headers=h,
                             data=b"not json")).status == 400
        assert (await c.get("/api/v1/approvals", params={"workspace": "ws"},
                            headers=h)).status == 400
        assert (await c.get(f"/api/v1/approvals/{mid}/approve", headers=h)).status == 405
        still = await (await c.get("/api/v1/approvals", params=B, headers=h)).json()
        assert still["count"] == 1  # nothing above decided it
    finally:
        await node.stop()


async def test_an_approver_needs_write_on_the_recipient_project(
        tmp_path, aiohttp_client, hook) -> None:  # type: ignore[no-untyped-def]
    node, c = await start(tmp_path, aiohttp_client, hook, auth=keys_auth())
    try:
        await setup_projects(c, root())
        held = await (await send(c, "hold me", root())).json()
        mid = held["message_id"]
        for name in ("alpha-write", "beta-read", "none"):
            if name == "beta-read":
                continue  # not among the grant sets; both-read covers read on beta
            r = await c.post(f"/api/v1/approvals/{mid}/approve", json={},
                             headers={"Authorization": f"Bearer {key_of(name)}"})
            assert r.status == 403, (name, await r.text())
        r = await c.post(f"/api/v1/approvals/{mid}/approve", json={},
                         headers={"Authorization": f"Bearer {key_of('both-read')}"})
        assert r.status == 403
        # Reading the list needs read on the mailbox.
        r = await c.get("/api/v1/approvals", params=B,
                        headers={"Authorization": f"Bearer {key_of('both-read')}"})
        assert r.status == 200 and (await r.json())["count"] == 1
        r = await c.get("/api/v1/approvals", params=B,
                        headers={"Authorization": f"Bearer {key_of('alpha-write')}"})
        assert r.status == 403
        r = await c.post(f"/api/v1/approvals/{mid}/approve", json={},
                         headers={"Authorization": f"Bearer {key_of('beta-write')}"})
        assert r.status == 200, await r.text()
        assert (await r.json())["message"]["approval_decided_by"] == "user-beta-write"
    finally:
        await node.stop()


async def test_the_push_stream_shows_approval_requested_and_decided(
        tmp_path, aiohttp_client, hook) -> None:  # type: ignore[no-untyped-def]
    node, c = await start(tmp_path, aiohttp_client, hook)
    h: dict[str, str] = {}
    try:
        await setup_projects(c, h)
        resp = await c.get("/api/v1/messages/stream", params=B, headers=h)
        assert resp.status == 200
        names: list[str] = []
        datas: list[dict[str, Any]] = []

        async def read_events() -> None:
            event = None
            while len(names) < 3:
                line = (await resp.content.readline()).decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line[len("event: "):]
                elif line.startswith("data: ") and event not in (None, "ready"):
                    names.append(str(event))
                    datas.append(json.loads(line[len("data: "):]))

        reader = asyncio.create_task(read_events())
        await asyncio.sleep(0.2)
        held = await (await send(c, "hold me", h)).json()
        await send(c, "an ordinary one", h)
        r = await c.post(f"/api/v1/approvals/{held['message_id']}/approve", headers=h, json={})
        assert r.status == 200
        await asyncio.wait_for(reader, 10)
        assert names == ["approval_requested", "message", "approval_decided"]
        assert datas[0]["message"]["state"] == "awaiting_approval"
        assert datas[2]["decision"] == "approved" and datas[2]["id"] == held["message_id"]
        resp.close()
    finally:
        await node.stop()


async def test_the_cli_lists_approves_and_rejects(tmp_path, aiohttp_client, hook) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from cli.main import cli

    node, c = await start(tmp_path, aiohttp_client, hook)
    h: dict[str, str] = {}
    url = str(c.make_url("/")).rstrip("/")

    async def run(*args: str) -> Any:
        return await asyncio.to_thread(CliRunner().invoke, cli, ["--url", url, *args])

    try:
        await setup_projects(c, h)
        sent = await run("message", "send", "--to-workspace", "ws", "--to-project", "beta",
                         "--from-workspace", "ws", "--from-project", "alpha", "hold one")
        assert sent.exit_code == 0, sent.output
        assert "awaiting_approval" in sent.output and "held for an approver" in sent.output
        one = sent.output.split()[1]
        two = (await (await send(c, "hold two", h)).json())["message_id"]
        listed = await run("approvals", "list", "--workspace", "ws", "--project", "beta")
        assert listed.exit_code == 0, listed.output
        assert one in listed.output and two in listed.output
        assert "awaiting_approval" in listed.output and "a person must look" in listed.output
        as_json = await run("approvals", "list", "--workspace", "ws", "--project", "beta",
                            "--json")
        assert [m["id"] for m in json.loads(as_json.output)["messages"]] == [one, two]
        ok = await run("approvals", "approve", one, "--reason", "fine")
        assert ok.exit_code == 0 and f"approved {one}: now pending" in ok.output, ok.output
        no = await run("approvals", "reject", two)
        assert no.exit_code == 0 and f"rejected {two}: now rejected" in no.output, no.output
        again = await run("approvals", "approve", two)
        assert again.exit_code == 4 and "already rejected" in again.output, again.output
        missing = await run("approvals", "approve", "no-such-message")
        assert missing.exit_code == 3, missing.output
        unnamed = await run("approvals", "list")
        assert unnamed.exit_code == 2 and "--workspace" in unnamed.output, unnamed.output
        assert (await pop(c, h))["id"] == one
        assert await pop(c, h) is None
    finally:
        await node.stop()


async def test_the_mcp_tools_through_the_real_mcp_client(tmp_path, aiohttp_client, hook) -> None:  # type: ignore[no-untyped-def]
    from tests.mcp.conftest import ok, tool_error
    from tests.mcp.test_http_cluster import mcp

    node, c = await start(tmp_path, aiohttp_client, hook)
    h: dict[str, str] = {}
    url = str(c.make_url("/")).rstrip("/")
    try:
        await setup_projects(c, h)
        async with mcp(url, **{"X-Agent-Id": "approver"}) as client:
            sent = ok(await client.call_tool("memory_message_send", {
                "to_workspace": "ws", "to_project": "beta", "from_workspace": "ws",
                "from_project": "alpha", "body": "hold this deploy"}))
            assert sent["state"] == "awaiting_approval"
            listed = ok(await client.call_tool("memory_approvals_list",
                                               {"workspace": "ws", "project": "beta"}))
            assert [m["id"] for m in listed["messages"]] == [sent["message_id"]]
            empty = ok(await client.call_tool("memory_message_pop",
                                              {"workspace": "ws", "project": "beta"}))
            assert empty["message"] is None
            done = ok(await client.call_tool("memory_approval_decide", {
                "message_id": sent["message_id"], "decision": "approve", "reason": "ok"}))
            assert done["decision"] == "approved"
            err = tool_error(await client.call_tool("memory_approval_decide", {
                "message_id": sent["message_id"], "decision": "reject"}))
            assert err["code"] == "already_decided" and err["decision"] == "approved"
            bad = await client.call_tool("memory_approval_decide", {
                "message_id": sent["message_id"], "decision": "maybe"})
            assert bad.is_error
            got = ok(await client.call_tool("memory_message_pop",
                                            {"workspace": "ws", "project": "beta"}))
            assert got["message"]["id"] == sent["message_id"]
    finally:
        await node.stop()


async def test_a_saved_edit_the_hook_would_hold_is_refused(tmp_path, aiohttp_client, hook) -> None:  # type: ignore[no-untyped-def]
    node, c = await start(tmp_path, aiohttp_client, hook)
    h: dict[str, str] = {}
    try:
        await setup_projects(c, h)
        mid = (await (await send(c, "an ordinary one", h)).json())["message_id"]
        me = await login_anonymous(c)
        r = await c.post(f"/web/api/messages/{mid}/edit", json={}, headers=hdrs(c, me))
        assert r.status == 200, await r.text()
        r = await c.post(f"/web/api/messages/{mid}/save", json={"body": "now hold it"},
                         headers=hdrs(c, me))
        assert r.status == 403 and (await r.json())["code"] == "admission_rejected"
        # Still held for the edit, unchanged; a discard puts it back.
        r = await c.post(f"/web/api/messages/{mid}/discard", json={}, headers=hdrs(c, me))
        assert r.status == 200
        assert (await pop(c, h))["body"].count("an ordinary one") == 1
    finally:
        await node.stop()
