"""Batching a burst of messages to one peer (federation/batching.py), and
the owner counting a folded answer for every round it names."""

from __future__ import annotations

from typing import Any

from common import limits
from common.ops import MSG_CLAIM, MSG_SEND, Op, mailbox_key
from federation.batching import coalesce, fold, halve, merge_accepts
from federation.messages import Accept, Accepted, Prepare, Rejected, Replicate
from federation.requests import MailPop, MailSend
from tests.federation.cluster import Cluster
from tests.federation.test_claim import MB, body

OTHER = mailbox_key("w", "other")


def op(seq: int, key: str = MB, kind: str = MSG_CLAIM) -> Op:
    return Op("n0", seq, 100 + seq, kind, key, {"id": f"m{seq}"}, 1025)


def test_accepts_of_one_mailbox_and_epoch_fold_into_the_first() -> None:
    a, b = Accept(MB, 1025, (op(1),)), Accept(MB, 1025, (op(1), op(2)))
    elsewhere = Accept(OTHER, 7, (op(3, OTHER),))
    write = Replicate((op(4, "inbox:x"),), ack=True)
    got, folded = merge_accepts([a, elsewhere, write, b])
    assert folded == 1
    assert got == [Accept(MB, 1025, (op(1), op(2))), elsewhere, write]  # op 1 once


def test_anything_else_about_the_mailbox_closes_the_group() -> None:
    for between in (Prepare(MB, 2049, {}), Rejected(MB, 2049),
                    Accepted(MB, 1025, (("n1", 1),)), Accept(MB, 2049, (op(5),))):
        a, b = Accept(MB, 1025, (op(1),)), Accept(MB, 1025, (op(2),))
        got, folded = merge_accepts([a, between, b])
        assert (got, folded) == ([a, between, b], 0), between


def test_another_epoch_or_an_oversized_result_is_not_folded() -> None:
    assert fold(Accept(MB, 1025, (op(1),)), Accept(MB, 2049, (op(2),))) is None
    assert fold(Accept(MB, 1025, (op(1),)), Accept(OTHER, 1025, (op(2, OTHER),))) is None
    big = Accept(MB, 1025, tuple(op(i) for i in range(1, limits.replicate_batch_ops_max + 1)))
    assert fold(big, Accept(MB, 1025, (op(0),))) is None
    assert fold(big, Accept(MB, 1025, (op(1),))) is big  # nothing new to carry


def test_runs_of_quorum_writes_still_coalesce() -> None:
    w1, w2 = Replicate((op(1, "inbox:x"),), ack=True), Replicate((op(2, "inbox:x"),), ack=True)
    push = Replicate((op(3, "inbox:x"),), ack=False)
    assert coalesce([w1, w2, push]) == [Replicate(w1.ops + w2.ops, ack=True), push]


def _folding_queue(cl: Cluster) -> int:
    """Fold what each link carries, as a peer link would; how many folded."""
    total = 0
    links: dict[tuple[str, str], list[Any]] = {}
    for src, dst, msg, inc in cl.queue:
        links.setdefault((src, dst), []).append((msg, inc))
    queue = []
    for (src, dst), items in links.items():
        msgs, folded = merge_accepts(m for m, _ in items)
        total += folded
        queue += [(src, dst, m, items[0][1]) for m in msgs]
    cl.queue = queue
    return total


def test_an_owner_counts_one_folded_answer_for_each_round_it_names() -> None:
    cl = Cluster()
    owner = cl.cores["n0"].owner_for(MB, cl.now)
    cl.call(owner, "mailbox_request", "first", MailSend(MB, body("m0")))
    cl.deliver()  # the owner's term is set up
    for i in range(1, 4):
        cl.call(owner, "mailbox_request", f"s{i}", MailSend(MB, body(f"m{i}")))
    cl.call(owner, "mailbox_request", "p", MailPop(MB, request_id="r1"))
    accepts = [m for _, _, m, _ in cl.queue if isinstance(m, Accept)]
    assert len(accepts) == 4 * 2  # a round each, to each of 2 peers
    assert _folding_queue(cl) == 3 * 2
    cl.deliver()
    assert all(isinstance(cl.replies[f"s{i}"], Op) for i in range(1, 4))
    assert cl.replies["p"]["message"]["id"] == "m0"
    for peer in (n for n in cl.ids if n != owner):  # every peer holds every op of the four
        held = {o.body["id"] for o in cl.disks[peer].ops_missing({}, 10 ** 6)
                if o.key == MB and o.kind == MSG_SEND}
        assert {"m1", "m2", "m3"} <= held


