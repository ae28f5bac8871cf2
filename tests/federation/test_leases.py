"""Leased claims in the pure core (issue 26): renew, complete, expiry.

A leased pop claims a message with a claim token and a deadline; the
mailbox's owner decides every renewal, completion and expiry, so a token
whose lease ran out is refused even where the expiry has not arrived yet,
and the message goes back to its place in the queue for the next pop.
"""

from __future__ import annotations

from common.errors import BadRequest, Conflict, NoMajority
from common.ops import MSG_EXPIRE, MSG_RENEW
from federation.mailbox import MailboxModel
from federation.messages import Accepted
from federation.requests import MailComplete, MailExpire, MailPop, MailRenew, MailSend
from tests.federation.cluster import Cluster
from tests.federation.test_claim import MB, ask, body, owner_cluster


def _leased_pop(cl: Cluster, node: str, token: int, rid: str, claim_token: str,
                lease_ms: int = 5_000) -> dict:
    return ask(cl, node, token, MailPop(MB, request_id=rid, claimer={"claimer_session": rid},
                                         lease_ms=lease_ms, token=claim_token))


def _states(cl: Cluster, mid: str) -> list[str | None]:
    return [(d.message(mid) or {}).get("state") for d in cl.disks.values()]


def test_a_leased_claim_carries_its_token_deadline_and_delivery() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1")))
    got = _leased_pop(cl, o, 2, "r1", "tok-a", lease_ms=5_000)
    claim = got["claim"]
    assert (claim["token"], claim["lease_ms"], claim["delivery"]) == ("tok-a", 5_000, 1)
    assert claim["lease_until_ms"] == cl.now + 5_000
    # A retry of the same pop answers the same claim, token included.
    again = _leased_pop(cl, o, 3, "r1", "tok-other")
    assert again["claim"]["token"] == "tok-a"
    assert _states(cl, "m1").count("claimed") >= 2


def test_an_unrenewed_lease_expires_back_to_its_place_and_is_delivered_again() -> None:
    cl, o = owner_cluster()
    for i, mid in enumerate(("m1", "m2")):
        ask(cl, o, 10 + i, MailSend(MB, body(mid)))
    _leased_pop(cl, o, 1, "r1", "tok-a", lease_ms=2_000)
    cl.tick(1_000)
    cl.deliver()
    assert _states(cl, "m1").count("claimed") == 3  # not yet
    cl.tick(1_500)
    cl.deliver()
    assert _states(cl, "m1") == ["pending"] * 3
    # m1 is first in the queue again, ahead of m2, as delivery 2.
    second = _leased_pop(cl, o, 2, "r2", "tok-b")
    assert second["message"]["id"] == "m1" and second["claim"]["delivery"] == 2
    # The first holder's token no longer holds anything.
    lost = ask(cl, o, 3, MailRenew(MB, "m1", "tok-a"))
    assert isinstance(lost, Conflict) and lost.code == "lease_lost"
    lost = ask(cl, o, 4, MailComplete(MB, "m1", "tok-a", body={"result": "done"}))
    assert isinstance(lost, Conflict) and lost.code == "lease_lost"


def test_renewing_keeps_the_lease_and_a_late_renew_is_refused_before_any_expiry() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1")))
    _leased_pop(cl, o, 2, "r1", "tok-a", lease_ms=2_000)
    for step in range(3):
        cl.now += 1_500  # no tick: the owner's clock alone decides
        renewed = ask(cl, o, 10 + step, MailRenew(MB, "m1", "tok-a"))
        assert renewed["claim"]["lease_until_ms"] == cl.now + 2_000, renewed
    assert _states(cl, "m1").count("claimed") >= 2
    cl.now += 2_500  # past the deadline, and no tick has expired it yet
    late = ask(cl, o, 20, MailRenew(MB, "m1", "tok-a"))
    assert isinstance(late, Conflict) and late.code == "lease_lost"
    late = ask(cl, o, 21, MailComplete(MB, "m1", "tok-a", body={"result": "done"}))
    assert isinstance(late, Conflict) and late.code == "lease_lost"
    # An expiry request (what a node's sweep sends) returns it to the queue.
    assert ask(cl, o, 22, MailExpire(MB)) == ["m1"]
    assert _states(cl, "m1").count("pending") >= 2


def test_a_completion_ends_the_lease_and_is_answered_again_as_a_replay() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1")))
    _leased_pop(cl, o, 2, "r1", "tok-a", lease_ms=2_000)
    done = ask(cl, o, 3, MailComplete(MB, "m1", "tok-a", body={"result": "done", "note": "ok"}))
    assert done["completion"]["token"] == "tok-a" and not done["replayed"]
    assert done["completion"]["claim_epoch"] == cl.cores[o].claims.owned()[MB]
    again = ask(cl, o, 4, MailComplete(MB, "m1", "tok-a", body={"result": "done", "note": "ok"}))
    assert again["replayed"]
    other = ask(cl, o, 5, MailComplete(MB, "m1", "tok-a", body={"result": "blocked"}))
    assert isinstance(other, Conflict)
    for _ in range(10):  # long past the deadline: a completed lease never expires
        cl.tick(500)
        cl.deliver()
    assert _states(cl, "m1") == ["claimed"] * 3
    assert all(d.message("m1")["completion"]["result"] == "done" for d in cl.disks.values())
    renew = ask(cl, o, 6, MailRenew(MB, "m1", "tok-a"))
    assert isinstance(renew, Conflict)


