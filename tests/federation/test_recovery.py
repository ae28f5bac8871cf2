"""A member that lost its disk (or came back from an old copy) recovers
before it votes: the acceptor-amnesia path to a double claim, in the core."""

from __future__ import annotations

import copy
from typing import Any

from common.errors import MemberRecovering
from common.ops import mailbox_key
from common.randomid import incarnation_id
from federation.effects import Recovered, Recovering, StaleSender
from federation.messages import Accept, Prepare, RecoveryQuery, Replicate, Reseeding, SyncOffer
from federation.requests import MailPop, MailSend
from tests.federation.cluster import Cluster

MB = mailbox_key("w", "inbox")


def body(mid: str) -> dict[str, Any]:
    return {"id": mid, "to_workspace": "w", "to_project": "inbox", "to_agent": None,
            "from_workspace": "w", "from_project": "p0", "subject": mid, "body": f"b-{mid}"}


def ask(cl: Cluster, node: str, token: Any, req: Any, drop: Any = None) -> Any:
    cl.call(node, "mailbox_request", token, req)
    cl.deliver(drop=drop)
    return cl.replies.get(token, "pending")


def owner_and_others(cl: Cluster) -> tuple[str, list[str]]:
    owner = cl.cores["n0"].owner_for(MB, cl.now)
    return owner, [n for n in cl.ids if n != owner]


def recover(cl: Cluster, node: str, drop: Any = None) -> None:
    for _ in range(5):
        cl.tick(250)
        cl.deliver(drop=drop)


def test_a_wiped_member_refuses_to_vote_write_or_own_until_it_recovers() -> None:
    cl = Cluster()
    owner, (a, b) = owner_and_others(cl)
    ask(cl, owner, 1, MailSend(MB, body("m1")))
    cl.wipe(a)
    core = cl.cores[a]
    assert core.recovering
    # No vote: a Prepare or an Accept gets no answer from it.
    assert core.on_message(b, Prepare(MB, 5 * 1024 + 2, {}), cl.now) == []
    assert core.on_message(owner, Accept(MB, 10 ** 6, ()), cl.now) == []
    cl.call(a, "write", "w1", [("note.new", "inbox:x", {"id": "n1", "from": "a", "to": "x"})])
    assert isinstance(cl.replies["w1"], MemberRecovering)
    cl.call(a, "mailbox_request", "p1", MailPop(MB, request_id="r"))
    assert isinstance(cl.replies["p1"], MemberRecovering)


def test_recovery_needs_every_other_member_then_raises_promises_and_counter() -> None:
    cl = Cluster()
    owner, (a, _b) = owner_and_others(cl)
    for i in range(3):
        cl.call(a, "write", f"w{i}", [("note.new", "inbox:x",
                                       {"id": f"n{i}", "from": "a", "to": "x"})])
        cl.deliver()
    ask(cl, owner, "s", MailSend(MB, body("m1")))
    promised = max(cl.cores[n].promises.get(MB, 0) for n in cl.ids)
    assert promised > 0
    cl.wipe(a)
    # With one member cut off it keeps waiting: a majority is not enough.
    cut = lambda src, dst, msg: owner in (src, dst)  # noqa: E731
    recover(cl, a, drop=cut)
    assert cl.cores[a].recovering
    assert cl.cores[a].status(cl.now)["recovery_waiting_for"] == [owner]
    recover(cl, a)
    core = cl.cores[a]
    assert not core.recovering
    assert core.promises[MB] >= promised  # at least what it may have promised before
    assert cl.disks[a].get_promised(MB) >= promised  # and durably
    assert core.vv.get(a) == 3  # its own ops came back from the others
    cl.call(a, "write", "w9", [("note.new", "inbox:x", {"id": "n9", "from": "a", "to": "x"})])
    cl.deliver()
    op = cl.replies["w9"][0]
    assert op.seq == 4  # numbered after every op of its own the others hold, never over one


