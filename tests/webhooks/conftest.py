"""Fixtures for webhook tests against a real node: a settings object that
carries a ``webhooks`` section (loopback allowed, fast backoff), a daemon
that can be stopped and started again on the same files, and a recording
receiver on 127.0.0.1 whose answers a test scripts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from daemon.api.app import build_app
from daemon.node import Node
from daemon.settings import ClusterSettings, Settings, StoreSettings
from daemon.webhooks.config import WebhookSettings
from daemon.webhooks.service import Webhooks
from daemon.wiring import build_node

FAST = WebhookSettings(allow_loopback_webhooks=True, backoff_base_secs=0.05,
                       backoff_max_secs=0.2, timeout_secs=2.0)


def hooked_settings(db: Path, hooks: WebhookSettings = FAST, **cluster: Any) -> Settings:
    return Settings(store=StoreSettings(db_path=str(db)),
                          cluster=ClusterSettings(node_id="node1", initial_state="new", **cluster),
                          webhooks=hooks)


class Daemon:
    """A real node plus its app behind a test client; restartable."""

    def __init__(self, settings: Settings, directory: Any = None) -> None:
        self.settings = settings
        self.directory = directory
        self.node: Node | None = None
        self.client: TestClient[web.Request, web.Application] | None = None
        self.app: web.Application | None = None

    async def start(self) -> Daemon:
        self.node = await build_node(self.settings, directory=self.directory)
        await self.node.start()
        self.app = build_app(self.node)
        self.client = TestClient(TestServer(self.app))
        await self.client.start_server()
        return self

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.close()  # app cleanup: the webhook dispatcher stops here
            self.client = None
        if self.node is not None:
            await self.node.stop()
            self.node = None

    @property
    def hooks(self) -> Webhooks:
        assert self.node is not None
        return self.node.webhooks

    @property
    def c(self) -> TestClient[web.Request, web.Application]:
        assert self.client is not None
        return self.client

    @property
    def n(self) -> Node:
        assert self.node is not None
        return self.node


@pytest.fixture
async def daemon_factory(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    started: list[Daemon] = []

    async def make(hooks: WebhookSettings = FAST, db: str = "node.db", **cluster: Any) -> Daemon:
        d = await Daemon(hooked_settings(tmp_path / db, hooks, **cluster)).start()
        started.append(d)
        return d

    yield make
    for d in started:
        await d.stop()


@pytest.fixture
async def daemon(daemon_factory: Callable[..., Any]) -> Daemon:
    d: Daemon = await daemon_factory()
    return d


@dataclass
class Call:
    path: str
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str = ""
    calls: list[Call] = field(default_factory=list)
    script: list[int] = field(default_factory=list)  # statuses answered before the 200s

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        status = self.script.pop(0) if self.script else 200
        self.calls.append(Call(request.path, status, dict(request.headers), body))
        return web.Response(status=status)

    def ok(self, path: str | None = None) -> list[Call]:
        return [c for c in self.calls if c.status < 300 and (path is None or c.path == path)]

    def at(self, path: str) -> str:
        return self.url.rstrip("/") + path


async def wait_until(pred: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


@pytest.fixture
async def receiver(aiohttp_server: Any) -> Receiver:
    rec = Receiver()
    app = web.Application()
    app.router.add_post("/{tail:.*}", rec.handle)
    server = await aiohttp_server(app, host="127.0.0.1")
    rec.url = str(server.make_url("/"))
    return rec


def hooks_with(**changes: Any) -> WebhookSettings:
    return replace(FAST, **changes)
