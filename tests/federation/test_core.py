from __future__ import annotations

import random
import typing

import pytest

from common.errors import BadRequest, QuorumNotMet
from common.ops import NOTE_NEW, Op
from federation.core import NodeCore
from federation.effects import Collect, MembershipMismatch, Persist, PushMissing, Reply, Send
from federation.messages import Ack, Forward, ForwardResult, Message, Replicate, SyncOffer
from tests.federation.cluster import Cluster

NOTE = (NOTE_NEW, "inbox:bob", {"id": "n1", "from": "al", "to": "bob", "title": "t"})


def core(node: str = "a", members: tuple[str, ...] = ("a", "b", "c"), w: int = 2,
         **kw: object) -> NodeCore:
    args: dict[str, object] = dict(quorum_timeout_ms=100, claim_timeout_ms=100,
                                   catchup_interval_ms=50, vv={}, last_hlc=0, own_max_seq=0,
                                   promises={}, rng=random.Random(1))
    args.update(kw)
    return NodeCore(node, list(members), w, **args)  # type: ignore[arg-type]


def test_write_persists_then_sends_then_replies_at_quorum() -> None:
    c = core()
    effects = c.write("t", [NOTE], 1_000)
    assert isinstance(effects[0], Persist) and len(effects[0].ops) == 1
    op = effects[0].ops[0]
    assert (op.origin, op.seq, op.epoch) == ("a", 1, 0) and op.hlc >> 16 == 1_000
    sends = [e for e in effects[1:] if isinstance(e, Send)]
    assert {s.peer for s in sends} == {"b", "c"} and len(effects) == 3
    assert all(isinstance(s.msg, Replicate) and s.msg.ack for s in sends)
    assert c.vv == {"a": 1}
    [reply] = c.on_message("b", Ack((op.op_id,)), 1_001)
    assert reply == Reply("t", [op])


def test_write_fails_at_the_deadline_or_when_peers_fail() -> None:
    c = core()
    c.write("t1", [NOTE], 1_000)
    [reply] = c.tick(1_100)
    assert isinstance(reply.value, QuorumNotMet) and reply.value.details["reason"] == "timeout"
    c.write("t2", [NOTE], 2_000)
    assert c.on_send_failed("b", 2_001) == []
    [reply] = c.on_send_failed("c", 2_002)
    assert isinstance(reply.value, QuorumNotMet) and reply.value.details["reason"] == "unreachable"
    # A peer whose last send failed may be back: a new write still tries it.
    effects = c.write("t3", [NOTE], 2_010)
    assert not any(isinstance(e, Reply) for e in effects)
    c.on_send_failed("b", 2_011)
    [reply] = c.on_send_failed("c", 2_012)
    assert reply.token == "t3"


def test_mailbox_kinds_and_empty_writes() -> None:
    c = core()
    [reply] = c.write("t", [("msg.claim", "mbox:w/p", {"id": "x"})], 1)
    assert isinstance(reply.value, BadRequest)
    assert c.write("u", [], 1) == [Reply("u", [])]


def test_replicate_with_ack_persists_new_ops_and_acks_all() -> None:
    c = core("b")
    ops = (Op("a", 1, 5 << 16, NOTE_NEW, "inbox:x", {"id": "1"}),
           Op("a", 2, 6 << 16, NOTE_NEW, "inbox:x", {"id": "2"}))
    first = c.on_message("a", Replicate(ops[:1], ack=True), 1)
    assert first == [Persist(ops[:1]), Send("a", Ack((("a", 1),)))]
    again = c.on_message("a", Replicate(ops, ack=True), 2)
    assert again == [Persist(ops[1:]), Send("a", Ack((("a", 1), ("a", 2))))]
    assert c.on_message("a", Replicate(ops, ack=False), 3) == []
    assert c.vv == {"a": 2}
    assert c.hlc.last > 6 << 16  # the clock moved past what it observed


def test_sync_offer_pushes_what_the_peer_lacks_and_checks_membership() -> None:
    c = core()
    c.write("t", [NOTE], 10)
    fp = c.membership.fingerprint()
    assert c.on_message("b", SyncOffer({"a": 1}, fp), 20) == []
    assert c.on_message("b", SyncOffer({}, fp), 21) == [PushMissing("b", {})]
    [mm] = c.on_message("c", SyncOffer({}, "other"), 22)
    assert isinstance(mm, MembershipMismatch) and mm.ours == fp
    assert c.on_message("c", SyncOffer({}, "other"), 23) == []  # reported once
    # No data is taken from a peer with another membership.
    assert c.on_message("c", Replicate((Op("c", 1, 1, NOTE_NEW, "k", {"id": "z"}),), True), 24) == []
    assert c.status(25)["peers"]["c"]["membership_mismatch"]


