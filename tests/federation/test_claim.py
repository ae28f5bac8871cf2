from __future__ import annotations

from typing import Any

from common.errors import Conflict, Forbidden, LimitExceeded, NoMajority, NotFound, Unavailable
from common.ops import MSG_CLAIM, Op, mailbox_key
from common.vocab import message_body
from federation.effects import LoadMailbox, PersistPromise, Send, SendPromise
from federation.messages import Accept, Accepted, Prepare, PromiseNack, Rejected
from federation.requests import MailCancel, MailPop, MailSend
from tests.federation.cluster import Cluster

MB = mailbox_key("w", "inbox")


def body(mid: str, sender: str = "p0", to_agent: str | None = None,
         approval: bool = False) -> dict[str, Any]:
    """A whole ``msg.send`` body (an owner rebuilt from the store shows every field)."""
    return message_body(id=mid, to_workspace="w", to_project="inbox", to_agent=to_agent,
                        from_workspace="w", from_project=sender, from_agent=None,
                        from_owner_user=None, subject=mid, body=f"b-{mid}", nature=None,
                        evidence=None, created_at_ms=1_000_000, in_reply_to=None,
                        thread_id=mid, approval_required=approval,
                        approval_note="held" if approval else None)


def owner_cluster(n: int = 3) -> tuple[Cluster, str]:
    cl = Cluster(n)
    owner = cl.cores["n0"].owner_for(MB, cl.now)
    return cl, owner


def ask(cl: Cluster, node: str, token: Any, req: Any, drop: Any = None) -> Any:
    cl.call(node, "mailbox_request", token, req)
    cl.deliver(drop=drop)
    return cl.replies.get(token, "pending")


def test_send_pop_retry_and_empty() -> None:
    cl, o = owner_cluster()
    op = ask(cl, o, 1, MailSend(MB, body("m1")))
    assert isinstance(op, Op) and op.epoch == cl.cores[o].claims.owned()[MB]
    got = ask(cl, o, 2, MailPop(MB, request_id="r1", claimer={"claimer_session": "s1"}))
    assert got["message"]["id"] == "m1" and got["message"]["body"] == "b-m1"
    assert got["claim"]["request_id"] == "r1" and got["claim"]["claimer_session"] == "s1"
    again = ask(cl, o, 3, MailPop(MB, request_id="r1"))  # same request, same message
    assert (again["message"], again["claim"]) == (got["message"], got["claim"])
    assert ask(cl, o, 4, MailPop(MB, request_id="r2")) is None
    holders = [d for d in cl.disks.values()  # a majority holds the decision
               if (d.message("m1") or {}).get("state") == "claimed"]
    assert len(holders) >= 2
    assert all(d.message("m1")["claimed_by_session"] == "s1" for d in holders)


def test_send_is_idempotent_and_the_cap_is_exact() -> None:
    cl, o = owner_cluster()
    first = ask(cl, o, 1, MailSend(MB, body("m1"), cap=2))
    assert ask(cl, o, 2, MailSend(MB, body("m1"), cap=2)) == first
    ask(cl, o, 3, MailSend(MB, body("m2"), cap=2))
    full = ask(cl, o, 4, MailSend(MB, body("m3"), cap=2))
    assert isinstance(full, LimitExceeded) and full.details["limit"] == "mailbox_pending_max"
    ask(cl, o, 5, MailPop(MB))
    assert isinstance(ask(cl, o, 6, MailSend(MB, body("m3"), cap=2)), Op)


def test_in_flight_sends_count_against_the_cap() -> None:
    cl, o = owner_cluster()
    cl.call(o, "mailbox_request", 0, MailSend(MB, body("m0")))  # becomes owner
    cl.deliver()
    cl.call(o, "mailbox_request", 1, MailSend(MB, body("m1"), cap=2))
    cl.call(o, "mailbox_request", 2, MailSend(MB, body("m2"), cap=2))
    assert isinstance(cl.replies[2], LimitExceeded)  # m0 accepted + m1 in flight
    cl.deliver()
    assert isinstance(cl.replies[1], Op)