def test_an_answer_that_misses_one_of_a_rounds_ops_does_not_count_for_it() -> None:
    cl = Cluster()
    owner = cl.cores["n0"].owner_for(MB, cl.now)
    cl.call(owner, "mailbox_request", "first", MailSend(MB, body("m0")))
    cl.deliver()
    cl.call(owner, "mailbox_request", "s1", MailSend(MB, body("m1")))
    cl.call(owner, "mailbox_request", "s2", MailSend(MB, body("m2")))
    acc = [m for _, _, m, _ in cl.queue if isinstance(m, Accept)]
    cl.queue.clear()
    epoch = acc[0].epoch
    first, second = dict.fromkeys(a.ops[-1].op_id for a in acc)  # s1's send op, then s2's
    peer = next(n for n in cl.ids if n != owner)
    # An answer naming the first round's op and not the second's.
    cl.run(owner, cl.cores[owner].on_message(peer, Accepted(MB, epoch, (first,)), cl.now))
    assert isinstance(cl.replies.get("s1"), Op) and "s2" not in cl.replies
    # Both, folded: the other round ends too.
    cl.run(owner, cl.cores[owner].on_message(peer, Accepted(MB, epoch, (first, second)), cl.now))
    assert isinstance(cl.replies["s1"], Op) and isinstance(cl.replies["s2"], Op)


def test_an_answer_naming_part_of_a_rounds_ops_does_not_count_for_it() -> None:
    # A pop's round carries two ops (the message's send and the claim): an
    # answer naming one of them, or both at another epoch, is not an accept
    # of that round; the full set in any order, with more beside it, is.
    cl = Cluster()
    owner = cl.cores["n0"].owner_for(MB, cl.now)
    cl.call(owner, "mailbox_request", "s", MailSend(MB, body("m0")))
    cl.deliver()
    cl.call(owner, "mailbox_request", "p", MailPop(MB, request_id="r1"))
    acc = next(m for _, _, m, _ in cl.queue if isinstance(m, Accept))
    cl.queue.clear()
    assert [o.kind for o in acc.ops] == [MSG_SEND, MSG_CLAIM]
    send_id, claim_id = (o.op_id for o in acc.ops)
    peer = next(n for n in cl.ids if n != owner)
    other = ("n9", 1)
    for partial in ((send_id,), (claim_id,), (claim_id, other)):
        cl.run(owner, cl.cores[owner].on_message(peer, Accepted(MB, acc.epoch, partial), cl.now))
        assert "p" not in cl.replies, partial
    later = Accepted(MB, acc.epoch + 1024, (send_id, claim_id))
    cl.run(owner, cl.cores[owner].on_message(peer, later, cl.now))
    assert "p" not in cl.replies
    whole = Accepted(MB, acc.epoch, (other, claim_id, send_id))
    cl.run(owner, cl.cores[owner].on_message(peer, whole, cl.now))
    assert cl.replies["p"]["message"]["id"] == "m0"


def test_a_refused_folded_accept_fails_every_round_it_carried() -> None:
    cl = Cluster()
    owner = cl.cores["n0"].owner_for(MB, cl.now)
    cl.call(owner, "mailbox_request", "first", MailSend(MB, body("m0")))
    cl.deliver()
    for i in (1, 2):
        cl.call(owner, "mailbox_request", f"s{i}", MailSend(MB, body(f"m{i}")))
    epoch = next(m for _, _, m, _ in cl.queue if isinstance(m, Accept)).epoch
    cl.queue.clear()
    peer = next(n for n in cl.ids if n != owner)
    cl.run(owner, cl.cores[owner].on_message(peer, Rejected(MB, epoch + 1024), cl.now))
    assert all(isinstance(cl.replies[f"s{i}"], Exception) for i in (1, 2))


def test_folding_a_large_burst_is_linear() -> None:
    send = op(1, kind=MSG_SEND)
    burst = [Accept(MB, 1025, (send, op(i + 2))) for i in range(500)]
    got, folded = merge_accepts(burst)
    assert folded == 499 and len(got) == 1
    assert [o.seq for o in got[0].ops] == list(range(1, 502))  # the send once, then each claim


def test_halve_splits_a_list_or_a_lone_replicate_and_nothing_else() -> None:
    ops = tuple(Op("n1", s, s, "agent.seen", "agent:a", {"agent_id": "a", "at_ms": s})
                for s in range(1, 6))
    reps = [Replicate(ops[:2], ack=True), Replicate(ops[2:], ack=False)]
    assert halve(reps) == [[reps[0]], [reps[1]]]
    three = [*reps, Replicate(ops[:1], ack=True)]
    assert halve(three) == [three[:1], three[1:]]
    (first,), (second,) = halve([Replicate(ops, ack=True)])  # type: ignore[misc]
    assert first == Replicate(ops[:2], ack=True) and second == Replicate(ops[2:], ack=True)
    assert halve([Replicate(ops[:1], ack=True)]) is None  # one op: nothing to split
    assert halve([Accept("w/p", 3, ops)]) is None  # an Accept's rounds stay together
    assert halve([]) is None