def test_a_forgotten_promise_cannot_let_a_deposed_owner_complete_a_claim() -> None:
    # Owner o holds the mailbox at e1; a takes it over at e2 with b's promise
    # and its own... then a is wiped. o's Accepts at e1 must not gather a
    # majority through the amnesiac a: it gives no accept until recovered.
    cl = Cluster()
    o, (a, b) = owner_and_others(cl)
    ask(cl, o, 1, MailSend(MB, body("m1")))
    e1 = cl.cores[o].claims.owned()[MB]
    ask(cl, b, 2, MailPop(MB, request_id="rb"),
        drop=lambda src, dst, msg: o in (src, dst))  # b takes over at e2 via a
    assert cl.cores[b].claims.owned()[MB] > e1
    assert cl.replies[2]["message"]["id"] == "m1"
    cl.wipe(a)
    # o still believes it owns e1; its pop's Accept reaches a and b.
    cl.call(o, "mailbox_request", 3, MailPop(MB, request_id="ro"))
    cl.deliver()
    got = cl.replies[3]
    assert not (isinstance(got, dict) and got.get("message")), got  # never granted twice


def test_an_old_copy_of_the_disk_is_found_out_by_the_peers_vectors() -> None:
    cl = Cluster()
    _owner, (a, b) = owner_and_others(cl)
    old = copy.deepcopy(cl.disks[a])  # a backup taken now
    for i in range(2):
        cl.call(a, "write", f"w{i}", [("note.new", "inbox:x",
                                       {"id": f"n{i}", "from": "a", "to": "x"})])
        cl.deliver()
    cl.wipe(a, disk=old)  # restored behind the cluster's back, not marked
    assert not cl.cores[a].recovering
    effects = cl.cores[a].on_message(b, SyncOffer(cl.cores[b].vv, cl.cores[b]._fingerprint),
                                     cl.now)
    assert any(isinstance(e, Recovering) for e in effects)
    assert cl.cores[a].recovering
    recover(cl, a)
    assert not cl.cores[a].recovering and cl.cores[a].vv.get(a) == 2


def test_peers_answer_a_recovery_query_and_show_the_member_recovering() -> None:
    cl = Cluster()
    _, (a, b) = owner_and_others(cl)
    effects = cl.cores[b].on_message(a, RecoveryQuery("inc-2", "r1", {}), cl.now)
    assert len(effects) == 2  # the answer, and a push of what the asker lacks
    assert cl.cores[b].status(cl.now)["peers"][a]["recovering"] is True


def test_a_single_node_has_nobody_to_recover_from() -> None:
    cl = Cluster(n=1, w=1)
    cl.wipe("n0")
    assert not cl.cores["n0"].recovering


def test_recovery_ends_with_the_durable_mark_cleared() -> None:
    cl = Cluster()
    _, (a, _) = owner_and_others(cl)
    cl.wipe(a)
    recover(cl, a)
    assert any(isinstance(e, Recovered) for e in cl.effects[a])


def test_recovery_waits_for_its_own_ops_a_peer_holds_past_a_gap() -> None:
    # Found in review: R's write reaches only p2, then R's claim of m1 only
    # p1 (acknowledged: R + p1), so p1 holds R's claim past a gap in R's ops
    # and its watermark does not show it. R is wiped. Had R recovered on
    # watermarks alone, p2 could take over with {p2, R} and claim m1 again.
    cl = Cluster()
    r, (p1, p2) = owner_and_others(cl)
    ask(cl, r, "s1", MailSend(MB, body("m1")))
    cl.call(r, "write", "w1", [("note.new", "inbox:x", {"id": "n1", "from": "a", "to": "x"})])
    cl.deliver(drop=lambda s, d, m: s == r and d == p1)
    got = ask(cl, r, "c1", MailPop(MB, request_id="r1"), drop=lambda s, d, m: {s, d} == {r, p2})
    assert got["message"]["id"] == "m1"
    assert cl.cores[p1]._seen.held(r)  # p1 holds R's claim past a gap
    cl.wipe(r)
    lost = lambda s, d, m: {s, d} == {p1, p2} or (s == p1 and d == r  # noqa: E731
                                                  and isinstance(m, Replicate))
    recover(cl, r, drop=lost)
    assert cl.cores[r].recovering  # the claim has not reached it: it keeps waiting
    recover(cl, r, drop=lambda s, d, m: {s, d} == {p1, p2})
    assert not cl.cores[r].recovering
    again = ask(cl, p2, "c2", MailPop(MB, request_id="r2"), drop=lambda s, d, m: p1 in (s, d))
    assert not (isinstance(again, dict) and (again.get("message") or {}).get("id") == "m1")