def test_pop_by_id_errors_and_agent_addressing() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1", to_agent="codex")))
    ask(cl, o, 2, MailSend(MB, body("m2")))
    assert isinstance(ask(cl, o, 3, MailPop(MB, message_id="nope")), NotFound)
    assert isinstance(ask(cl, o, 4, MailPop(MB, message_id="m1", agent="claude")), Forbidden)
    assert ask(cl, o, 5, MailPop(MB))["message"]["id"] == "m2"  # shared mail only
    assert ask(cl, o, 6, MailPop(MB, agent="claude")) is None
    assert ask(cl, o, 7, MailPop(MB, message_id="m1", agent="codex"))["message"]["id"] == "m1"
    again = ask(cl, o, 8, MailPop(MB, message_id="m1", agent="codex"))
    assert isinstance(again, Conflict) and again.details["state"] == "claimed"


def test_cancel_rules() -> None:
    cl, o = owner_cluster()
    for i in range(3):
        ask(cl, o, f"s{i}", MailSend(MB, body(f"m{i}")))
    ask(cl, o, "x", MailSend(MB, body("mx", sender="other")))
    assert isinstance(ask(cl, o, 1, MailCancel(MB, ("mx",), "w", "p0")), Forbidden)
    assert isinstance(ask(cl, o, 2, MailCancel(MB, ("zz",), "w", "p0")), NotFound)
    ask(cl, o, 3, MailPop(MB, message_id="m0"))
    assert isinstance(ask(cl, o, 4, MailCancel(MB, ("m0", "m1"), "w", "p0")), Conflict)
    assert ask(cl, o, 5, MailCancel(MB, ("m1",), "w", "p0")) == ["m1"]
    assert ask(cl, o, 6, MailCancel(MB, ("m1",), "w", "p0")) == ["m1"]  # idempotent
    assert ask(cl, o, 7, MailCancel(MB, None, "w", "p0")) == ["m2"]
    assert isinstance(ask(cl, o, 8, MailPop(MB, message_id="m2")), Conflict)
    assert ask(cl, o, 9, MailPop(MB))["message"]["id"] == "mx"


def test_becoming_owner_persists_the_promise_before_preparing() -> None:
    cl, o = owner_cluster()
    cl.call(o, "mailbox_request", 1, MailPop(MB))
    eff = cl.effects[o]
    assert isinstance(eff[0], PersistPromise) and eff[0].mailbox == MB
    prepares = [e for e in eff if isinstance(e, Send) and isinstance(e.msg, Prepare)]
    assert len(prepares) == 2 and all(p.msg.epoch == eff[0].epoch for p in prepares)
    assert any(isinstance(e, LoadMailbox) for e in eff)
    cl.deliver()
    assert cl.replies[1] is None
    assert cl.cores[o].claims.owned() == {MB: eff[0].epoch}


def test_a_peer_promises_once_per_epoch_and_rejects_older_accepts() -> None:
    cl = Cluster()
    c = cl.cores["n1"]
    e_n0, e_n2 = 1024 + 0, 1024 + 2
    out = c.on_message("n2", Prepare(MB, e_n2, {}), cl.now)
    assert out == [PersistPromise(MB, e_n2), SendPromise("n2", MB, e_n2, {})]
    assert c.on_message("n0", Prepare(MB, e_n0, {}), cl.now) == [
        Send("n0", PromiseNack(MB, e_n2))]
    op = Op("n0", 1, 1, MSG_CLAIM, MB, {"id": "m"}, e_n0)
    assert c.on_message("n0", Accept(MB, e_n0, (op,)), cl.now) == [
        Send("n0", Rejected(MB, e_n2))]
    # An accept from the promised owner is persisted before it is answered.
    op2 = Op("n2", 1, 1, MSG_CLAIM, MB, {"id": "m"}, e_n2)
    out = c.on_message("n2", Accept(MB, e_n2, (op2,)), cl.now)
    assert [type(e).__name__ for e in out] == ["Persist", "Send"]
    assert out[1] == Send("n2", Accepted(MB, e_n2, (("n2", 1),)))
    # An epoch that does not belong to its sender is refused.
    assert isinstance(c.on_message("n0", Prepare(MB, 5 * 1024 + 2, {}), cl.now)[0].msg,
                      PromiseNack)


