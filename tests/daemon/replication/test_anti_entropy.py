"""Anti-entropy pushes from a real store: batches bounded in ops and in
bytes, and a push that ends with what the node held when it began."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgpack

from common import ops as K
from common.ops import Op
from daemon.peer.client import PeerUnreachable
from daemon.replication.anti_entropy import Pusher
from daemon.runtime.metrics import Metrics
from federation.messages import decode_msg
from store.db import Store


def _big(seq: int, size: int = 10_000, origin: str = "a") -> Op:
    return Op(origin, seq, seq, K.MEM_PUT, K.mem_key(f"{origin}{seq}"),
              {"id": f"{origin}{seq}", "content": "x" * size})


class RecordingPeers:
    """The peer seam: records each push's ops and packed size; ``during``
    runs once, while the first push is out."""

    def __init__(self, during: Any = None, fail_at: int | None = None,
                 every: bool = False) -> None:
        self.sizes: list[int] = []
        self.seqs: list[list[int]] = []
        self.ids: list[tuple[str, int]] = []
        self.during = during
        self.fail_at = fail_at
        self.every = every  # run ``during`` while every push is out, not only the first

    async def call_from(self, peer: str, path: str, payload: Any, **_: Any) -> tuple[Any, str]:
        if self.fail_at is not None and len(self.sizes) == self.fail_at:
            raise PeerUnreachable(peer, "unreachable")
        self.sizes.append(len(msgpack.packb(payload, use_bin_type=True)))
        ops = [op for m in payload for op in decode_msg(m).ops]
        self.seqs.append([op.seq for op in ops])
        self.ids += [op.op_id for op in ops]
        if self.during is not None:
            during = self.during
            if not self.every:
                self.during = None
            await during()
        return [], ""


async def _push(store: Store, peers: RecordingPeers, vv: dict[str, int]) -> list[str]:
    failed: list[str] = []

    async def on_failed(peer: str) -> None:
        failed.append(peer)

    async def on_replies(peer: str, replies: list[Any], incarnation: str) -> None:
        pass

    tasks: list[asyncio.Task[Any]] = []

    def spawn(coro: Any) -> asyncio.Task[Any]:
        tasks.append(asyncio.ensure_future(coro))
        return tasks[-1]

    pusher = Pusher(store=store, peers=peers, metrics=Metrics(),  # type: ignore[arg-type]
                    spawn=spawn, on_failed=on_failed, on_replies=on_replies)
    pusher.request("node2", vv)
    pusher.request("node2", vv)  # one push per peer at a time: this one is dropped
    assert len(tasks) == 1
    await asyncio.wait_for(tasks[0], 10)
    return failed


async def test_a_push_goes_in_batches_of_about_the_byte_budget(tmp_path: Path,
                                                               monkeypatch: Any) -> None:
    monkeypatch.setattr("common.limits.peer_batch_bytes_max", 50_000)
    store = await Store.open(tmp_path / "n.db", "node1")
    try:
        await store.apply_ops([_big(s) for s in range(1, 31)], 0)
        peers = RecordingPeers()
        assert await _push(store, peers, {"a": 2}) == []
        assert [s for batch in peers.seqs for s in batch] == list(range(3, 31))
        assert len(peers.seqs) == 6  # five ops of 10 KB reach 50 KB
        assert all(size <= 50_000 + 11_000 for size in peers.sizes), peers.sizes
    finally:
        await store.close()


async def test_a_push_ends_with_what_the_node_held_when_it_began(tmp_path: Path,
                                                                 monkeypatch: Any) -> None:
    monkeypatch.setattr("common.limits.peer_batch_bytes_max", 50_000)
    store = await Store.open(tmp_path / "n.db", "node1")
    try:
        await store.apply_ops([_big(s) for s in range(1, 11)], 0)

        async def more_writes() -> None:  # replicated on their own, not by this push
            await store.apply_ops([_big(s) for s in range(11, 41)], 0)

        peers = RecordingPeers(during=more_writes)
        assert await _push(store, peers, {}) == []
        assert [s for batch in peers.seqs for s in batch] == list(range(1, 11))
    finally:
        await store.close()


async def test_a_failed_push_reports_the_peer_and_stops(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr("common.limits.peer_batch_bytes_max", 50_000)
    store = await Store.open(tmp_path / "n.db", "node1")
    try:
        await store.apply_ops([_big(s) for s in range(1, 31)], 0)
        peers = RecordingPeers(fail_at=1)
        assert await _push(store, peers, {}) == ["node2"]
        assert peers.seqs == [[1, 2, 3, 4, 5]]
    finally:
        await store.close()


async def test_writes_meanwhile_to_an_earlier_origin_neither_ride_along_nor_hold_the_push_up(
        tmp_path: Path, monkeypatch: Any) -> None:
    # Origin "a" sorts first and takes 5 more writes while each batch is out;
    # without the push's target as an upper bound every batch would be new
    # "a" ops and origin "b" would wait for the writes to stop.
    monkeypatch.setattr("common.limits.peer_batch_bytes_max", 50_000)
    store = await Store.open(tmp_path / "n.db", "node1")
    try:
        await store.apply_ops([_big(s) for s in range(1, 11)], 0)
        await store.apply_ops([_big(s, origin="b") for s in range(1, 6)], 0)
        next_seq = [11]

        async def more_writes() -> None:
            await store.apply_ops([_big(s) for s in range(next_seq[0], next_seq[0] + 5)], 0)
            next_seq[0] += 5

        peers = RecordingPeers(during=more_writes, every=True)
        assert await _push(store, peers, {}) == []
        assert peers.ids == [("a", s) for s in range(1, 11)] + [("b", s) for s in range(1, 6)]
        assert store.max_seq("a") == next_seq[0] - 1 > 10  # the writes did happen
    finally:
        await store.close()


async def test_a_push_carries_the_ops_held_past_a_gap_of_an_origin(tmp_path: Path,
                                                                    monkeypatch: Any) -> None:
    # Origin "c" is held only above a gap (its watermark is still 0): those
    # ops are part of what the node holds, so they are part of the push's
    # target. The budget ends the first batch at "a"'s last op; a target of
    # the watermarks alone was met right there and "c" was never sent.
    monkeypatch.setattr("common.limits.peer_batch_bytes_max", 300)
    store = await Store.open(tmp_path / "n.db", "node1")
    try:
        await store.apply_ops([_big(s, 100) for s in (1, 2)], 0)
        await store.apply_ops([_big(s, 100, origin="c") for s in (3, 4)], 0)
        assert store.version_vector() == {"a": 2}
        assert store.max_seqs() == {"a": 2, "c": 4}
        peers = RecordingPeers()
        assert await _push(store, peers, {}) == []
        assert peers.seqs[0] == [1, 2]  # the budget's cut
        assert peers.ids == [("a", 1), ("a", 2), ("c", 3), ("c", 4)]
    finally:
        await store.close()


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _pusher(store: Store, peers: RecordingPeers, clock: _Clock, metrics: Metrics,
            tasks: list[asyncio.Task[Any]]) -> Pusher:
    async def on_failed(peer: str) -> None:
        pass

    async def on_replies(peer: str, replies: list[Any], incarnation: str) -> None:
        pass

    def spawn(coro: Any) -> asyncio.Task[Any]:
        tasks.append(asyncio.ensure_future(coro))
        return tasks[-1]

    return Pusher(store=store, peers=peers, metrics=metrics,  # type: ignore[arg-type]
                  spawn=spawn, on_failed=on_failed, on_replies=on_replies,
                  grace_s=0.5, horizon_s=4.0, clock=clock)


async def _settled(tasks: list[asyncio.Task[Any]]) -> None:
    await asyncio.wait_for(asyncio.gather(*tasks), 10)


async def test_a_peer_that_lacks_only_what_is_in_flight_to_it_gets_no_push(tmp_path: Path) -> None:
    # Under load a peer's offer (its durable vector) always trails the ops
    # still on their way to it; pushing those was most of anti-entropy's
    # traffic. A push waits until the peer lacks an op this node held
    # grace_s ago, which its next offer shows if the op really went missing.
    store = await Store.open(tmp_path / "n.db", "node1")
    try:
        await store.apply_ops([_big(s, 100) for s in range(1, 11)], 0)
        peers, clock, metrics, tasks = RecordingPeers(), _Clock(), Metrics(), []
        pusher = _pusher(store, peers, clock, metrics, tasks)
        pusher.request("node2", {"a": 10})  # the first request: no record to judge by, so it runs
        await _settled(tasks)
        assert peers.ids == []  # it lacked nothing

        clock.now += 0.2
        await store.apply_ops([_big(s, 100) for s in range(11, 16)], 0)  # on their way to node2
        clock.now += 0.8
        pusher.request("node2", {"a": 10})  # lacks 11-15, all taken in within the grace
        await _settled(tasks)
        assert peers.ids == [] and len(tasks) == 1
        assert 'sync_pushes_waited_total{peer="node2"} 1' in metrics.render()

        clock.now += 2.0  # its next offer: still without 11-15, which are old now
        pusher.request("node2", {"a": 10})
        await _settled(tasks)
        assert peers.ids == [("a", s) for s in range(11, 16)]
    finally:
        await store.close()


async def test_without_a_recent_record_a_lagging_peer_is_pushed_to_at_once(tmp_path: Path) -> None:
    # After a quiet spell with no request (a member down, nothing lagging),
    # the last record says nothing about what is in flight now: a member
    # coming back is pushed all it lacks on its first offer, as before.
    store = await Store.open(tmp_path / "n.db", "node1")
    try:
        await store.apply_ops([_big(s, 100) for s in range(1, 6)], 0)
        peers, clock, metrics, tasks = RecordingPeers(), _Clock(), Metrics(), []
        pusher = _pusher(store, peers, clock, metrics, tasks)
        pusher.request("node3", {"a": 5})
        await _settled(tasks)
        await store.apply_ops([_big(s, 100) for s in range(6, 31)], 0)  # while node3 was down
        clock.now += 60.0
        pusher.request("node3", {"a": 5})
        await _settled(tasks)
        assert peers.ids == [("a", s) for s in range(6, 31)]
        assert "sync_pushes_waited_total" not in metrics.render()
    finally:
        await store.close()


async def test_with_the_ticker_a_member_back_from_downtime_is_pushed_at_once_and_new_ops_wait(
        tmp_path: Path) -> None:
    # The ticker keeps a record about grace_s old however long no request
    # came: what a member missed while it was down is older than that, so
    # its first offer gets it all; what arrived within the grace waits.
    store = await Store.open(tmp_path / "n.db", "node1")
    try:
        peers, clock, metrics, tasks = RecordingPeers(), _Clock(), Metrics(), []
        pusher = _pusher(store, peers, clock, metrics, tasks)

        async def run_for(seconds: float) -> None:
            for _ in range(round(seconds / 0.02)):
                clock.now += 0.02
                pusher.tick()

        await store.apply_ops([_big(s, 100) for s in range(1, 21)], 0)  # node3 is down
        await run_for(30.0)
        await store.apply_ops([_big(s, 100) for s in range(21, 26)], 0)  # just now, on their way
        await run_for(0.1)
        pusher.request("node3", {"a": 20})  # lacks only 21-25: wait
        pusher.request("node2", {"a": 25})  # lacks nothing (the core would not even ask)
        await _settled(tasks)
        assert peers.ids == [] and 'sync_pushes_waited_total{peer="node3"} 1' in metrics.render()
        pusher.request("node3", {})  # back from downtime: lacks 1-20 too
        await _settled(tasks)
        assert peers.ids == [("a", s) for s in range(1, 26)]
        assert len(pusher._held) <= 64
    finally:
        await store.close()