def logged(cl: Cluster, node: str) -> set[tuple[str, int]]:
    return {op.op_id for op in cl.disks[node].ops_missing({}, 10 ** 6)}


def test_a_donor_keeps_what_its_copy_lacks_until_the_seeded_member_offers() -> None:
    # Simulator seed 3175: m's previous process held c's op x and offered
    # it; m loses its disk and is seeded from b's copy, which lacks x; x
    # reaches b just after. Had b kept m's old offer as m's GC floor, b and
    # c would both collect x before m's new process offered, and m (waiting
    # to cover their vectors) would wait for x forever: anti-entropy
    # pushes only logged ops.
    cl = Cluster()
    m, b, c = cl.ids
    for _ in range(2):
        cl.tick(500)
        cl.deliver()  # every member holds every other's offer
    to_b = lambda s, d, msg: d == b and isinstance(msg, Replicate)  # noqa: E731
    cl.call(c, "write", "x", [("note.new", "inbox:x", {"id": "x", "from": "c", "to": "x"})])
    cl.deliver(drop=to_b)
    x = cl.replies["x"][0].op_id
    assert x in cl.cores[m]._seen and x not in cl.cores[b]._seen
    cl.tick(500)
    cl.deliver(drop=to_b)  # m's offer shows x to b and c
    assert cl.cores[b].peer_vv[m].get(c, 0) >= x[1]
    cl.seed(m, b)  # the copy lacks x
    assert x not in cl.cores[m]._seen and cl.cores[m].recovering
    silent = lambda s, d, msg: s == m or d == m  # noqa: E731  (m's new process not heard yet)
    for _ in range(3):
        cl.tick(500)
        cl.deliver(drop=silent)
    assert x in cl.cores[b]._seen  # x reached the donor after its copy was taken
    assert x not in logged(cl, c)  # c collected x over m's old offer...
    assert x in logged(cl, b)  # ...but the donor did not: it can still push x to m
    recover(cl, m)
    core = cl.cores[m]
    assert x in core._seen and not core.recovering
    assert cl.cores[b].status(cl.now)["peers"][m]["reseeding"] is False


def test_an_offer_of_the_members_previous_process_sets_no_floor_after_reseeding() -> None:
    cl = Cluster()
    m, b, _c = cl.ids
    for _ in range(2):
        cl.tick(500)
        cl.deliver()
    assert m in cl.cores[b].peer_vv
    old_offer = SyncOffer(cl.cores[m].durable_vv, cl.cores[m]._fingerprint)
    cl.seed(m, b)
    assert m not in cl.cores[b].peer_vv
    # Still in flight from m's previous process: it must not bring the floor back.
    cl.run(b, cl.cores[b].on_message(m, old_offer, cl.now))
    assert m not in cl.cores[b].peer_vv
    assert cl.cores[b].status(cl.now)["peers"][m]["reseeding"] is True
    # The new process announces itself; from then on its offers count.
    cl.run(b, cl.cores[b].on_message(m, RecoveryQuery(
        "inc-new", cl.cores[m].recovery.round, cl.cores[m].vv), cl.now))
    new_offer = SyncOffer(cl.cores[m].durable_vv, cl.cores[m]._fingerprint)
    cl.run(b, cl.cores[b].on_message(m, new_offer, cl.now))
    assert cl.cores[b].peer_vv[m] == cl.cores[m].durable_vv