def test_no_majority_fails_fast_and_candidacy_times_out() -> None:
    cl, o = owner_cluster()
    peers = [p for p in cl.ids if p != o]
    for p in peers:
        cl.cores[o].on_send_failed(p, cl.now)
    cl.call(o, "mailbox_request", 1, MailPop(MB))
    assert isinstance(cl.replies[1], NoMajority) and "1 of 3" in cl.replies[1].message
    cl2, o2 = owner_cluster()
    cl2.call(o2, "mailbox_request", 1, MailPop(MB))
    cl2.deliver(drop=lambda src, dst, msg: True)  # every promise is lost
    cl2.tick(cl2.timeout_ms)
    assert isinstance(cl2.replies[1], NoMajority) and cl2.replies[1].retryable


def test_a_higher_epoch_deposes_the_owner_and_fails_its_requests() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1")))
    epoch = cl.cores[o].claims.owned()[MB]
    other = next(p for p in cl.ids if p != o)
    # Another member takes over while the owner's accepts are lost.
    cl.call(o, "mailbox_request", 2, MailPop(MB, request_id="r"))
    cl.queue.clear()
    ask(cl, other, 3, MailPop(MB, request_id="r", claimer={"claimer_session": "s3"}),
        drop=lambda src, dst, msg: o in (src, dst))
    assert cl.cores[other].claims.owned()[MB] > epoch
    assert cl.replies[3]["message"]["id"] == "m1"
    # The old owner learns of it from a Rejected and steps down.
    cl.run(o, cl.cores[o].on_message(other, Rejected(MB, cl.cores[other].claims.owned()[MB]),
                                     cl.now))
    assert isinstance(cl.replies[2], Unavailable) and cl.replies[2].retryable
    assert MB not in cl.cores[o].claims.owned()


def test_a_failed_claim_makes_the_message_available_again() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1")))
    cl.call(o, "mailbox_request", 2, MailPop(MB, request_id="r2"))
    cl.call(o, "mailbox_request", 3, MailPop(MB))
    assert cl.replies[3] is None  # m1 is held by r2's claim (no request id: nothing to record)
    cl.queue.clear()  # r2's accepts are lost
    cl.tick(cl.timeout_ms)
    assert isinstance(cl.replies[2], NoMajority)
    assert ask(cl, o, 4, MailPop(MB, request_id="r4"))["message"]["id"] == "m1"
    for d in cl.disks.values():
        view = d.message("m1")
        if view is not None and view["state"] == "claimed":
            assert view["request_id"] in ("r2", "r4")
    cl.tick(600)
    cl.deliver()
    cl.tick(600)
    cl.deliver()
    assert all(d.message("m1")["request_id"] == "r4" for d in cl.disks.values())


def test_requests_on_a_held_message_wait_for_its_round() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1")))
    cl.call(o, "mailbox_request", 2, MailPop(MB, request_id="r"))
    cl.call(o, "mailbox_request", 3, MailPop(MB, request_id="r"))  # retry while in flight
    cl.call(o, "mailbox_request", 4, MailCancel(MB, ("m1",), "w", "p0"))
    assert 3 not in cl.replies and 4 not in cl.replies
    cl.deliver()
    assert cl.replies[2]["claim"] == cl.replies[3]["claim"]
    assert cl.replies[2]["rank"] == cl.replies[3]["rank"]  # the same decision, not a new one
    assert isinstance(cl.replies[4], Conflict)


