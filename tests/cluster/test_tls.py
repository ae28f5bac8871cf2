"""TLS on every link, with real processes and real certificates: three
``serve --config`` nodes from ``cluster init --tls`` on 127.0.0.1, HTTPS for
clients, mutual TLS (and the peer channel over wss) between members."""

from __future__ import annotations

import asyncio
import signal
import ssl
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import msgpack
import pytest
from ai_memory import AiMemoryClient

from daemon.peer.auth import BOOT_HEADER, sign
from tests.cluster.harness import free_port
from tests.cluster.tls_harness import IDS, TlsTrio, cli, running, served_serial, signed_request

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture
def trio(tmp_path: Path) -> Iterator[TlsTrio]:
    with running(TlsTrio(tmp_path)) as t:
        yield t


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _inbox_titles(client: AiMemoryClient, agent: str) -> list[str]:
    return [m["title"] for m in client.inbox(agent_id=agent, unread_only=False)]


def test_sdk_notify_and_inbox_replicate_over_mutual_tls(trio: TlsTrio) -> None:
    alice, bob = _name("alice"), _name("bob")
    with AiMemoryClient(trio.url("node1"), agent_id=alice, verify=trio.context()) as a1:
        assert a1.health()["status"] == "ok"
        sent = a1.notify({"target_agent_id": bob, "title": "over tls", "payload": "hello"})
        assert sent["from"] == alice
    for nid in ("node2", "node3"):  # a quorum read crosses the peer links
        with AiMemoryClient(trio.url(nid), agent_id=bob, verify=trio.context()) as b:
            assert _inbox_titles(b, bob) == ["over tls"]
    trio.wait_converged()
    for nid in IDS:
        assert "serving on https://127.0.0.1" in trio.log(nid)
    assert any("peer channel open" in trio.log(nid) for nid in IDS)  # wss, not only https


def _peer_request(trio: TlsTrio, target: str, claimed: str, cert_of: str | None,
                  secret: str) -> tuple[int, str]:
    """A correctly signed POST /peer/v1/msgs to ``target`` from ``claimed``,
    over a connection presenting ``cert_of``'s member certificate."""
    return signed_request(trio, trio.url(target), "/peer/v1/msgs",
                          msgpack.packb([], use_bin_type=True), "application/msgpack",
                          claimed=claimed, target=target, cert_of=cert_of, secret=secret)


def test_a_peer_whose_certificate_names_another_member_is_refused(trio: TlsTrio) -> None:
    secret = tomllib.loads((trio.conf / "node1.toml").read_text())["cluster"]["secret"]
    # node2's own certificate, node2's signature: accepted
    assert _peer_request(trio, "node1", "node2", "node2", secret)[0] == 200
    # node3's certificate claiming to be node2: refused, signature or not
    code, text = _peer_request(trio, "node1", "node2", "node3", secret)
    assert code == 403 and "names member 'node3', not 'node2'" in text
    # no client certificate at all: refused
    code, text = _peer_request(trio, "node1", "node2", None, secret)
    assert code == 401 and "client certificate" in text

    async def channel(cert_of: str) -> int:
        try:
            return await open_channel(cert_of)
        finally:
            await asyncio.sleep(0.25)  # let the TLS transports finish closing

    async def open_channel(cert_of: str) -> int:
        ctx = trio.context()
        ctx.load_cert_chain(trio.conf / f"{cert_of}.crt", trio.conf / f"{cert_of}.key")
        async with aiohttp.ClientSession() as s:
            boot = ""
            for _ in range(2):
                headers = sign(secret, "node2", "node1", "GET", "/peer/v1/link", b"",
                               time.time(), boot)
                try:
                    async with s.ws_connect(trio.url("node1") + "/peer/v1/link",
                                            headers=headers, ssl=ctx):
                        return 101
                except aiohttp.WSServerHandshakeError as exc:
                    if exc.status == 401 and exc.headers and exc.headers.get(BOOT_HEADER) \
                            and not boot:
                        boot = exc.headers[BOOT_HEADER]
                        continue
                    return exc.status
        return 0

    assert asyncio.run(channel("node2")) == 101  # the peer channel, over wss
    assert asyncio.run(channel("node3")) == 403


def test_a_client_without_the_ca_fails_clearly_and_works_with_it(trio: TlsTrio) -> None:
    url = trio.url("node2")
    bare = cli("--url", url, "health")
    assert bare.returncode == 7, bare.stderr
    assert "cannot verify the TLS certificate of " + url in bare.stderr
    assert "--ca-cert" in bare.stderr and "AI_MEMORY_CA_CERT" in bare.stderr
    assert cli("--url", url, "--ca-cert", str(trio.ca), "health").returncode == 0
    env = {"AI_MEMORY_CA_CERT": str(trio.ca)}
    bob = _name("bob")
    sent = cli("--url", trio.url("node1"), "--agent-id", "alice", "notify", bob, "body",
               "--title", "cli over tls", env=env)
    assert sent.returncode == 0, sent.stderr
    # inbox --wait over the event stream (cli/stream.py), verified against the CA
    got = cli("--url", url, "--agent-id", bob, "inbox", "--wait", "--timeout", "20", env=env)
    assert got.returncode == 0 and "cli over tls" in got.stdout, got.stderr
    # an SDK client without the CA is refused by its own verification
    with AiMemoryClient(url, agent_id=bob) as sdk, pytest.raises(Exception) as err:
        sdk.health()
    assert "CERTIFICATE_VERIFY_FAILED" in repr(err.value) or "certificate" in repr(err.value)