def test_a_late_reseeding_stops_taking_the_members_offers_for_the_hold_only() -> None:
    # A Reseeding sent before the member's query can arrive after it (a
    # check round whose call timed out, review 2026-12-05); without a bound
    # the peer would take none of the member's offers, and so collect
    # nothing, until the member's next query, which a recovered member never sends.
    cl = Cluster()
    m, b, _c = cl.ids
    core = cl.cores[b]
    cl.run(b, core.on_message(m, Reseeding(""), cl.now))
    offer = SyncOffer(cl.cores[m].durable_vv, cl.cores[m]._fingerprint)
    cl.run(b, core.on_message(m, offer, cl.now + core.reseeding_hold_ms - 1))
    assert m not in core.peer_vv and core.status(cl.now)["peers"][m]["reseeding"] is True
    cl.run(b, core.on_message(m, offer, cl.now + core.reseeding_hold_ms))
    assert core.peer_vv[m] == cl.cores[m].durable_vv
    assert core.status(cl.now)["peers"][m]["reseeding"] is False


def test_a_recovery_query_of_a_new_incarnation_drops_the_floor_held_for_it() -> None:
    # A member that did not hear the Reseeding (c, cut off while m was
    # seeded) learns of the new process from its query.
    cl = Cluster()
    m, _b, c = cl.ids
    for _ in range(2):  # the first tick only schedules the first offer
        cl.tick(500)
        cl.deliver()
    assert m in cl.cores[c].peer_vv
    query = RecoveryQuery(cl.cores[m].incarnation, "r1", {})  # c never heard m's before
    cl.run(c, cl.cores[c].on_message(m, query, cl.now, cl.cores[m].incarnation))
    assert m not in cl.cores[c].peer_vv
    cl.tick(500)
    cl.deliver()
    assert m in cl.cores[c].peer_vv  # the next offer counts again


def note(nid: str) -> list[tuple[str, str, dict[str, Any]]]:
    return [("note.new", "inbox:x", {"id": nid, "from": "a", "to": "x"})]


def test_an_op_of_the_previous_process_landing_after_recovery_keeps_its_id_to_itself() -> None:
    # The shape of seed 808 (shifted workload): (n1, 17) was a claim of n1's
    # previous process on every peer, and the acknowledged note.read its new
    # process numbered 17 was taken for a duplicate there: an acknowledged
    # write lost. Reseeding changes nothing here (it is about GC floors),
    # and neither would numbering past every id the peers' vectors show:
    # when they answered, no peer had seen the old op at all.
    cl = Cluster()
    m, b, c = cl.ids
    cl.call(m, "write", "w0", note("first"))
    cl.deliver()
    cl.call(m, "write", "old", note("old"))  # its Replicates are still in flight...
    in_flight = [q for q in cl.queue if q[0] == m]
    assert in_flight and cl.replies.get("old") is None
    old = cl.cores[m]._writes["old"][0].op_id
    cl.seed(m, b)  # ...when m loses its disk
    recover(cl, m)
    assert not cl.cores[m].recovering
    cl.queue.extend(in_flight)  # they land after the peers answered m's queries
    cl.deliver()
    cl.call(m, "write", "new", note("new"))
    cl.deliver()
    got = cl.replies["new"]
    assert isinstance(got, list), got  # acknowledged (the peers acked the id they held)
    new_id = got[0].op_id
    held = {n: cl.disks[n].ops_missing({}, 10 ** 6) for n in (b, c)}
    for n in (b, c):
        ops = {op.op_id: op for op in held[n]}
        assert new_id != old or ops[new_id].body["id"] == "new", (
            f"{n} holds {old} as the previous process's note, not the acknowledged one")


