"""The directory's lease and cache, on a real store, with the read quorum
replaced by a counting stand-in and a hand-driven monotonic clock: a warm
key costs no peer round trip; a node without a lease reads a quorum before
it answers, and refuses (503) when it cannot; an applied revocation is
refused at once; a miss reads a quorum that started after the request."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from common.errors import DirectoryUnconfirmed, QuorumNotMet
from common.ops import APIKEY_PUT, IDENT_KEY, USER_PUT, Op
from daemon.identity.replicated_directory import ReplicatedDirectory
from daemon.identity.secrets import hash_secret, new_secret
from store.db import Store


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Barrier:
    def __init__(self, store: Store) -> None:
        self.calls = 0
        self.delay = 0.0
        self.fail = False
        self.deliver: list[Op] = []  # ops "a peer" hands over during the read
        self.store = store
        self.directory: ReplicatedDirectory | None = None

    async def __call__(self) -> None:
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise QuorumNotMet(1, 2, "unreachable")
        if self.deliver:
            new = await self.store.apply_ops(self.deliver, 0)
            self.deliver = []
            assert self.directory is not None
            self.directory.on_applied(new)


SEQ = iter(range(1, 10_000))


def op(kind: str, body: dict[str, object]) -> Op:
    return Op("n2", next(SEQ), 1000 + len(body), kind, IDENT_KEY, body)


def user_op(name: str, root: bool = False) -> Op:
    return op(USER_PUT, {"name": name, "root": root, "password_hash": None, "removed": False,
                         "created_at_ms": 1})


def key_op(secret: str, key_id: str, user: str, revoked: bool = False) -> Op:
    return op(APIKEY_PUT, {"id": key_id, "user": user, "agent": None, "label": None,
                           "hash": hash_secret(secret), "created_at_ms": 1, "revoked": revoked})


@pytest.fixture
async def parts(tmp_path: Path):  # type: ignore[no-untyped-def]
    store = await Store.open(tmp_path / "n.db", "n1")
    clock = Clock()
    barrier = Barrier(store)
    d = ReplicatedDirectory(lambda: store.reads, barrier, has_peers=True, monotonic=clock,
                            lease_ms=1000)
    barrier.directory = d
    try:
        yield store, clock, barrier, d
    finally:
        await store.close()


async def test_warm_keys_cost_no_round_trip_and_the_lease_renews_ahead(parts) -> None:  # type: ignore[no-untyped-def]
    store, clock, barrier, d = parts
    secret = new_secret()
    await store.apply_ops([user_op("u"), key_op(secret, "key_1", "u")], 0)
    assert (await d.resolve(secret)).user == "u"  # type: ignore[union-attr]
    assert barrier.calls == 1  # a fresh node reads a quorum first
    for _ in range(100):
        assert await d.resolve(secret) is not None
    assert barrier.calls == 1 and d.stats["hits"] == 100
    clock.t += 0.6  # past half the lease: renewed in the background, not in line
    assert await d.resolve(secret) is not None
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert barrier.calls == 2
    clock.t += 0.6  # within the renewed lease
    assert await d.resolve(secret) is not None and barrier.calls == 2


async def test_without_a_quorum_a_node_refuses_to_trust_its_copy(parts) -> None:  # type: ignore[no-untyped-def]
    store, clock, barrier, d = parts
    secret = new_secret()
    await store.apply_ops([user_op("u"), key_op(secret, "key_1", "u")], 0)
    assert await d.resolve(secret) is not None
    barrier.fail = True
    clock.t += 1.01  # the lease ran out (a pause, a partition)
    with pytest.raises(DirectoryUnconfirmed):
        await d.resolve(secret)
    barrier.fail = False
    assert await d.resolve(secret) is not None


async def test_an_applied_revocation_is_refused_at_once(parts) -> None:  # type: ignore[no-untyped-def]
    store, _clock, _barrier, d = parts
    secret = new_secret()
    await store.apply_ops([user_op("u"), key_op(secret, "key_1", "u")], 0)
    assert await d.resolve(secret) is not None
    d.on_applied(await store.apply_ops([key_op(secret, "key_1", "u", revoked=True)], 0))
    assert await d.resolve(secret) is None


async def test_a_key_this_node_lacks_is_fetched_by_a_quorum_read(parts) -> None:  # type: ignore[no-untyped-def]
    _store, _clock, barrier, d = parts
    secret = new_secret()
    assert await d.resolve(new_secret()) is None  # unknown: read a quorum, still unknown
    calls = barrier.calls
    barrier.deliver = [user_op("late"), key_op(secret, "key_9", "late")]
    got = await d.resolve(secret)  # the lease is fresh, but the key is not here yet
    assert got is not None and got.user == "late" and barrier.calls == calls + 1
    assert await d.resolve("not-a-directory-key") is None
    assert await d.resolve("aim_" + "x" * 200) is None


async def test_a_flood_of_unknown_keys_shares_quorum_reads(parts) -> None:  # type: ignore[no-untyped-def]
    _store, _clock, barrier, d = parts
    assert await d.resolve(new_secret()) is None  # lease taken
    barrier.calls, barrier.delay = 0, 0.05
    results = await asyncio.gather(*(d.resolve(new_secret()) for _ in range(50)))
    assert results == [None] * 50
    # one read for those that arrived first, one shared by all the others
    assert barrier.calls <= 2
    # and a key delivered by that shared read is found by a request that
    # arrived while an earlier read was running
    secret = new_secret()
    calls = barrier.calls
    first = asyncio.ensure_future(d.resolve(new_secret()))
    await asyncio.sleep(0.01)  # its read is running
    barrier.deliver = [user_op("q"), key_op(secret, "key_q", "q")]
    second = await d.resolve(secret)
    assert await first is None and second is not None and second.user == "q"
    assert barrier.calls == calls + 2  # the second waited for a read queued behind the first


def test_warm_resolve_cost(tmp_path: Path) -> None:
    """The figure docs/security.md quotes: a warm resolve, no peer involved."""
    async def run() -> float:
        store = await Store.open(tmp_path / "b.db", "n1")
        try:
            secret = new_secret()
            await store.apply_ops([user_op("u"), key_op(secret, "key_1", "u")], 0)

            async def no_peer() -> None:
                raise AssertionError("a warm resolve asked a peer")
            d = ReplicatedDirectory(lambda: store.reads, no_peer, has_peers=True,
                                    lease_ms=60_000)
            d._lease_until = time.monotonic() + 60  # as after a quorum read
            await d.resolve(secret)
            n = 2000
            start = time.perf_counter()
            for _ in range(n):
                await d.resolve(secret)
            return (time.perf_counter() - start) / n
        finally:
            await store.close()
    per_call = asyncio.run(run())
    print(f"warm resolve: {per_call * 1e6:.1f} us")
    assert per_call < 0.001
