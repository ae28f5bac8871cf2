"""Peer endpoints refuse unsigned, forged, stale, misaddressed and replayed
requests when a cluster secret is configured, and refuse non-members; the
signature is checked before the body is read."""

from __future__ import annotations

import time
from pathlib import Path

import msgpack
import pytest

from daemon.api.app import build_app
from daemon.peer.auth import BOOT_HEADER, sign
from daemon.peer.client import PeerClient, PeerUnreachable
from daemon.settings import ClusterSettings, Member, Settings, StoreSettings
from daemon.wiring import build_node
from federation.messages import PROTOCOL_VERSION, SyncOffer

SECRET = "s3cret-for-tests"
PATH = "/peer/v1/msgs"


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


def body() -> bytes:
    return msgpack.packb([SyncOffer({}, "x").to_wire()], use_bin_type=True)


async def post(client, headers, data: bytes | None = None):  # type: ignore[no-untyped-def]
    return await client.post(PATH, data=body() if data is None else data,
                             headers={"Content-Type": "application/msgpack", **headers})


async def boot_of(client) -> str:  # type: ignore[no-untyped-def]
    """The receiver's boot id, learned the way a peer learns it."""
    r = await post(client, sign(SECRET, "node2", "node1", "POST", PATH, body(), time.time()))
    assert r.status == 401 and (await r.json())["code"] == "peer_boot_mismatch"
    return r.headers[BOOT_HEADER]


def signed(boot: str, **kw) -> dict[str, str]:  # type: ignore[no-untyped-def]
    args = {"secret": SECRET, "node": "node2", "to": "node1", "method": "POST", "path": PATH,
            "body": body(), "now_s": time.time(), "boot": boot, **kw}
    return sign(**args)


async def test_signed_request_from_a_member_is_accepted(secured) -> None:  # type: ignore[no-untyped-def]
    r = await post(secured, signed(await boot_of(secured)))
    assert r.status == 200


@pytest.mark.parametrize("case", ["unsigned", "wrong-secret", "stale", "tampered", "non-member",
                                  "wrong-receiver", "retargeted", "wrong-boot", "wrong-path"])
async def test_bad_peer_requests_are_refused(secured, case) -> None:  # type: ignore[no-untyped-def]
    boot = await boot_of(secured)
    data = None
    if case == "unsigned":
        headers = {"X-AIM-Node": "node2"}
    elif case == "wrong-secret":
        headers = signed(boot, secret="guess")
    elif case == "stale":
        headers = signed(boot, now_s=time.time() - 3600)
    elif case == "tampered":  # same length, other bytes: the signed digest does not match
        headers = signed(boot)
        data = bytes(b ^ 1 for b in body())
    elif case == "non-member":
        headers = signed(boot, node="mallory")
    elif case == "wrong-receiver":  # signed for node3, sent to node1
        headers = signed(boot, to="node3")
    elif case == "retargeted":  # signed for node3, To header rewritten
        headers = {**signed(boot, to="node3"), "X-AIM-To": "node1"}
    elif case == "wrong-boot":
        headers = signed("0" * 32)
    else:
        headers = signed(boot, path="/peer/v1/pull")
    r = await post(secured, headers, data)
    assert r.status in (401, 403), case
    err = await r.json()
    assert err["error"] and err["code"]
    if case != "tampered":  # refused from the headers: answered, then the connection dropped
        assert r.headers.get("Connection", "").lower() == "close"


async def test_wrong_receiver_names_the_receiver(secured) -> None:  # type: ignore[no-untyped-def]
    r = await post(secured, signed(await boot_of(secured), to="node3"))
    assert r.status == 401 and "'node3'" in (await r.json())["error"]
    assert BOOT_HEADER not in r.headers  # the boot id goes only to a valid MAC


async def test_replayed_request_is_refused(secured) -> None:  # type: ignore[no-untyped-def]
    headers = signed(await boot_of(secured))
    assert (await post(secured, headers)).status == 200
    r = await post(secured, headers)
    assert r.status == 401 and "replayed" in (await r.json())["error"]


async def test_signed_body_needs_a_content_length(secured) -> None:  # type: ignore[no-untyped-def]
    async def chunks():  # type: ignore[no-untyped-def]
        yield body()
    r = await secured.post(PATH, data=chunks(), headers={
        "Content-Type": "application/msgpack", **signed(await boot_of(secured))})
    assert r.status == 400 and "Content-Length" in (await r.json())["error"]