def test_sighup_reloads_the_member_certificate(trio: TlsTrio) -> None:
    before = served_serial(trio.port("node1"), trio.ca)
    rotated = cli("tls", "rotate", "--dir", str(trio.conf), "--node", "node1")
    assert rotated.returncode == 0, rotated.stderr
    new = int(rotated.stdout.split("serial ")[1].split()[0], 16)
    assert new != before
    trio.signal("node1", signal.SIGHUP)
    deadline = time.monotonic() + 10
    while served_serial(trio.port("node1"), trio.ca) != new:
        assert time.monotonic() < deadline, trio.log("node1")[-2000:]
        time.sleep(0.1)
    assert trio.procs["node1"].poll() is None
    # peers keep replicating with node1 (new handshakes with its new certificate)
    bob = _name("bob")
    with AiMemoryClient(trio.url("node2"), agent_id="carol", verify=trio.context()) as c:
        c.notify({"target_agent_id": bob, "title": "after reload", "payload": "x"})
    with AiMemoryClient(trio.url("node1"), agent_id=bob, verify=trio.context()) as b:
        assert _inbox_titles(b, bob) == ["after reload"]
    trio.wait_converged()


def test_a_ca_rotation_keeps_the_cluster_replicating(trio: TlsTrio) -> None:
    old_ca = trio.ca.read_bytes()
    done = cli("tls", "rotate", "--dir", str(trio.conf), "--new-ca")
    assert done.returncode == 0, done.stderr
    for nid in IDS:  # the bundle (old + new CA) and new member certificates
        trio.signal(nid, signal.SIGHUP)
    bob = _name("bob")
    deadline = time.monotonic() + 30
    while True:  # the three reloads are not at one instant: retry until all trust both
        try:
            with AiMemoryClient(trio.url("node3"), agent_id="dave", verify=trio.context()) as c:
                c.notify({"target_agent_id": bob, "title": "rotated", "payload": "x"})
            break
        except Exception:
            assert time.monotonic() < deadline, trio.logs()
            time.sleep(0.2)
    with AiMemoryClient(trio.url("node1"), agent_id=bob, verify=trio.context()) as b:
        assert _inbox_titles(b, bob) == ["rotated"]
    # end of the rotation: only the new CA; a client that still has only the old one fails
    assert cli("tls", "rotate", "--dir", str(trio.conf), "--drop-old-ca").returncode == 0
    for nid in IDS:
        trio.signal(nid, signal.SIGHUP)
    old = trio.conf.parent / "old-ca.crt"
    old.write_bytes(old_ca)
    with pytest.raises(ssl.SSLCertVerificationError):
        served_serial(trio.port("node2"), old)
    with AiMemoryClient(trio.url("node2"), agent_id="erin", verify=trio.context()) as c:
        c.notify({"target_agent_id": bob, "title": "new ca only", "payload": "x"})
    with AiMemoryClient(trio.url("node3"), agent_id=bob, verify=trio.context()) as b:
        assert _inbox_titles(b, bob) == ["new ca only", "rotated"]
    trio.wait_converged()


def test_a_plaintext_peer_off_loopback_is_refused_at_start(tmp_path: Path) -> None:
    # Documentation addresses (TEST-NET-1): refused before anything is sent.
    # (The allowed path, with --insecure-plaintext-peers, is checked without
    # a process in tests/daemon/runtime/test_tls_units.py: a serving node would dial
    # its peers, and no test sends packets off this machine.)
    peers = "node2=http://192.0.2.7:9077,node3=http://192.0.2.8:9077"
    args = ["--quorum-peers", peers, "--cluster-secret", "s3cret"]
    refused = cli("serve", "--port", str(free_port()), "--db", str(tmp_path / "n.db"),
                  "--node-id", "node1", *args, timeout=30)
    assert refused.returncode == 2
    assert "refusing plaintext peer node2=http://192.0.2.7:9077" in refused.stderr
    assert "--insecure-plaintext-peers" in refused.stderr
    assert not (tmp_path / "n.db").exists()


def test_the_mcp_server_and_the_bridge_trust_the_cluster_ca(trio: TlsTrio) -> None:
    from common.errors import Unavailable
    from daemon.mcp.bridge import BridgeSettings, Upstream
    from daemon.mcp.node_client import NodeClient
    from daemon.mcp.settings import McpSettings

    url = trio.url("node3")

    async def mcp_health(ca: str | None) -> object:
        async with NodeClient(McpSettings(url=url, agent_id="mcp", ca_cert=ca)) as node:
            return await node.request("GET", "/api/v1/health")

    assert asyncio.run(mcp_health(str(trio.ca)))["status"] == "ok"  # type: ignore[index]
    with pytest.raises(Unavailable, match=r"cannot verify the TLS certificate.*--ca-cert"):
        asyncio.run(mcp_health(None))

    async def bridge_health(ca: str | None) -> int:
        up = Upstream(BridgeSettings(urls=(url,), ca_cert=ca))
        try:
            return (await up._http_for(url).get(url + "/api/v1/health")).status_code
        finally:
            await up.aclose()

    assert asyncio.run(bridge_health(str(trio.ca))) == 200
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        asyncio.run(bridge_health(None))
