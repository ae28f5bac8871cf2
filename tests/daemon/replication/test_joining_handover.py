"""The waiting app hands its port over to the node cleanly.

A TLS connection the waiting app accepted but whose handshake ended only
after the app was closed is still served by the waiting app: aiohttp counts
a connection when its handshake is done, so closing the app never closed
it. With keep-alive, a client polling ``/health`` through it heard
"waiting_for_peers" for good while the node served on the same port (a CI
failure of tests/deploy/test_three_hosts.py after the wipe). Now every
answer of the waiting app closes its connection: such a client hears one
stale answer, reconnects and reaches the node.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path

from aiohttp import web

from cli import pki
from daemon.replication.joining import WAITING_STATE, _Waiting, _waiting_app
from daemon.runtime import tls
from daemon.settings import load_settings
from tests.cluster.harness import free_port as below_ephemeral

SECRET = "s" * 32


def _free_port() -> int:
    """A free port below the kernel's ephemeral range (tests.cluster.harness.free_port):
    a client polling a port of that range nobody listens on yet can connect
    to itself."""
    return below_ephemeral()


def _answers(raw: socket.socket, ctx: ssl.SSLContext, rounds: int) -> list[bytes]:
    """Handshake on the accepted socket, then ask for health ``rounds`` times
    on it; each answer's head and body, until the server closes."""
    out: list[bytes] = []
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
        conn.settimeout(5)
        for _ in range(rounds):
            try:
                conn.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                data = conn.recv(65536)
            except (ConnectionError, ssl.SSLError):
                break
            if not data:
                break
            out.append(data)
    return out


async def test_a_connection_whose_handshake_ends_after_the_handover_is_closed(
        tmp_path: Path) -> None:
    pki.mint_cluster(tmp_path, [("node1", "127.0.0.1"), ("node2", "127.0.0.1")])
    port = _free_port()
    settings = load_settings({
        "node_id": "node1", "cluster_secret": SECRET, "host": "127.0.0.1", "port": port,
        "quorum_peers": "node2=https://127.0.0.1:1",
        "tls_cert": str(tmp_path / "node1.crt"), "tls_key": str(tmp_path / "node1.key"),
        "tls_ca": str(tmp_path / "ca.crt")}, env={})
    server_ctx = tls.server_context(settings)
    client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))

    waiting = web.AppRunner(_waiting_app(_Waiting(settings)), access_log=None)
    await waiting.setup()
    await web.TCPSite(waiting, "127.0.0.1", port, reuse_address=True,
                      ssl_context=server_ctx).start()
    raw = socket.create_connection(("127.0.0.1", port))  # accepted; no handshake yet
    await asyncio.sleep(0.2)
    await waiting.cleanup()

    async def serving(request: web.Request) -> web.Response:
        return web.json_response({"state": "serving"})

    node_app = web.Application()
    node_app.router.add_get("/api/v1/health", serving)
    node = web.AppRunner(node_app, access_log=None)
    await node.setup()
    await web.TCPSite(node, "127.0.0.1", port, reuse_address=True,
                      ssl_context=server_ctx).start()
    try:
        late = await asyncio.to_thread(_answers, raw, client_ctx, 3)
        # one stale answer at most, which says it closes the connection
        assert len(late) == 1, late
        assert WAITING_STATE.encode() in late[0]
        assert b"connection: close" in late[0].lower()
        # the client's next connection reaches the node
        fresh = await asyncio.to_thread(
            _answers, socket.create_connection(("127.0.0.1", port)), client_ctx, 2)
        assert len(fresh) == 2 and all(b'"serving"' in a for a in fresh), fresh
    finally:
        await node.cleanup()