def test_a_claim_without_a_lease_is_terminal_and_cannot_be_renewed() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1")))
    ask(cl, o, 2, MailPop(MB, request_id="r1", claimer={"claimer_session": "s"}))
    for _ in range(10):
        cl.tick(500)
        cl.deliver()
    assert _states(cl, "m1") == ["claimed"] * 3
    refused = ask(cl, o, 3, MailRenew(MB, "m1", "whatever"))
    assert isinstance(refused, Conflict) and refused.code == "lease_lost"
    assert isinstance(ask(cl, o, 4, MailPop(MB, request_id="r2", lease_ms=1_000)), BadRequest)


def test_a_new_owner_expires_what_the_deposed_one_leased() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1")))
    _leased_pop(cl, o, 2, "r1", "tok-a", lease_ms=2_000)
    other = next(n for n in cl.ids if n != o)
    cl.restart(o)  # the owner's term ends with its process
    cl.now += 3_000
    # Any request makes `other` owner; it loads the lease, and holds it to at
    # least a lease's length from its takeover (its clock may run ahead of
    # the old owner's), then expires it.
    assert ask(cl, other, 3, MailExpire(MB)) == []
    cl.now += 2_000
    assert ask(cl, other, 5, MailExpire(MB)) == ["m1"]
    second = _leased_pop(cl, other, 4, "r2", "tok-b")
    assert second["message"]["id"] == "m1" and second["claim"]["delivery"] == 2


def test_the_model_follows_renew_and_expire_by_rank_in_any_order() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1")))
    _leased_pop(cl, o, 2, "r1", "tok-a", lease_ms=1_000)
    cl.now += 500
    ask(cl, o, 3, MailRenew(MB, "m1", "tok-a"))
    cl.tick(2_000)
    cl.deliver()
    _leased_pop(cl, o, 4, "r2", "tok-b", lease_ms=1_000)
    ops = [op for op in cl.disks[o].ops_for_key(MB, {}) if op.body.get("id") == "m1"]
    assert {op.kind for op in ops} >= {MSG_RENEW, MSG_EXPIRE}
    for order in (ops, ops[::-1], ops[1::2] + ops[::2]):
        model = MailboxModel(MB)
        model.apply(order)
        term = model.terminal_op("m1")
        assert model.state("m1") == "claimed" and term is not None
        assert term.body["token"] == "tok-b" and model.lease_until("m1") is not None


def test_a_leased_claim_whose_round_failed_is_expired_at_its_deadline() -> None:
    """Simulator seed 36 (the first run with leases): the owner's round for
    a leased pop reached its peers, whose answers were lost, and timed out.
    The claim stood on every disk, but the owner's model left it out (it
    keeps a round's terminal ops only when the round succeeds), so the
    owner never expired it, answered the sweep's ``MailExpire`` with
    nothing due, and the replicas showed the message leased long past its
    deadline. The model now keeps a failed round's leased claim."""
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1")))
    lost = ask(cl, o, 2, MailPop(MB, request_id="r1", claimer={"claimer_session": "r1"},
                                 lease_ms=2_000, token="tok-a"),
               drop=lambda src, dst, msg: isinstance(msg, Accepted))
    assert lost == "pending"
    cl.tick(1_100)  # past the claim timeout: the round fails
    assert isinstance(cl.replies[2], NoMajority)
    assert _states(cl, "m1") == ["claimed"] * 3  # every disk holds the claim
    cl.tick(1_000)  # past the deadline by the owner's clock
    cl.deliver()
    assert _states(cl, "m1") == ["pending"] * 3
    again = _leased_pop(cl, o, 3, "r2", "tok-b")
    assert again["message"]["id"] == "m1" and again["claim"]["delivery"] == 2


def test_a_retried_pop_gets_the_leased_claim_its_failed_round_made() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1")))
    ask(cl, o, 2, MailPop(MB, request_id="r1", claimer={"claimer_session": "r1"},
                          lease_ms=5_000, token="tok-a"),
        drop=lambda src, dst, msg: isinstance(msg, Accepted))
    cl.tick(1_100)
    assert isinstance(cl.replies[2], NoMajority)
    assert ask(cl, o, 3, MailPop(MB, request_id="r2", lease_ms=5_000, token="tok-b")) is None
    retried = _leased_pop(cl, o, 4, "r1", "tok-a")
    assert retried["message"]["id"] == "m1" and retried["claim"]["token"] == "tok-a"
