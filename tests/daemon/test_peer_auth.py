"""Peer endpoints refuse unsigned, forged, stale and replayed requests when
a cluster secret is configured, and refuse non-members."""

from __future__ import annotations

import time
from pathlib import Path

import msgpack
import pytest

from daemon.app import build_app
from daemon.peer_auth import sign
from daemon.settings import ClusterSettings, Member, Settings, StoreSettings
from daemon.wiring import build_node
from federation.messages import SyncOffer

SECRET = "s3cret-for-tests"


@pytest.fixture
async def secured(tmp_path: Path, aiohttp_client):  # type: ignore[no-untyped-def]
    settings = Settings(store=StoreSettings(db_path=str(tmp_path / "n.db")), cluster=ClusterSettings(
        node_id="node1", secret=SECRET,
        peers=(Member("node2", "http://127.0.0.1:9"), Member("node3", "http://127.0.0.1:9"))))
    node = await build_node(settings)
    await node.start()
    try:
        yield await aiohttp_client(build_app(node))
    finally:
        await node.stop()


def body() -> bytes:
    return msgpack.packb([SyncOffer({}, "x").to_wire()], use_bin_type=True)


async def post(client, headers):  # type: ignore[no-untyped-def]
    return await client.post("/peer/v1/msgs", data=body(),
                             headers={"Content-Type": "application/msgpack", **headers})


async def test_signed_request_from_a_member_is_accepted(secured) -> None:  # type: ignore[no-untyped-def]
    r = await post(secured, sign(SECRET, "node2", "POST", "/peer/v1/msgs", body(), time.time()))
    assert r.status == 200


@pytest.mark.parametrize("case", ["unsigned", "wrong-secret", "stale", "tampered", "non-member"])
async def test_bad_peer_requests_are_refused(secured, case) -> None:  # type: ignore[no-untyped-def]
    now = time.time()
    if case == "unsigned":
        headers = {"X-AIM-Node": "node2"}
    elif case == "wrong-secret":
        headers = sign("guess", "node2", "POST", "/peer/v1/msgs", body(), now)
    elif case == "stale":
        headers = sign(SECRET, "node2", "POST", "/peer/v1/msgs", body(), now - 3600)
    elif case == "tampered":
        headers = sign(SECRET, "node2", "POST", "/peer/v1/msgs", b"other body", now)
    else:
        headers = sign(SECRET, "mallory", "POST", "/peer/v1/msgs", body(), now)
    r = await post(secured, headers)
    assert r.status in (401, 403), case
    assert "error" in await r.json()


async def test_replayed_request_is_refused(secured) -> None:  # type: ignore[no-untyped-def]
    headers = sign(SECRET, "node2", "POST", "/peer/v1/msgs", body(), time.time())
    assert (await post(secured, headers)).status == 200
    r = await post(secured, headers)
    assert r.status == 401 and "replayed" in (await r.json())["error"]