def test_an_owner_after_restart_reloads_and_keeps_decisions() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1")))
    ask(cl, o, 2, MailSend(MB, body("m2")))
    # as daemon/services/mail.py pop builds it (the rebuilt claim carries every field)
    who = {"claimer_session": "s1", "claimer_agent": "a1", "claimer_key": None,
           "claimer_agent_id": "agent-1"}
    first = ask(cl, o, 3, MailPop(MB, request_id="r1", claimer=who))
    old_epoch = cl.cores[o].claims.owned()[MB]
    cl.restart(o)  # the model is rebuilt from the merged state, not the op log
    again = ask(cl, o, 4, MailPop(MB, request_id="r1", claimer=who))
    assert (again["message"], again["claim"]) == (first["message"], first["claim"])
    assert cl.cores[o].claims.owned()[MB] > old_epoch
    assert ask(cl, o, 5, MailPop(MB))["message"]["id"] == "m2"
    assert ask(cl, o, 6, MailPop(MB)) is None


def test_a_five_node_cluster_claims_with_two_members_down() -> None:
    cl, o = owner_cluster(5)
    down = [p for p in cl.ids if p != o][:2]
    drop = lambda src, dst, msg: src in down or dst in down  # noqa: E731
    ask(cl, o, 1, MailSend(MB, body("m1")), drop=drop)
    assert ask(cl, o, 2, MailPop(MB), drop=drop)["message"]["id"] == "m1"


def test_an_idle_owner_drops_its_model_and_takes_the_mailbox_again_on_demand() -> None:
    from common import limits

    cl, o = owner_cluster()
    assert isinstance(ask(cl, o, 1, MailSend(MB, body("m1"))), Op)
    first_epoch = cl.cores[o].claims.owned()[MB]
    idle_ms = int(limits.mailbox_owner_idle_secs * 1000)
    for _ in range(idle_ms // 1000 - 1):  # time passes; sync offers keep peers alive
        cl.tick(1000)
        cl.deliver()
    assert MB in cl.cores[o].claims.owned()  # not idle long enough yet
    cl.tick(1000)
    cl.deliver()
    assert MB not in cl.cores[o].claims.owned()
    got = ask(cl, o, 2, MailPop(MB, request_id="r1"))
    cl.deliver()
    assert got["message"]["id"] == "m1"  # the state came back with the new term
    assert cl.cores[o].claims.owned()[MB] > first_epoch


# -- a pop's request id is decided once, "nothing pending" included ----------


def test_nothing_pending_is_a_decision_a_majority_holds_before_the_reply() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 0, MailSend(MB, body("m0")))
    ask(cl, o, 1, MailPop(MB, request_id="r0"))
    cl.call(o, "mailbox_request", 2, MailPop(MB, request_id="r1"))
    assert 2 not in cl.replies  # no answer before a majority holds the decision
    cl.deliver()
    assert cl.replies[2] is None
    holders = [d for d in cl.disks.values() if d.snapshot()["empties"].get((MB, "r1"))]
    assert len(holders) >= 2


def test_an_empty_request_id_stays_empty_after_a_send() -> None:
    cl, o = owner_cluster()
    assert ask(cl, o, 1, MailPop(MB, request_id="r1")) is None
    ask(cl, o, 2, MailSend(MB, body("m1")))
    # A retried (or late) copy of r1 gets its decision, not the new message.
    assert ask(cl, o, 3, MailPop(MB, request_id="r1")) is None
    assert ask(cl, o, 4, MailPop(MB, request_id="r2"))["message"]["id"] == "m1"