def test_a_late_query_of_an_earlier_replaced_disk_does_not_fence_off_the_live_one() -> None:
    # The reviewer's case: m is seeded twice in a row; the first new disk's
    # query to b is held back and lands after the second disk recovered.
    # Ids order by birth, so b keeps the live disk and drops the late query.
    cl = Cluster()
    m, b, c = cl.ids
    cl.call(m, "write", "w0", note("first"))
    cl.deliver()
    cl.seed(m, c)
    first = cl.cores[m].incarnation
    cl.tick(250)
    held = [q for q in cl.queue if q[0] == m and q[1] == b and isinstance(q[2], RecoveryQuery)]
    assert held
    cl.seed(m, c)  # lost again before it recovered
    second = cl.cores[m].incarnation
    assert second != first
    recover(cl, m)
    assert not cl.cores[m].recovering
    cl.queue.extend(held)
    cl.deliver()
    stale = [e for e in cl.effects[b] if isinstance(e, StaleSender)]
    assert [(e.incarnation, e.current, e.kind) for e in stale] == [
        (first, second, "RecoveryQuery")]
    cl.call(m, "write", "after", note("after"))
    cl.deliver()
    assert isinstance(cl.replies["after"], list)
    op_id = cl.replies["after"][0].op_id
    assert op_id in {op.op_id for op in cl.disks[b].ops_missing({}, 10 ** 6)}  # b still takes m


def test_a_query_of_a_retired_disk_is_dropped_and_says_so() -> None:
    cl = Cluster()
    m, b, _c = cl.ids
    core = cl.cores[b]
    older, newer = incarnation_id(10, "a" * 16), incarnation_id(20, "b" * 16)
    assert core.on_message(m, RecoveryQuery(older, "r1", {}), cl.now, older)
    assert core.on_message(m, RecoveryQuery(newer, "r2", {}), cl.now, newer)  # moves on
    out = core.on_message(m, RecoveryQuery(older, "r3", {}), cl.now, older)
    assert out == [StaleSender(m, older, newer, "RecoveryQuery")]
    # The envelope and the query must agree: a query of another disk in
    # an old process's envelope is dropped too.
    out = core.on_message(m, RecoveryQuery(incarnation_id(30, "c" * 16), "r4", {}), cl.now, older)
    assert out == [StaleSender(m, older, newer, "RecoveryQuery")]
    # The old process's replication is dropped; the live one's is taken.
    assert core.on_message(m, Replicate((), ack=True), cl.now, older) == [
        StaleSender(m, older, newer, "Replicate")]
    assert core.on_message(m, Replicate((), ack=True), cl.now, newer) != [
        StaleSender(m, newer, newer, "Replicate")]


def test_ids_of_the_older_unordered_form_move_on_with_each_new_query() -> None:
    # Databases made before ids carried their birth: the latest query wins,
    # as it did before, and an ordered id replaces an unordered one for good.
    cl = Cluster()
    m, b, _c = cl.ids
    core = cl.cores[b]
    one, two, three, ordered = "1f" * 16, "2e" * 16, "0a" * 16, incarnation_id(5, "d" * 16)
    for inc in (two, one, three):
        out = core.on_message(m, RecoveryQuery(inc, "r", {}), cl.now, inc)
        assert not any(isinstance(e, StaleSender) for e in out), inc
    # ...but one already replaced stays replaced:
    out = core.on_message(m, RecoveryQuery(one, "r", {}), cl.now, one)
    assert out == [StaleSender(m, one, three, "RecoveryQuery")]
    core.on_message(m, RecoveryQuery(ordered, "r", {}), cl.now, ordered)
    out = core.on_message(m, RecoveryQuery("4d" * 16, "r", {}), cl.now, "4d" * 16)
    assert out == [StaleSender(m, "4d" * 16, ordered, "RecoveryQuery")]