def test_ticks_send_offers_and_collect_once_every_member_covers_a_prefix() -> None:
    c = core(gc_interval_ms=0)
    [persist, *_] = c.write("t", [NOTE], 10)
    assert isinstance(persist, Persist)
    c.on_persisted(persist.ops)  # the adapter reports the write durable
    offers = [e for e in c.tick(100) + c.tick(150) if isinstance(e, Send)]
    assert {e.peer for e in offers} == {"b", "c"}
    assert all(isinstance(e.msg, SyncOffer) and e.msg.vv == {"a": 1} for e in offers)
    fp = c.membership.fingerprint()
    c.on_message("b", SyncOffer({"a": 1, "b": 4}, fp), 110)
    assert not any(isinstance(e, Collect) for e in c.tick(120))  # c not heard yet
    c.on_message("c", SyncOffer({"a": 1}, fp), 130)
    assert [e for e in c.tick(140) if isinstance(e, Collect)] == [Collect({"a": 1})]
    assert not any(isinstance(e, Collect) for e in c.tick(150))  # nothing new


def test_offers_and_collection_count_only_durable_ops() -> None:
    """An op whose persist is still in flight is in ``vv`` but not offered
    and not collected: were every member to collect it while this node's
    write of it is pending, a crash before the write lands would lose it
    for good (the simulator's slow disks found this)."""
    c = core(gc_interval_ms=0)
    c.write("t", [NOTE], 10)
    assert c.vv == {"a": 1} and c.durable_vv == {}
    offers = [e for e in c.tick(100) + c.tick(150) if isinstance(e, Send)]
    assert offers and all(isinstance(e.msg, SyncOffer) and e.msg.vv == {} for e in offers)
    fp = c.membership.fingerprint()
    c.on_message("b", SyncOffer({"a": 1}, fp), 110)
    c.on_message("c", SyncOffer({"a": 1}, fp), 130)
    assert not any(isinstance(e, Collect) for e in c.tick(140))


def test_restart_continues_sequence_and_clock_from_the_store_state() -> None:
    c = core(vv={"a": 7, "b": 3}, own_max_seq=7, last_hlc=(5_000 << 16) + 3)
    [persist, *_] = c.write("t", [NOTE], 1_000)  # wall clock behind the store's max
    assert isinstance(persist, Persist)
    op = persist.ops[0]
    assert op.seq == 8 and op.hlc > (5_000 << 16) + 3


def test_owner_for_skips_members_that_seem_down() -> None:
    c = core(down_after_ms=100)
    key = "mbox:w/p"
    order = c.membership.rendezvous(key)
    assert c.owner_for(key, 0) == order[0]  # grace period at start
    c.tick(0)
    first_peer = next(m for m in order if m != "a")
    c.on_send_failed(first_peer, 10)
    expected = next(m for m in order if m != first_peer)
    assert c.owner_for(key, 20) == expected
    assert c.owner_for(key, 10_000) == "a"  # nobody heard for long: this node


def test_status_reports_the_cluster_view() -> None:
    c = core()
    c.write("t", [NOTE], 10)
    s = c.status(20)
    assert s["vv"] == {"a": 1} and s["writes_in_flight"] == 1 and s["reachable"] == 3
    assert set(s["peers"]) == {"b", "c"} and s["peers"]["b"]["vv"] is None
    assert s["majority"] == 2 and s["owned_mailboxes"] == {}


def test_invalid_write_quorum() -> None:
    with pytest.raises(ValueError):
        NodeCore("a", ["a", "b"], 3, quorum_timeout_ms=1, claim_timeout_ms=1,
                 catchup_interval_ms=1, vv={}, last_hlc=0, own_max_seq=0, promises={},
                 rng=random.Random(0))


def test_three_nodes_replicate_and_converge_by_anti_entropy() -> None:
    cl = Cluster()
    cl.call("n0", "write", 1, [NOTE])
    # n2 misses the replication entirely; n1 acks.
    cl.deliver(drop=lambda src, dst, msg: dst == "n2" or src == "n2")
    assert isinstance(cl.replies[1], list)
    assert ("n0", 1) not in cl.disks["n2"].seen
    for _ in range(3):
        cl.tick(500)
        cl.deliver()
    snaps = [d.snapshot() for d in cl.disks.values()]
    assert snaps[0] == snaps[1] == snaps[2]


def test_a_standalone_node_accepts_pushes_from_a_node_that_lists_it() -> None:
    solo = core("s", members=("s",), w=1)
    op = Op("x", 1, 5 << 16, NOTE_NEW, "inbox:x", {"id": "1"})
    assert solo.on_message("x", Replicate((op,), ack=True), 1) == []  # not a member
    assert solo.on_foreign_push("x", Replicate((op,), ack=True), 1) == [
        Persist((op,)), Send("x", Ack((("x", 1),)))]
    assert core().on_foreign_push("x", Replicate((op,), ack=True), 1) == []


def test_every_peer_message_has_a_handler_in_the_table() -> None:
    # SyncOffer is handled before the membership fence (on_message); Forward
    # and its result go between the daemons' mailbox routers, never to the core.
    handled = set(NodeCore._HANDLERS) | {SyncOffer}
    assert handled == set(typing.get_args(Message)) - {Forward, ForwardResult}