def test_a_late_copy_at_a_new_owner_meets_the_empty_decision() -> None:
    cl, o = owner_cluster()
    assert ask(cl, o, 1, MailPop(MB, request_id="r1")) is None
    # The owner is cut off; another member takes the mailbox over, a message
    # arrives, and then a copy of r1 that was held in the network reaches it.
    other = next(p for p in cl.ids if p != o)
    cut = lambda src, dst, msg: o in (src, dst)  # noqa: E731
    assert isinstance(ask(cl, other, 2, MailSend(MB, body("m1")), drop=cut), Op)
    assert cl.cores[other].claims.owned()[MB] > 0
    assert ask(cl, other, 3, MailPop(MB, request_id="r1"), drop=cut) is None
    got = ask(cl, other, 4, MailPop(MB, request_id="r2"), drop=cut)
    assert got["message"]["id"] == "m1"


def test_an_unconfirmed_empty_decision_is_reissued_at_the_new_epoch() -> None:
    cl, o = owner_cluster()
    assert ask(cl, o, 1, MailPop(MB, request_id="r1")) is None
    cl.restart(o)  # a new term: the decision is loaded, not confirmed
    cl.call(o, "mailbox_request", 2, MailPop(MB, request_id="r1"))
    cl.deliver()
    assert cl.replies[2] is None
    epochs = {op.epoch for d in cl.disks.values() for op in d.ops_for_key(MB)
              if op.kind == "msg.empty"}
    assert len(epochs) == 2  # the first term's decision and its re-issue


def test_a_request_older_than_the_ttl_is_refused() -> None:
    from common import limits
    cl, o = owner_cluster()
    old = cl.now - int(limits.mailbox_request_ttl_secs * 1000) - 1
    got = ask(cl, o, 1, MailPop(MB, request_id="r1", sent_at_ms=old))
    assert isinstance(got, Unavailable) and "mailbox_request_ttl_secs" in str(got)
    assert ask(cl, o, 2, MailPop(MB, request_id="r1", sent_at_ms=cl.now)) is None


# -- editing: hold and release, decided by the owner like a pop ----------------


def _hold(session: str = "web-1", mid: str = "m1") -> Any:
    from federation.requests import MailHold
    return MailHold(MB, mid, holder={"holder_session": session, "holder_user": "ann"})


def _release(mid: str = "m1", content: dict[str, Any] | None = None,
             session: str = "web-1", user: str | None = "ann") -> Any:
    from federation.requests import MailRelease
    return MailRelease(MB, mid, content=content,
                       holder={"holder_session": session, "holder_user": user})


def test_a_held_message_leaves_the_queue_and_comes_back_at_its_place() -> None:
    cl, o = owner_cluster()
    for mid in ("m1", "m2"):
        ask(cl, o, mid, MailSend(MB, body(mid)))
    held = ask(cl, o, 1, _hold())
    assert held["hold"]["holder_session"] == "web-1"
    assert cl.cores[o].claims.slots[MB].model.state("m1") == "editing"
    assert ask(cl, o, 2, MailPop(MB, request_id="r1"))["message"]["id"] == "m2"
    assert isinstance(ask(cl, o, 3, MailPop(MB, message_id="m1")), Conflict)
    saved = ask(cl, o, 4, _release(content={"subject": "new", "body": "edited"}))
    assert saved["message"]["body"] == "edited" and saved["message"]["id"] == "m1"
    got = ask(cl, o, 5, MailPop(MB, request_id="r2"))
    assert got["message"]["id"] == "m1" and got["message"]["body"] == "edited"
    holders = [d for d in cl.disks.values() if (d.message("m1") or {}).get("body") == "edited"]
    assert len(holders) >= 2  # the claim carried the saved content to a majority


def test_a_hold_and_a_pop_of_the_same_message_never_both_win() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 0, MailSend(MB, body("m1")))
    cl.call(o, "mailbox_request", 1, MailPop(MB, request_id="r1"))
    cl.call(o, "mailbox_request", 2, _hold())  # parked behind the claim's round
    cl.deliver()
    assert cl.replies[1]["message"]["id"] == "m1"
    assert isinstance(cl.replies[2], Conflict) and cl.replies[2].details["state"] == "claimed"
    ask(cl, o, 3, MailSend(MB, body("m2")))
    cl.call(o, "mailbox_request", 4, _hold(mid="m2"))
    cl.call(o, "mailbox_request", 5, MailPop(MB, request_id="r5", message_id="m2"))
    cl.deliver()
    assert cl.replies[4]["hold"]["id"] == "m2"
    assert isinstance(cl.replies[5], Conflict) and cl.replies[5].details["state"] == "editing"