async def test_peer_client_learns_the_boot_id_and_retries_once(secured) -> None:  # type: ignore[no-untyped-def]
    url = str(secured.make_url("")).rstrip("/")
    pc = PeerClient("node2", {"node1": url}, SECRET, now_s=time.time)
    pc.channels = None  # plain HTTP requests (the channel's upgrade: test_peer_channel.py)
    await pc.start()
    try:
        assert await pc.call("node1", PATH, [SyncOffer({}, "x").to_wire()]) == []
        learned = pc._boots["node1"]
        assert await pc.call("node1", PATH, [SyncOffer({}, "x").to_wire()]) == []
        assert pc._boots["node1"] == learned
        pc._boots["node1"] = "stale-boot"  # as after a receiver restart
        assert await pc.call("node1", PATH, [SyncOffer({}, "x").to_wire()]) == []
        assert pc._boots["node1"] == learned
        bad = PeerClient("node2", {"node1": url}, "wrong-secret", now_s=time.time)
        await bad.start()
        try:
            with pytest.raises(PeerUnreachable, match="rejected"):
                await bad.call("node1", PATH, [SyncOffer({}, "x").to_wire()])
            assert "node1" not in bad._boots
        finally:
            await bad.close()
    finally:
        await pc.close()


def test_an_evicted_nonce_cannot_be_replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    from common import limits
    from daemon.peer.auth import Verifier

    monkeypatch.setattr(limits, "auth_nonce_cache_max", 3)
    v = Verifier(SECRET, "node1", boot="b")
    now = time.time()
    sent = [sign(SECRET, "node2", "node1", "POST", PATH, body(), now + i / 1000, "b")
            for i in range(5)]
    for h in sent:
        v.verify_headers(h, "POST", PATH, len(body()), now)
    # the first two fell out of the cache; their timestamps are below node2's floor now
    for h in sent:
        with pytest.raises(Exception, match="replayed"):
            v.verify_headers(h, "POST", PATH, len(body()), now)
    # a fresh request from node2 and requests from other senders still pass
    v.verify_headers(sign(SECRET, "node2", "node1", "POST", PATH, body(), now + 1, "b"),
                     "POST", PATH, len(body()), now)
    v.verify_headers(sign(SECRET, "node3", "node1", "POST", PATH, body(), now - 60, "b"),
                     "POST", PATH, len(body()), now)


async def test_unknown_message_tags_are_skipped_and_old_protocols_refused(  # type: ignore[no-untyped-def]
        secured) -> None:
    from common.ops import NOTE_NEW, Op, inbox_key
    from federation.messages import Replicate

    op = Op(origin="node2", seq=1, hlc=5, kind=NOTE_NEW, key=inbox_key("bob"),
            body={"id": "n-1", "from": "alice", "to": "bob", "namespace": None, "title": "t",
                  "payload": "p", "priority": 5, "tier": "mid", "created_at_ms": 1,
                  "expires_at_ms": None})
    raw = msgpack.packb([["from.the.future", 1, 2], Replicate((op,), ack=True).to_wire()],
                        use_bin_type=True)
    headers = {"Content-Type": "application/msgpack", "X-AIM-Protocol": str(PROTOCOL_VERSION + 1),
               **sign(SECRET, "node2", "node1", "POST", "/peer/v1/msgs", raw, time.time(),
                        await boot_of(secured))}
    r = await secured.post("/peer/v1/msgs", data=raw, headers=headers)
    assert r.status == 200 and r.headers["X-AIM-Protocol"] == str(PROTOCOL_VERSION)
    replies = msgpack.unpackb(await r.read(), raw=False)
    assert replies and replies[0][0] == "ack"  # the known message in the batch was served
    metrics = await (await secured.get("/api/v1/metrics")).text()
    assert 'ai_memory_peer_messages_unknown_total{peer="node2"} 1' in metrics
    status = await (await secured.get("/api/v1/cluster/status")).json()
    assert status["peer_protocols"] == {"node2": PROTOCOL_VERSION + 1}
    assert status["protocol"] == PROTOCOL_VERSION
    old = {"Content-Type": "application/msgpack", "X-AIM-Protocol": "0",
           **sign(SECRET, "node2", "node1", "POST", "/peer/v1/msgs", body(), time.time(),
                  await boot_of(secured))}
    r = await secured.post("/peer/v1/msgs", data=body(), headers=old)
    assert r.status == 400 and "older than the oldest" in (await r.json())["error"]
