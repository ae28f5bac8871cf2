"""Helpers for the memories / notify / agents handler tests.

``clocked`` (import ``clocked_fixture`` to use it) is a real single-member node whose wall clock the test moves
(expiry and the last-seen throttle are functions of time, so the tests set
the time rather than sleep). ``snapshot`` captures what the store holds so a
bad-input test can assert that nothing was written.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from daemon.api.app import build_app
from daemon.node import Node
from daemon.wiring import build_node
from tests.cluster.harness import free_port as below_ephemeral
from tests.daemon.conftest import make_settings

T0 = 1_800_000_000.0  # a fixed wall time (seconds) for clocked nodes


class Clock:
    def __init__(self, start: float = T0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Clocked:
    node: Node
    client: Any
    clock: Clock


@pytest.fixture(name="clocked")
async def clocked_fixture(tmp_path: Path, aiohttp_client: Any) -> AsyncIterator[Clocked]:
    clock = Clock()
    node = await build_node(make_settings(tmp_path / "clocked.db"), clock=clock)
    await node.start()
    try:
        client = await aiohttp_client(build_app(node))
        yield Clocked(node, client, clock)
    finally:
        await node.stop()


async def snapshot(node: Node) -> dict[str, int]:
    """The node's version vector: any write, of any kind, moves it."""
    return dict(node.store.version_vector())


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


def free_port() -> int:
    """A free port below the kernel's ephemeral range (tests.cluster.harness.free_port):
    a client polling a port of that range nobody listens on yet can connect
    to itself."""
    return below_ephemeral()


def headers(agent: str | None = None, key: str | None = None) -> dict[str, str]:
    out = {}
    if agent is not None:
        out["X-Agent-Id"] = agent
    if key is not None:
        out["Idempotency-Key"] = key
    return out


@dataclass(frozen=True)
class Bad:
    """One piece of bad input: how to send it and the status it must get."""

    name: str
    body: Any = None  # JSON-encoded unless ``raw`` is set
    raw: bytes | None = None
    params: dict[str, str] | None = None
    headers: dict[str, str] | None = None
    status: int = 400
    path: str | None = None  # overrides the endpoint's path


async def assert_refused(client: Any, node: Node, method: str, path: str, bad: Bad) -> str:
    """Send ``bad``; assert its status, a clear JSON error, and no write."""
    before = await snapshot(node)
    kwargs: dict[str, Any] = {"headers": {"Content-Type": "application/json", **(bad.headers or {})}}
    raw = bad.raw if bad.raw is not None or bad.body is None else json.dumps(bad.body).encode()
    if raw is not None:
        kwargs["data"] = io.BytesIO(raw)  # a stream: aiohttp warns about big raw bytes
    if bad.params is not None:
        kwargs["params"] = bad.params
    resp = await client.request(method, bad.path or path, **kwargs)
    text = await resp.text()
    assert resp.status == bad.status, f"{bad.name}: {resp.status} {text[:300]}"
    body = await resp.json()
    assert isinstance(body.get("error"), str) and body["error"], body
    assert isinstance(body.get("code"), str), body
    await asyncio.sleep(0)  # let any background write (there must be none) start
    assert await snapshot(node) == before, f"{bad.name} wrote something"
    return str(body["error"])