def test_holds_are_exclusive_retried_by_their_session_and_survive_failover() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 0, MailSend(MB, body("m1")))
    first = ask(cl, o, 1, _hold("web-1"))
    assert ask(cl, o, 2, _hold("web-1"))["hold"] == first["hold"]  # a retried Edit
    assert isinstance(ask(cl, o, 3, _hold("web-2")), Conflict)
    # The owner is cut off; the next owner still sees the message held.
    other = next(p for p in cl.ids if p != o)
    cut = lambda src, dst, msg: o in (src, dst)  # noqa: E731
    assert ask(cl, other, 4, MailPop(MB, request_id="r4"), drop=cut) is None
    assert isinstance(ask(cl, other, 5, MailCancel(MB, ("m1",), "w", "p0"), drop=cut), Conflict)
    assert ask(cl, other, 6, MailCancel(MB, None, "w", "p0"), drop=cut) == []
    assert ask(cl, other, 7, _release(), drop=cut)["message"]["id"] == "m1"  # discard
    assert ask(cl, other, 8, _release(), drop=cut)["message"]["id"] == "m1"  # again: same
    assert isinstance(ask(cl, other, 9, _release(content={"body": "x"}), drop=cut), Conflict)
    assert ask(cl, other, 10, MailPop(MB, request_id="r10"), drop=cut)["message"]["id"] == "m1"


def test_held_messages_count_against_the_cap_and_edits_change_only_text() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 0, MailSend(MB, body("m1"), cap=1))
    ask(cl, o, 1, _hold())
    assert isinstance(ask(cl, o, 2, MailSend(MB, body("m2"), cap=1)), LimitExceeded)
    bad = ask(cl, o, 3, _release(content={"to_project": "elsewhere"}))
    assert bad.status == 400
    assert isinstance(ask(cl, o, 4, _hold(mid="nope")), NotFound)


def test_a_claim_outranked_by_another_claim_of_its_request_id_frees_the_message() -> None:
    # Found in review: m1's send reaches only the owner a, which claims m1
    # for r; that round fails too. b, which never saw m1, answers the retry
    # of r with m2. After the heal every store shows m1 claimed by r, whose
    # client only ever got m2: the owner must treat that claim as void and
    # hand m1 to the next pop.
    cl, a = owner_cluster()
    ask(cl, a, "s0", MailSend(MB, body("m0")))
    cut_a = lambda s, d, m: a in (s, d)  # noqa: E731
    ask(cl, a, "s1", MailSend(MB, body("m1")), drop=cut_a)
    cl.tick(cl.timeout_ms + 100)
    cl.deliver(drop=cut_a)
    assert ask(cl, a, "p0", MailPop(MB, request_id="r0"))["message"]["id"] == "m0"
    ask(cl, a, "s2", MailSend(MB, body("m2")))
    ask(cl, a, "p1", MailPop(MB, request_id="r"), drop=cut_a)  # r -> m1, only at a
    cl.tick(cl.timeout_ms + 100)
    cl.deliver(drop=cut_a)
    b = next(n for n in cl.ids if n != a)
    got = ask(cl, b, "p1b", MailPop(MB, request_id="r"), drop=cut_a)
    assert got["message"]["id"] == "m2"
    for _ in range(10):
        cl.tick(300)
        cl.deliver()
    owner = cl.cores[b].owner_for(MB, cl.now)
    nxt = ask(cl, owner, "p2", MailPop(MB, request_id="r2"))
    assert isinstance(nxt, dict) and nxt["message"]["id"] == "m1", nxt


