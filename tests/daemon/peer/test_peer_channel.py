"""The peer channel (daemon/peer/channel.py): batches as WebSocket frames.

The upgrade is refused unless signed like any peer request; every frame is
tagged, so an altered, replayed or reordered frame closes the channel; a
refused batch is answered for that frame only; the client matches answers by
id, gives up on a silent channel after its timeout and opens a new one, and
falls back to plain HTTP for a peer that does not serve the route."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import msgpack
import pytest
from aiohttp import web

from common import limits
from daemon.api.app import build_app
from daemon.peer.auth import BOOT_HEADER, sign
from daemon.peer.channel import (
    LINK_PATH,
    TO_CLIENT,
    TO_SERVER,
    ChannelError,
    FrameSeal,
    channel_key,
)
from daemon.peer.client import PeerClient, PeerUnreachable
from daemon.settings import ClusterSettings, Member, Settings, StoreSettings
from daemon.wiring import build_node
from federation.messages import PROTOCOL_VERSION, SyncOffer

SECRET = "s3cret-for-channel-tests"


# -- frames -------------------------------------------------------------------

def test_a_sealed_frame_opens_on_the_other_end_in_order() -> None:
    key = channel_key(SECRET, "sig")
    out, into = FrameSeal(key, TO_SERVER), FrameSeal(key, TO_SERVER)
    frames = [out.seal(b"one"), out.seal(b"two"), out.seal(b"")]
    assert [into.open(f) for f in frames] == [b"one", b"two", b""]


@pytest.mark.parametrize("case", ["altered", "replayed", "reordered", "truncated",
                                  "other-direction", "other-channel"])
def test_a_frame_that_is_not_the_next_one_sent_fails_its_tag(case: str) -> None:
    key = channel_key(SECRET, "sig")
    out, into = FrameSeal(key, TO_SERVER), FrameSeal(key, TO_SERVER)
    first, second = out.seal(b"first"), out.seal(b"second")
    if case == "altered":
        bad = bytes([first[0] ^ 1]) + first[1:]
    elif case == "replayed":
        into.open(first)
        bad = first
    elif case == "reordered":
        bad = second
    elif case == "truncated":
        bad = first[:5]
    elif case == "other-direction":
        bad = FrameSeal(key, TO_CLIENT).seal(b"first")
    else:
        bad = FrameSeal(channel_key(SECRET, "another upgrade"), TO_SERVER).seal(b"first")
    with pytest.raises(ChannelError):
        into.open(bad)


def test_without_a_secret_frames_carry_no_tag() -> None:
    assert channel_key(None, "sig") is None
    seal = FrameSeal(None, TO_SERVER)
    assert seal.seal(b"x") == b"x" and seal.open(b"x") == b"x"


def test_every_upgrade_signature_gives_its_own_key() -> None:
    assert channel_key(SECRET, "a") != channel_key(SECRET, "b")
    assert channel_key(SECRET, "a") != channel_key("other", "a")


# -- a real node's end ----------------------------------------------------------

@pytest.fixture
async def secured(tmp_path: Path, aiohttp_client):  # type: ignore[no-untyped-def]
    settings = Settings(store=StoreSettings(db_path=str(tmp_path / "n.db")), cluster=ClusterSettings(
        node_id="node1", secret=SECRET,
        peers=(Member("node2", "http://127.0.0.1:9"), Member("node3", "http://127.0.0.1:9")),
        initial_state="new"))
    node = await build_node(settings)
    await node.start()
    try:
        yield await aiohttp_client(build_app(node))
    finally:
        await node.stop()


def upgrade_headers(boot: str, **kw) -> dict[str, str]:  # type: ignore[no-untyped-def]
    args = {"secret": SECRET, "node": "node2", "to": "node1", "method": "GET",
            "path": LINK_PATH, "body": b"", "now_s": time.time(), "boot": boot, **kw}
    return {"X-AIM-Protocol": str(PROTOCOL_VERSION), **sign(**args)}


async def boot_of(client) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.ws_connect(LINK_PATH, headers=upgrade_headers(""))
    assert refused.value.status == 401
    return refused.value.headers[BOOT_HEADER]


def offer() -> list:  # type: ignore[type-arg]
    return [SyncOffer({}, "x").to_wire()]


async def open_channel(client):  # type: ignore[no-untyped-def]
    headers = upgrade_headers(await boot_of(client))
    ws = await client.ws_connect(LINK_PATH, headers=headers)
    key = channel_key(SECRET, headers["X-AIM-Sig"])
    return ws, FrameSeal(key, TO_SERVER), FrameSeal(key, TO_CLIENT)


async def test_a_signed_upgrade_opens_a_channel_that_answers_frames_by_id(secured) -> None:  # type: ignore[no-untyped-def]
    ws, out, into = await open_channel(secured)
    for fid in (7, 8):
        await ws.send_bytes(out.seal(msgpack.packb([fid, offer()])))
        answer = msgpack.unpackb(into.open((await ws.receive(timeout=5)).data))
        assert answer[0] == fid and isinstance(answer[1], list) and len(answer) == 2
    await ws.close()


@pytest.mark.parametrize("case", ["unsigned", "wrong-secret", "wrong-boot", "replayed",
                                  "non-member", "signed-for-another-path"])
async def test_bad_upgrades_are_refused(secured, case) -> None:  # type: ignore[no-untyped-def]
    boot = await boot_of(secured)
    if case == "unsigned":
        headers = {"X-AIM-Node": "node2"}
    elif case == "wrong-secret":
        headers = upgrade_headers(boot, secret="guess")
    elif case == "wrong-boot":
        headers = upgrade_headers("0" * 32)
    elif case == "replayed":
        headers = upgrade_headers(boot)
        ws = await secured.ws_connect(LINK_PATH, headers=headers)
        await ws.close()
    elif case == "non-member":
        headers = upgrade_headers(boot, node="mallory")
    else:
        headers = upgrade_headers(boot, path="/peer/v1/msgs")
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await secured.ws_connect(LINK_PATH, headers=headers)
    assert refused.value.status in (401, 403)


@pytest.mark.parametrize("case", ["bad-tag", "replayed", "not-a-pair", "not-msgpack", "text"])
async def test_a_bad_frame_closes_the_channel(secured, case) -> None:  # type: ignore[no-untyped-def]
    ws, out, into = await open_channel(secured)
    good = out.seal(msgpack.packb([1, offer()]))
    if case == "bad-tag":
        await ws.send_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    elif case == "replayed":
        await ws.send_bytes(good)
        assert msgpack.unpackb(into.open((await ws.receive(timeout=5)).data))[0] == 1
        await ws.send_bytes(good)
    elif case == "not-a-pair":
        await ws.send_bytes(out.seal(msgpack.packb({"id": 1})))
    elif case == "not-msgpack":
        await ws.send_bytes(out.seal(b"\xc1\xc1"))
    else:
        await ws.send_str("hello")
    msg = await ws.receive(timeout=5)
    assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)


async def test_a_refused_batch_is_answered_for_its_frame_and_the_channel_stays(secured) -> None:  # type: ignore[no-untyped-def]
    ws, out, into = await open_channel(secured)
    await ws.send_bytes(out.seal(msgpack.packb([1, {"not": "a list"}])))
    assert msgpack.unpackb(into.open((await ws.receive(timeout=5)).data)) == [1, None, 400]
    await ws.send_bytes(out.seal(msgpack.packb([2, [["rep", "not ops", True]]])))
    assert msgpack.unpackb(into.open((await ws.receive(timeout=5)).data)) == [2, None, 400]
    await ws.send_bytes(out.seal(msgpack.packb([3, offer()])))
    assert msgpack.unpackb(into.open((await ws.receive(timeout=5)).data))[0] == 3
    await ws.close()


# -- the client -------------------------------------------------------------------

def client_for(url: str, secret: str | None = SECRET) -> PeerClient:
    return PeerClient("node2", {"node1": url}, secret, now_s=time.time)


async def test_the_client_sends_batches_on_one_channel_and_learns_the_boot(secured) -> None:  # type: ignore[no-untyped-def]
    peers = client_for(str(secured.make_url("")).rstrip("/"))
    await peers.start()
    try:
        got = await asyncio.gather(*(peers.call("node1", "/peer/v1/msgs", offer())
                                     for _ in range(20)))
        assert all(isinstance(g, list) for g in got)
        assert peers.channels is not None
        first = peers.channels._channels["node1"]
        await peers.call("node1", "/peer/v1/msgs", offer())
        assert peers.channels._channels["node1"] is first and not first.closed
    finally:
        await peers.close()


async def test_a_channel_is_counted_when_it_closes_and_not_timed_as_a_request(secured) -> None:  # type: ignore[no-untyped-def]
    from daemon.http.appkeys import NODE

    metrics = secured.server.app[NODE].metrics
    peers = client_for(str(secured.make_url("")).rstrip("/"))
    await peers.start()
    try:
        await peers.call("node1", "/peer/v1/msgs", offer())
    finally:
        await peers.close()
    for _ in range(100):  # the server's end sees the close a moment later
        if metrics.counters["websockets_closed_total"]:
            break
        await asyncio.sleep(0.02)
    assert dict(metrics.counters["websockets_closed_total"]) == {(("route", LINK_PATH),): 1}
    # Timed: only the refused first upgrade (the boot learned from its 401),
    # not the channel's life.
    rows = [row for labels, row in metrics.hists["http_request_seconds"].items()
            if dict(labels).get("route") == LINK_PATH]
    assert [sum(row[:-1]) for row in rows] == [1]


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def test_a_peer_without_the_channel_gets_plain_http() -> None:
    posts = []

    async def msgs(request: web.Request) -> web.Response:
        posts.append(await request.read())
        return web.Response(body=msgpack.packb(["reply"]), content_type="application/msgpack")

    app = web.Application()
    app.router.add_post("/peer/v1/msgs", msgs)  # an older version: no /peer/v1/link
    runner, url = await _serve(app)
    peers = client_for(url, secret=None)
    await peers.start()
    try:
        assert await peers.call("node1", "/peer/v1/msgs", offer()) == ["reply"]
        assert await peers.call("node1", "/peer/v1/msgs", offer()) == ["reply"]
        assert len(posts) == 2
        assert peers.channels is not None and "node1" not in peers.channels._channels
        assert peers.channels._plain_until["node1"] > time.monotonic() + (
            limits.peer_channel_retry_secs - 5)
    finally:
        await peers.close()
        await runner.cleanup()


async def test_a_silent_channel_times_out_closes_and_is_opened_again() -> None:
    opened = []

    async def link(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        opened.append(ws)
        answer = len(opened) > 1  # the first channel reads frames and never answers
        async for msg in ws:
            fid, _ = msgpack.unpackb(msg.data)
            if answer:
                await ws.send_bytes(msgpack.packb([fid, ["ok"]]))
        return ws

    app = web.Application()
    app.router.add_get(LINK_PATH, link)
    runner, url = await _serve(app)
    peers = client_for(url, secret=None)
    await peers.start()
    try:
        started = time.monotonic()
        with pytest.raises(PeerUnreachable) as failed:
            await peers.call("node1", "/peer/v1/msgs", offer(), timeout_s=0.3)
        assert failed.value.reason == "timeout" and time.monotonic() - started < 2
        assert await peers.call("node1", "/peer/v1/msgs", offer(), timeout_s=2) == ["ok"]
        assert len(opened) == 2
    finally:
        await peers.close()
        await runner.cleanup()


async def test_a_channel_that_drops_fails_every_waiting_exchange() -> None:
    async def link(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        seen = 0
        async for _ in ws:
            seen += 1
            if seen == 3:
                break  # three frames in flight, then the peer goes away
        await ws.close()
        return ws

    app = web.Application()
    app.router.add_get(LINK_PATH, link)
    runner, url = await _serve(app)
    peers = client_for(url, secret=None)
    await peers.start()
    try:
        got = await asyncio.gather(*(peers.call("node1", "/peer/v1/msgs", offer(), timeout_s=5)
                                     for _ in range(3)), return_exceptions=True)
        assert all(isinstance(g, PeerUnreachable) and g.reason == "unreachable" for g in got)
    finally:
        await peers.close()
        await runner.cleanup()


async def test_an_upgrade_signed_for_an_old_boot_learns_the_new_one_and_opens(secured) -> None:  # type: ignore[no-untyped-def]
    peers = client_for(str(secured.make_url("")).rstrip("/"))
    peers._boots["node1"] = "0" * 32  # as after the receiver restarted
    await peers.start()
    try:
        assert isinstance(await peers.call("node1", "/peer/v1/msgs", offer()), list)
        assert peers._boots["node1"] == await boot_of(secured)
        assert peers.channels is not None and "node1" in peers.channels._channels
        wrong = client_for(str(secured.make_url("")).rstrip("/"), secret="wrong-secret")
        await wrong.start()
        try:
            with pytest.raises(PeerUnreachable, match="rejected"):
                await wrong.call("node1", "/peer/v1/msgs", offer())
        finally:
            await wrong.close()
    finally:
        await peers.close()


async def test_callers_waiting_for_one_open_share_it_and_fail_together() -> None:
    connections = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)  # accepts and never answers the upgrade (a blackhole)
        await reader.read(-1)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    peers = client_for(f"http://127.0.0.1:{port}", secret=None)
    await peers.start()
    try:
        started = time.monotonic()
        got = await asyncio.gather(*(peers.call("node1", "/peer/v1/msgs", offer(), timeout_s=0.3)
                                     for _ in range(4)), return_exceptions=True)
        assert all(isinstance(g, PeerUnreachable) and g.reason == "timeout" for g in got)
        assert time.monotonic() - started < 1.0  # together, not one open after another
        assert len(connections) == 1
    finally:
        await peers.close()
        for w in connections:
            w.close()
        server.close()


async def test_an_unhashable_tag_is_skipped_not_a_server_error(secured) -> None:  # type: ignore[no-untyped-def]
    ws, out, into = await open_channel(secured)
    await ws.send_bytes(out.seal(msgpack.packb([1, [[[1]], {"a": 1}]])))
    assert msgpack.unpackb(into.open((await ws.receive(timeout=5)).data)) == [1, []]
    await ws.close()


async def test_shutdown_answers_the_frames_being_served_then_closes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from daemon.api import peer as peer_api

    settings = Settings(store=StoreSettings(db_path=str(tmp_path / "n.db")), cluster=ClusterSettings(
        node_id="node1", secret=SECRET,
        peers=(Member("node2", "http://127.0.0.1:9"), Member("node3", "http://127.0.0.1:9")),
        initial_state="new"))
    node = await build_node(settings)
    await node.start()
    real = peer_api.service.receive

    async def slow(*args, **kwargs):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.5)  # a batch still being served when shutdown begins
        return await real(*args, **kwargs)

    monkeypatch.setattr(peer_api.service, "receive", slow)
    runner, url = await _serve(build_app(node))
    try:
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(url + LINK_PATH, headers=upgrade_headers(""))
            headers = upgrade_headers(refused.value.headers[BOOT_HEADER])
            ws = await http.ws_connect(url + LINK_PATH, headers=headers)
            key = channel_key(SECRET, headers["X-AIM-Sig"])
            out, into = FrameSeal(key, TO_SERVER), FrameSeal(key, TO_CLIENT)
            await ws.send_bytes(out.seal(msgpack.packb([5, offer()])))
            await asyncio.sleep(0.1)
            closing = asyncio.create_task(runner.cleanup())
            answer = await ws.receive(timeout=5)
            assert answer.type == aiohttp.WSMsgType.BINARY
            assert msgpack.unpackb(into.open(answer.data))[0] == 5
            assert (await ws.receive(timeout=5)).type in (aiohttp.WSMsgType.CLOSE,
                                                           aiohttp.WSMsgType.CLOSED)
            await closing
    finally:
        await node.stop()


async def test_a_channel_serves_a_bounded_number_of_frames_at_once(
        secured, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from daemon.api import peer as peer_api

    monkeypatch.setattr(limits, "peer_channel_frames_serving_max", 3)
    real = peer_api.service.receive
    serving, most = 0, 0
    release = asyncio.Event()

    async def held(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal serving, most
        serving += 1
        most = max(most, serving)
        try:
            await release.wait()
            return await real(*args, **kwargs)
        finally:
            serving -= 1

    monkeypatch.setattr(peer_api.service, "receive", held)
    ws, out, into = await open_channel(secured)
    for fid in range(10):
        await ws.send_bytes(out.seal(msgpack.packb([fid, offer()])))
    deadline = time.monotonic() + 5
    while serving < 3:
        assert time.monotonic() < deadline, f"only {serving} frames served within 5 s"
        await asyncio.sleep(0.01)
    # Every frame was sent before the third began to be served: without the
    # bound a fourth would start within this grace and show in ``most``.
    await asyncio.sleep(0.1)
    assert (serving, most) == (3, 3)  # the rest wait, unread
    release.set()
    answered = set()
    for _ in range(10):
        answer = msgpack.unpackb(into.open((await ws.receive(timeout=5)).data))
        assert isinstance(answer[1], list)
        answered.add(answer[0])
    assert answered == set(range(10)) and most == 3
    await ws.close()


async def test_a_body_too_large_for_the_receiver_fails_alone_and_the_channel_stays(
        secured, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    peers = client_for(str(secured.make_url("")).rstrip("/"))
    await peers.start()
    try:
        await peers.call("node1", "/peer/v1/msgs", offer())
        assert peers.channels is not None
        first = peers.channels._channels["node1"]
        monkeypatch.setattr(limits, "peer_body_max_bytes", 1_000)
        with pytest.raises(PeerUnreachable) as refused:
            await peers.call("node1", "/peer/v1/msgs", [SyncOffer({"x" * 2_000: 1}, "x").to_wire()])
        assert refused.value.reason == "rejected (413)"
        assert await peers.call("node1", "/peer/v1/msgs", offer()) is not None
        assert peers.channels._channels["node1"] is first and not first.closed
    finally:
        await peers.close()
