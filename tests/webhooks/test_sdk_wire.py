"""The official SDK (``ai_memory``) subscribes and unsubscribes against a
real ``ai-memory serve`` process, in upstream's shapes, and a real receiver
on 127.0.0.1 gets what the subscriptions' filters let through."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ai_memory import AsyncAiMemoryClient
from ai_memory.models import Subscription, SubscriptionRequest
from ai_memory.webhooks import verify_webhook_signature
from aiohttp import web

from tests.daemon.http.test_sdk import ROOT, _free_port, _serve_cmd, _wait_healthy

SECRET = "sdk-wire-secret"


@pytest.fixture(scope="module")
def daemon_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("sdkwire")
    port = _free_port()
    log = tmp / "daemon.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AI_MEMORY_ALLOW_LOOPBACK_WEBHOOKS": "1"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(_serve_cmd(port, Path(tmp) / "wire.db"), cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


class Hooks:
    def __init__(self) -> None:
        self.got: dict[str, list[dict[str, Any]]] = {}

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        h = request.headers
        ts = h["X-AI-Memory-Timestamp"]
        doc = "sha256=" + hmac.new(SECRET.encode(), ts.encode() + b"." + raw,
                                   hashlib.sha256).hexdigest()
        if not (hmac.compare_digest(doc, h["X-AI-Memory-Signature"])
                and verify_webhook_signature(raw, h["X-AI-Memory-Body-Signature"], SECRET)):
            return web.Response(status=401)
        self.got.setdefault(request.path, []).append(json.loads(raw))
        return web.Response(status=204)


async def until(pred: Any, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_sdk_subscribe_filters_and_unsubscribe(daemon_url: str,
                                                     aiohttp_server: Any) -> None:
    hooks = Hooks()
    app = web.Application()
    app.router.add_post("/{tail:.*}", hooks.handle)
    server = await aiohttp_server(app, host="127.0.0.1")
    base = str(server.make_url("/"))
    ns, other = f"wire-{uuid.uuid4().hex[:6]}", f"else-{uuid.uuid4().hex[:6]}"
    async with AsyncAiMemoryClient(daemon_url, agent_id="alice") as c:
        by_ns = await c.subscribe({"url": base + "ns", "events": "*", "secret": SECRET,
                                   "namespace_filter": ns})
        by_agent = await c.subscribe(SubscriptionRequest(
            url=base + "bob", events=["agent_notified", "memory_store"], secret=SECRET,
            agent_filter="bob"))
        assert isinstance(by_ns, Subscription) and by_ns.events == []
        assert by_agent.events == ["agent_notified", "memory_store"]
        listed = {s.id: s for s in await c.subscriptions()}
        assert {by_ns.id, by_agent.id} <= set(listed)
        extra = listed[by_ns.id].model_extra or {}
        assert extra["namespace_filter"] == ns and extra["agent_filter"] is None

        mine = await c.store(title="in", content="c", namespace=ns)
        await c.store(title="out", content="c", namespace=other)
        await c.notify({"to": "bob", "subject": "s", "body": "b"})
        async with AsyncAiMemoryClient(daemon_url, agent_id="bob") as bob:
            bobs = await bob.store(title="bob's", content="c", namespace=other)
            await bob.store(title="bob's too", content="c", namespace=ns)
        await until(lambda: len(hooks.got.get("/ns", [])) == 2
                    and len(hooks.got.get("/bob", [])) == 3)
        await asyncio.sleep(0.3)
        assert [e["namespace"] for e in hooks.got["/ns"]] == [ns, ns]
        assert hooks.got["/ns"][0]["memory_id"] == mine["id"]
        assert [e["event"] for e in hooks.got["/bob"]] == [
            "agent_notified", "memory_store", "memory_store"]
        assert hooks.got["/bob"][0]["to"] == "bob"
        assert hooks.got["/bob"][1]["memory_id"] == bobs["id"]

        assert (await c.unsubscribe(by_ns.id))["deleted"] is True
        # the newer SDK's unsubscribe: DELETE /api/v1/subscriptions?id=...
        gone = await c._request("DELETE", "/api/v1/subscriptions", params={"id": by_agent.id})
        assert gone["deleted"] is True and gone["id"] == by_agent.id
        left = {s.id for s in await c.subscriptions()}
        assert not {by_ns.id, by_agent.id} & left