def test_only_the_holder_releases_a_held_message() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 0, MailSend(MB, body("m1")))
    ask(cl, o, 1, _hold("web-1"))
    other = ask(cl, o, 2, _release(content={"subject": "x", "body": "y"}, session="web-9",
                                   user="bob"))
    assert isinstance(other, Conflict) and other.details["holder_user"] == "ann"
    assert isinstance(ask(cl, o, 3, _release(session="web-9", user=None)), Conflict)
    assert cl.cores[o].claims.slots[MB].model.state("m1") == "editing"
    # The same user from another session (another tab, another node's login) may.
    done = ask(cl, o, 4, _release(content={"subject": "s", "body": "b"}, session="web-2"))
    assert done["message"]["body"] == "b"


def test_an_acknowledged_hold_outranks_an_older_unacknowledged_claim() -> None:
    # The review finding: a deposed owner's claim, left on a minority, must
    # not surface after a later owner's acknowledged hold and undo it (the
    # editor's save would then find the message "already collected").
    cl, a = owner_cluster()
    ask(cl, a, "s1", MailSend(MB, body("m1")))
    ask(cl, a, "s2", MailSend(MB, body("m2")))
    cut_a = lambda s, d, m: a in (s, d)  # noqa: E731
    ask(cl, a, "p1", MailPop(MB, request_id="r"), drop=cut_a)  # r -> m1, only at a
    cl.tick(cl.timeout_ms + 100)
    cl.deliver(drop=cut_a)
    assert isinstance(cl.replies["p1"], NoMajority)
    b = next(n for n in cl.ids if n != a)
    held = ask(cl, b, "h1", _hold("web-1"), drop=cut_a)
    assert held["hold"]["id"] == "m1"
    for _ in range(10):  # heal: a's claim spreads to every member
        cl.tick(300)
        cl.deliver()
    for node, disk in cl.disks.items():
        assert disk.message("m1")["state"] == "editing", node
    owner = cl.cores[b].owner_for(MB, cl.now)
    saved = ask(cl, owner, "r1", _release(content={"subject": "s", "body": "edited"}))
    assert isinstance(saved, dict) and saved["message"]["body"] == "edited", saved
    # m1 is back at its place, ahead of m2; r's retry is not answered with the void claim.
    got = ask(cl, owner, "p2", MailPop(MB, request_id="r2"))
    assert got["message"]["id"] == "m1" and got["message"]["body"] == "edited"
    for _ in range(5):
        cl.tick(300)
        cl.deliver()
    for disk in cl.disks.values():
        view = disk.message("m1")
        assert view["state"] == "claimed" and view["request_id"] == "r2"


# -- approvals: a message awaiting an approver, decided once by the owner ------


def _decide(mid: str = "m1", approve: bool = True, user: str = "ann") -> Any:
    from federation.requests import MailDecide
    return MailDecide(MB, mid, approve, decider={"by_user": user}, reason="why")


def test_a_message_awaiting_approval_is_not_claimable_and_approval_keeps_its_place() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1", approval=True)))
    ask(cl, o, 2, MailSend(MB, body("m2")))
    model = cl.cores[o].claims.slots[MB].model
    assert model.state("m1") == "awaiting_approval" and model.awaiting_ids() == ["m1"]
    assert isinstance(ask(cl, o, 3, MailPop(MB, message_id="m1")), Conflict)
    assert isinstance(ask(cl, o, 4, _hold()), Conflict)
    ok = ask(cl, o, 5, _decide())
    assert ok["approved"] and ok["decision"]["by_user"] == "ann"
    assert ask(cl, o, 6, MailSend(MB, body("m3"))) is not None
    # m1 was sent before m2 and takes the head of the queue back.
    assert [ask(cl, o, 7 + i, MailPop(MB))["message"]["id"] for i in range(3)] == [
        "m1", "m2", "m3"]
    holders = [d for d in cl.disks.values()
               if (d.message("m1") or {}).get("approval_decision") == "approved"]
    assert len(holders) >= 2


