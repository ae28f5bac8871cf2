"""Issue 14 on real processes: a pop answered "nothing pending" must never
claim a message later.

The sequence that lost a message: a pop enters a node whose link to the
mailbox owner is cut one way (a blackhole that holds the bytes), the entry
node gives up on the forward after its timeout and reaches the owner
through the next member, which answers "nothing pending"; a message is sent;
the cut heals and the held first copy of the pop reaches the owner. The
owner must answer that copy with the decision it already made for the
request id, so the message stays pending for the next pop. The drain at the
end pops through every node and must find it.

``AI_MEMORY_POP_DECISION_RUNS=50`` repeats the sequence (each run about
12 s, mostly the forward timeout).
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

from common.ops import mailbox_key
from tests.cluster.harness import LANES, Cluster
from tests.cluster.proxy import BLACKHOLE, PASS
from tests.cluster.test_claims import B, History, owner_order, pop, send, setup_projects

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RUNS = int(os.environ.get("AI_MEMORY_POP_DECISION_RUNS", "1"))


def _owner_alive_at(c: Cluster, entry: str, owner: str, timeout: float = 10.0) -> None:
    """The entry node must believe the owner is up, or it would not forward
    the pop to it at all (and there would be nothing to hold)."""
    end = time.monotonic() + timeout
    lane = c.lane_of(mailbox_key(B["workspace"], B["project"]))
    while time.monotonic() < end:
        if c.status(entry, lane)["peers"][owner]["alive"]:
            return
        time.sleep(0.1)
    raise AssertionError(f"{entry} never saw {owner} alive")


def _one_round(c: Cluster, h: History, tag: str) -> None:
    owner, second, third = owner_order(c, B)
    entry = third
    rid = f"pop-{tag}-{uuid.uuid4().hex[:8]}"
    _owner_alive_at(c, entry, owner)
    c.net.set(entry, owner, BLACKHOLE)  # entry -> owner: held, delivered after the heal
    try:
        started = time.monotonic()
        code, body = pop(c, entry, rid, timeout=30)
        for _ in range(3):  # 503: outcome unknown (a slow machine); retry with the same id
            if code != 503:
                break
            code, body = pop(c, entry, rid, timeout=30)
        waited = time.monotonic() - started
        # The entry node waited out its forward, then asked the next member.
        assert code == 200 and body["message"] is None, (code, body)
        assert waited > 2, f"answered after {waited:.1f} s: the forward was not held"
        code, sent = send(c, second, f"after-empty-{tag}")
        assert code == 201, sent
        h.sent.add(sent["message_id"])
    finally:
        c.net.set(entry, owner, PASS)
    # The held copy of the pop reaches the owner now; give it time to act.
    time.sleep(1.5)
    # The same request id, asked again anywhere, keeps its answer.
    for nid in c.ids:
        code, again = pop(c, nid, rid)
        assert code == 200 and again["message"] is None, (nid, again)
    listing_code, listing = c.call(second, "GET",
                                   "/api/v1/messages?workspace=default&project=proj-b")
    assert listing_code == 200
    states = {m["id"]: m["state"] for m in listing["messages"]}
    assert states.get(sent["message_id"]) == "pending", (
        f"the message sent after the empty answer is {states.get(sent['message_id'])}: "
        "a late copy of the answered pop claimed it")
    h.drain(c, owner)


@LANES
def test_a_late_copy_of_an_answered_pop_claims_nothing(cluster: Cluster) -> None:
    setup_projects(cluster)
    h = History()
    for i in range(RUNS):
        _one_round(cluster, h, str(i))
    h.check_final(cluster)
