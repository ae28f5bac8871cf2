"""The waiting member's probe loop wakes when a member it could not reach says hello.

A member waiting for peers backs off to seconds between probes; when a member
it had no answer from starts and asks it, it asks everyone again at once (so
a cluster whose last member starts late forms in about one round trip, not
one backoff). A hello from a member that answered already wakes nothing, so
two members waiting for a third do not keep each other busy.
"""

from __future__ import annotations

import time

import msgpack
from aiohttp.test_utils import TestClient, TestServer

from daemon.peer.auth import sign
from daemon.replication.joining import HELLO_PATH, _Waiting, _waiting_app
from daemon.settings import load_settings

SECRET = "s" * 32


def _settings() -> object:
    return load_settings({"node_id": "node1", "cluster_secret": SECRET,
                          "quorum_peers": "node2=http://127.0.0.1:1,node3=http://127.0.0.1:2"},
                         env={})


async def _hello(client: TestClient, w: _Waiting, node: str) -> int:
    headers = sign(SECRET, node, "node1", "POST", HELLO_PATH, b"", time.time(), w.verifier.boot)
    resp = await client.post(HELLO_PATH, data=b"", headers=headers)
    if resp.status == 200:
        assert msgpack.unpackb(await resp.read())["state"] == "waiting"
    return resp.status


async def test_a_hello_from_a_silent_member_wakes_the_probe_loop() -> None:
    w = _Waiting(_settings())  # type: ignore[arg-type]
    w.silent = {"node2"}
    async with TestClient(TestServer(_waiting_app(w))) as client:
        assert await _hello(client, w, "node3") == 200  # it answered before: nothing new
        assert not w.asked.is_set()
        assert await w.pause(0.01) is False
        assert await _hello(client, w, "node2") == 200  # it was silent: it has just started
        assert w.asked.is_set()
        began = time.monotonic()
        assert await w.pause(30) is True and time.monotonic() - began < 1
        assert not w.asked.is_set() and w.silent == set()
        assert await _hello(client, w, "node2") == 200  # once: it is no longer silent
        assert not w.asked.is_set()


async def test_an_unsigned_hello_wakes_nothing() -> None:
    w = _Waiting(_settings())  # type: ignore[arg-type]
    w.silent = {"node2"}
    async with TestClient(TestServer(_waiting_app(w))) as client:
        resp = await client.post(HELLO_PATH, data=b"", headers={"X-AIM-Node": "node2"})
        assert resp.status == 401
        assert not w.asked.is_set()