def test_a_rejected_message_is_never_claimable_and_decisions_are_made_once() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1", approval=True)))
    assert ask(cl, o, 2, _decide(approve=False, user="bob"))["approved"] is False
    again = ask(cl, o, 3, _decide(approve=True, user="ann"))
    assert isinstance(again, Conflict) and again.details["decision"] == "rejected"
    assert again.details["decided_by"] == "bob"
    assert isinstance(ask(cl, o, 4, _decide(approve=False)), Conflict)
    assert ask(cl, o, 5, MailPop(MB)) is None
    assert isinstance(ask(cl, o, 6, MailPop(MB, message_id="m1")), Conflict)
    assert isinstance(ask(cl, o, 7, MailCancel(MB, ("m1",), "w", "p0")), Conflict)
    for d in cl.disks.values():
        assert d.message("m1")["state"] == "rejected"


def test_two_decisions_in_flight_are_ordered_and_only_the_first_wins() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1", approval=True)))
    cl.call(o, "mailbox_request", 2, _decide(approve=True, user="ann"))
    cl.call(o, "mailbox_request", 3, _decide(approve=False, user="bob"))  # parked
    assert 3 not in cl.replies
    cl.deliver()
    assert cl.replies[2]["approved"] is True
    assert isinstance(cl.replies[3], Conflict) and cl.replies[3].details["decision"] == "approved"


def test_awaiting_messages_count_against_the_cap_and_may_be_cancelled() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1", approval=True), cap=1))
    assert isinstance(ask(cl, o, 2, MailSend(MB, body("m2"), cap=1)), LimitExceeded)
    assert ask(cl, o, 3, MailCancel(MB, None, "w", "p0")) == ["m1"]  # cancel-all takes it
    assert isinstance(ask(cl, o, 4, _decide()), Conflict)
    assert isinstance(ask(cl, o, 5, MailSend(MB, body("m2"), cap=1)), Op)


def test_a_pending_approval_and_its_decision_survive_failover() -> None:
    cl, o = owner_cluster()
    ask(cl, o, 1, MailSend(MB, body("m1", approval=True)))
    other = next(p for p in cl.ids if p != o)
    cut = lambda src, dst, msg: o in (src, dst)  # noqa: E731
    assert ask(cl, other, 2, MailPop(MB, request_id="r2"), drop=cut) is None
    assert ask(cl, other, 3, _decide(user="cat"), drop=cut)["approved"] is True
    got = ask(cl, other, 4, MailPop(MB, request_id="r4"), drop=cut)
    assert got["message"]["id"] == "m1"
    cl.restart(other)
    assert isinstance(ask(cl, other, 5, _decide(approve=False), drop=cut), Conflict)


def test_an_unacknowledged_approval_of_a_deposed_owner_loses_to_a_later_rejection() -> None:
    cl, a = owner_cluster()
    ask(cl, a, 1, MailSend(MB, body("m1", approval=True)))
    cut_a = lambda s, d, m: a in (s, d)  # noqa: E731
    cl.call(a, "mailbox_request", 2, _decide(user="ann"))
    cl.queue.clear()  # its accepts are lost: the approval stays on a alone
    cl.tick(cl.timeout_ms + 100)
    assert isinstance(cl.replies[2], NoMajority)
    b = next(n for n in cl.ids if n != a)
    assert ask(cl, b, 3, _decide(approve=False, user="bob"), drop=cut_a)["approved"] is False
    for _ in range(10):  # heal: a's approval spreads, and loses
        cl.tick(300)
        cl.deliver()
    for node, disk in cl.disks.items():
        view = disk.message("m1")
        assert view["state"] == "rejected" and view["approval_decided_by"] == "bob", node
    owner = cl.cores[b].owner_for(MB, cl.now)
    assert ask(cl, owner, 4, MailPop(MB, request_id="r4")) is None
