"""Fixtures for handler tests: a real single-member Node on a real SQLite
file in tmp_path, served by the real aiohttp app through pytest-aiohttp's
test client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.api.app import build_app
from daemon.node import Node
from daemon.settings import ClusterSettings, Settings, StoreSettings
from daemon.wiring import build_node


def make_settings(db: Path, **cluster: object) -> Settings:
    return Settings(store=StoreSettings(db_path=str(db)),
                    cluster=ClusterSettings(node_id="node1", initial_state="new",
                                            **cluster))  # type: ignore[arg-type]


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = await build_node(make_settings(tmp_path / "node.db"))
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


@pytest.fixture
async def client(node: Node, aiohttp_client):  # type: ignore[no-untyped-def]
    return await aiohttp_client(build_app(node))
