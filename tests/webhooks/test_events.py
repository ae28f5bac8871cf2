"""Op-to-event mapping: store / update / promote / delete, notify, project mail."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from common import ops as K
from common.ops import Op
from daemon.webhooks import events as E
from daemon.webhooks.events import MemoryVersion, classify, next_version
from daemon.webhooks.filters import route
from daemon.webhooks.registry import Subscription

T0 = 1_777_267_800_000


def hlc(ms: int, logical: int = 0) -> int:
    return (ms << 16) | logical


def put(seq: int, ms: int, *, tier: str = "mid", created: int = T0, origin: str = "n1",
        **extra: Any) -> Op:
    body = {"id": "m1", "title": "t", "content": "secret words", "tier": tier,
            "namespace": "team/a", "agent_id": "alice", "created_at_ms": created,
            "updated_at_ms": ms, "expires_at_ms": None, **extra}
    return Op(origin, seq, hlc(ms), K.MEM_PUT, "mem:m1", body)


def delete(seq: int, ms: int, origin: str = "n1") -> Op:
    return Op(origin, seq, hlc(ms), K.MEM_DEL, "mem:m1", {"id": "m1"})


def run(ops: list[Op], prior: MemoryVersion | None = None) -> list[str | None]:
    """Classify ops in order the way the intake does, threading the version."""
    out: list[str | None] = []
    for op in ops:
        ev = classify(op, prior, "node1")
        out.append(ev.name if ev else None)
        prior = next_version(op, prior) or prior
    return out


def test_memory_lifecycle() -> None:
    ops = [put(1, T0), put(2, T0 + 5), put(3, T0 + 9, tier="long"), put(4, T0 + 12, tier="long"),
           delete(5, T0 + 20)]
    assert run(ops) == [E.MEMORY_STORE, E.MEMORY_UPDATE, E.MEMORY_PROMOTE, E.MEMORY_UPDATE,
                        E.MEMORY_DELETE]


def test_created_long_is_a_store_not_a_promote() -> None:
    assert run([put(1, T0, tier="long")]) == [E.MEMORY_STORE]


def test_ops_that_change_nothing_produce_no_event() -> None:
    newer, older = put(2, T0 + 10, origin="n2"), put(1, T0 + 5, origin="n1")
    assert run([put(1, T0, origin="n3"), newer, older]) == [E.MEMORY_STORE, E.MEMORY_UPDATE, None]
    # a second delete, and a put that arrives after the delete
    assert run([put(1, T0), delete(2, T0 + 1), delete(1, T0 + 2, origin="n2"),
                put(3, T0 + 3)]) == [E.MEMORY_STORE, E.MEMORY_DELETE, None, None]


def test_promote_needs_a_known_lower_tier() -> None:
    # an update to long of a memory this node never saw: cannot call it a promote
    assert run([put(7, T0 + 50, tier="long")]) == [E.MEMORY_UPDATE]


def test_memory_payload_shape() -> None:
    ev = classify(put(1, T0), None, "node1")
    assert ev is not None
    assert ev.payload == {
        "event": "memory_store", "memory_id": "m1", "namespace": "team/a", "tier": "mid",
        "agent_id": "alice", "timestamp": "2026-04-27T05:30:00.000Z", "node_id": "node1",
        "change_id": "n1#1"}
    assert b"secret words" not in ev.body()
    assert json.loads(ev.body()) == ev.payload


def test_delete_carries_what_was_known() -> None:
    prior = next_version(put(1, T0), None)
    ev = classify(delete(2, T0 + 1), prior, "node1")
    assert ev is not None and ev.namespace == "team/a" and ev.payload["tier"] == "mid"
    bare = classify(delete(2, T0 + 1), None, "node1")
    assert bare is not None and bare.namespace is None


def test_notify_event() -> None:
    op = Op("n2", 4, hlc(T0), K.NOTE_NEW, "inbox:bob",
            {"id": "x1", "from": "alice", "to": "bob", "namespace": "_inbox/bob", "title": "hi",
             "payload": "private", "priority": 7, "tier": "short", "created_at_ms": T0})
    ev = classify(op, None, "node1")
    assert ev is not None and ev.name == E.NOTIFY
    assert ev.payload["id"] == "x1" and ev.payload["agent_id"] == "alice"
    assert ev.payload["to"] == "bob" and b"private" not in ev.body()


def test_message_send_carries_scope_and_actor_only() -> None:
    body = {"id": "msg-123", "to_workspace": "w", "to_project": "p", "to_agent": "codex",
            "from_workspace": "w", "from_project": "q", "from_agent": "claude",
            "from_owner_user": "ann", "subject": "SUBJ", "body": "BODY TEXT", "nature": "unknown",
            "evidence": "EVID", "created_at_ms": T0}
    ev = classify(Op("n1", 9, hlc(T0), K.MSG_SEND, "mbox:w/p", body), None, "node1")
    assert ev is not None and ev.name == E.MESSAGE_SEND and ev.namespace == "w/p"
    raw = ev.body()
    for leaked in (b"msg-123", b"SUBJ", b"BODY TEXT", b"EVID", b"n1#9"):
        assert leaked not in raw
    assert ev.payload["to_project"] == "p" and ev.payload["from_agent"] == "claude"


def test_a_held_send_asks_for_approval_and_a_decision_says_so() -> None:
    body = {"id": "msg-7", "to_workspace": "w", "to_project": "p", "to_agent": None,
            "from_workspace": "w", "from_project": "q", "from_agent": "claude",
            "from_owner_user": "ann", "subject": "SUBJ", "body": "BODY TEXT", "nature": "unknown",
            "evidence": "EVID", "created_at_ms": T0, "approval_required": True,
            "approval_note": "deploys need a person"}
    ev = classify(Op("n1", 9, hlc(T0), K.MSG_SEND, "mbox:w/p", body), None, "node1")
    assert ev is not None and ev.name == E.APPROVAL_REQUESTED and ev.namespace == "w/p"
    assert ev.payload["id"] == "msg-7" and ev.payload["note"] == "deploys need a person"
    assert ev.payload["change_id"] == "n1#9" and ev.agents == ("claude",)
    for leaked in (b"SUBJ", b"BODY TEXT", b"EVID"):
        assert leaked not in ev.body()
    for kind, word in ((K.MSG_APPROVE, "approved"), (K.MSG_REJECT, "rejected")):
        op = Op("n2", 3, hlc(T0), kind, "mbox:w/p",
                {"id": "msg-7", "by_user": "ben", "by_agent": None, "reason": "ok", "at_ms": T0},
                epoch=5)
        d = classify(op, None, "node2")
        assert d is not None and d.name == E.APPROVAL_DECIDED and d.namespace == "w/p"
        assert (d.payload["decision"], d.payload["by_user"], d.payload["reason"]) == (
            word, "ben", "ok")
        assert (d.payload["workspace"], d.payload["project"], d.payload["id"]) == (
            "w", "p", "msg-7")


def test_claim_and_cancel() -> None:
    claim = Op("n1", 10, hlc(T0), K.MSG_CLAIM, "mbox:w/p",
               {"id": "msg-1", "claimer_session": "s", "claimer_agent": "codex",
                "request_id": "r", "at_ms": T0}, epoch=3)
    cancel = Op("n1", 11, hlc(T0), K.MSG_CANCEL, "mbox:w/p",
                {"id": "msg-2", "by_workspace": "w", "by_project": "q", "at_ms": T0}, epoch=3)
    c1, c2 = classify(claim, None, "n"), classify(cancel, None, "n")
    assert c1 is not None and c1.name == E.MESSAGE_CLAIM and c1.payload["agent_id"] == "codex"
    assert c1.payload["workspace"] == "w" and c1.payload["project"] == "p"
    assert c2 is not None and c2.name == E.MESSAGE_CANCEL and c2.payload["by_project"] == "q"


def test_complete_carries_the_result_not_the_note() -> None:
    op = Op("n2", 4, hlc(T0), K.MSG_COMPLETE, "mbox:w/p",
            {"id": "msg-1", "result": "blocked", "note": "NOTE-TEXT", "by_session": None,
             "by_agent": "codex", "by_key": "k", "by_agent_id": "worker",
             "from_workspace": "w", "from_project": "q", "at_ms": T0})
    ev = classify(op, None, "n")
    assert ev is not None and ev.name == E.MESSAGE_COMPLETE and ev.namespace == "w/p"
    assert ev.payload["id"] == "msg-1" and ev.payload["result"] == "blocked"
    assert ev.payload["from_project"] == "q" and ev.payload["agent_id"] == "worker"
    assert b"NOTE-TEXT" not in ev.body()


def test_ops_without_events() -> None:
    cases: list[tuple[str, str, dict[str, Any]]] = [
        (K.NOTE_READ, "inbox:bob", {"to": "bob", "ids": ["x"]}),
        (K.AGENT_SEEN, "agent:a", {"agent_id": "a", "at_ms": T0}),
        (K.AGENT_REG, "agent:a", {"agent_id": "a"})]
    for kind, key, body in cases:
        assert classify(Op("n1", 1, hlc(T0), kind, key, body), None, "n") is None
    assert E.EVENT_KINDS.isdisjoint({K.NOTE_READ, K.AGENT_SEEN, K.AGENT_REG, K.SESSION_START})


def matches(ev: E.Event, events: tuple[str, ...], namespace: str | None) -> bool:
    return route(ev, Subscription("s", "http://x/", events, namespace, "k", T0)) is not None


def test_subscription_matching() -> None:
    ev = E.Event(E.MEMORY_STORE, "team/a/x", {})
    assert matches(ev, (), None)
    assert matches(ev, (E.MEMORY_STORE,), "team/a")
    assert not matches(ev, (E.MEMORY_DELETE,), None)
    assert not matches(ev, (), "team/b")
    assert not matches(E.Event(E.MEMORY_DELETE, None, {}), (), "team")


def test_the_design_note_lists_every_event_the_code_makes() -> None:
    # daemon/webhooks/DESIGN.md's Events table: one row per op case, the
    # event's name in the second column.
    doc = (Path(E.__file__).parent / "DESIGN.md").read_text()
    table = doc.split("## Events", 1)[1].split("\n\n", 2)[1]
    drawn = {m[1] for line in table.splitlines()[2:]
             for m in [re.match(r"\|[^|]*\| `(\w+)` \|", line)] if m}
    assert drawn == set(E.EVENTS)



def test_a_link_is_an_event_once_the_copy_for_its_target_lane_none() -> None:
    """With lanes a link is written under both ends' keys (each end's lane
    keeps it); the op under its source's key is the event, the copy under
    the target's key makes none, so a subscriber hears of it once."""
    body = {"source_id": "m1", "target_id": "m2", "relation": "derived_from",
            "created_at_ms": T0}
    source = MemoryVersion((hlc(T0), "n1", 1), "mid", "team/a", "alice", None)
    own = classify(Op("n1", 2, hlc(T0 + 1), K.LINK_PUT, "mem:m1", body), source, "node1")
    assert own is not None and own.name == E.MEMORY_LINK_CREATED
    assert classify(Op("n1", 3, hlc(T0 + 1), K.LINK_PUT, "mem:m2", body), None, "node1") is None
