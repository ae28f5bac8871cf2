"""Hypothesis strategies for realistic op histories.

A history is what a small cluster could really produce: each origin numbers
its ops 1..n without gaps and stamps them with strictly increasing HLCs,
while ids, agents, mailboxes and request ids come from tiny pools so that
ops collide on the same records (concurrent puts and deletes, retries that
re-create an id, competing claims at different epochs, read marks before
their notification).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from hypothesis import strategies as st

from common import ops as K
from common.ops import Op

ORIGINS = ("n1", "n2", "n3")
AGENTS = ("alice", "bob")
MEM_IDS = ("m0", "m1", "m2")
NOTE_IDS = ("x0", "x1", "x2", "x3")
MSG_IDS = ("g0", "g1", "g2")
SESSIONS = ("s0", "s1", "s2")
SCOPES = (("w", "p"), ("w", "q"))
HARNESSES = ("codex", "claude")
# Notifications expire before, after or never relative to APPLY_NOW.
APPLY_NOW = 10_000
EXPIRIES = (None, 5_000, 50_000)

small_int = st.integers(0, 3)
text = st.sampled_from(("", "a", "bé", "long text " * 3))


@st.composite
def _mem_put(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    mid = draw(st.sampled_from(MEM_IDS))
    body = {
        "id": mid, "title": draw(text), "content": draw(text),
        "tier": draw(st.sampled_from(("short", "mid", "long"))),
        "namespace": draw(st.sampled_from(("ns/a", "ns/b"))),
        "tags": draw(st.lists(st.sampled_from(("t1", "t2", "t3")), max_size=3, unique=True)),
        "priority": draw(st.integers(1, 10)), "confidence": draw(st.sampled_from((0.5, 1.0))),
        "source": "api", "metadata": draw(st.dictionaries(st.sampled_from("kv"), small_int)),
        "agent_id": draw(st.sampled_from(AGENTS)), "created_at_ms": draw(small_int),
        "updated_at_ms": draw(st.integers(0, 20)),
        "expires_at_ms": draw(st.sampled_from(EXPIRIES)),
    }
    return K.MEM_PUT, K.mem_key(mid), body


@st.composite
def _mem_del(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    mid = draw(st.sampled_from(MEM_IDS))
    return K.MEM_DEL, K.mem_key(mid), {"id": mid}


@st.composite
def _note_new(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    to = draw(st.sampled_from(AGENTS))
    body = {
        "id": draw(st.sampled_from(NOTE_IDS)), "from": draw(st.sampled_from(AGENTS)), "to": to,
        "namespace": "inbox", "title": draw(text), "payload": draw(text),
        "priority": draw(st.integers(1, 10)), "tier": "short",
        "created_at_ms": draw(st.integers(0, 20)),
        "expires_at_ms": draw(st.sampled_from(EXPIRIES)),
    }
    if draw(st.booleans()):  # a reply (threads): a later field some sends leave out
        body["in_reply_to"] = draw(st.sampled_from(NOTE_IDS))
        body["thread_id"] = draw(st.sampled_from(NOTE_IDS))
    return K.NOTE_NEW, K.inbox_key(to), body


@st.composite
def _note_read(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    to = draw(st.sampled_from(AGENTS))
    ids = draw(st.lists(st.sampled_from(NOTE_IDS), min_size=1, max_size=3, unique=True))
    return K.NOTE_READ, K.inbox_key(to), {"to": to, "ids": ids}


@st.composite
def _agent_reg(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    agent = draw(st.sampled_from(AGENTS))
    body = {"agent_id": agent, "agent_type": draw(st.sampled_from(("ai", "human"))),
            "capabilities": draw(st.lists(st.sampled_from(("a", "b")), max_size=2)),
            "registered_at_ms": draw(st.integers(0, 20))}
    return K.AGENT_REG, K.agent_key(agent), body


@st.composite
def _agent_seen(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    agent = draw(st.sampled_from(AGENTS))
    return K.AGENT_SEEN, K.agent_key(agent), {"agent_id": agent, "at_ms": draw(st.integers(0, 40))}


# A record every lane keeps may carry the stamp minted with its body (the
# lane that took the request; store.records.body_rank), which ranks it.
RANK_CLOCKS = ("n1/0", "n1/1", "n2/0")


def _maybe_ranked(draw: st.DrawFn, body: dict[str, Any]) -> dict[str, Any]:
    if draw(st.booleans()):
        body["rank"] = [draw(st.integers(0, 12)), draw(st.sampled_from(RANK_CLOCKS))]
    return body


@st.composite
def _session_start(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    ws, proj = draw(st.sampled_from(SCOPES))
    body = {"workspace": ws, "project": proj, "harness": draw(st.sampled_from(HARNESSES)),
            "session_id": draw(st.sampled_from(SESSIONS)),
            "owner_user": draw(st.sampled_from((None, "u1"))), "at_ms": draw(st.integers(0, 40))}
    return K.SESSION_START, K.project_key(ws, proj), _maybe_ranked(draw, body)


# A message id names one mailbox (ids are uuid7, or uuid5 of the sender and
# a key), so every copy of a send goes to the same recipient.
MAILBOX_OF = {"g0": SCOPES[0], "g1": SCOPES[1], "g2": SCOPES[0]}


@st.composite
def _msg_send(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    mid = draw(st.sampled_from(MSG_IDS))
    ws, proj = MAILBOX_OF[mid]
    fws, fproj = draw(st.sampled_from(SCOPES))
    body = {
        "id": mid, "to_workspace": ws, "to_project": proj,
        "to_agent": draw(st.sampled_from((None, *HARNESSES))), "from_workspace": fws,
        "from_project": fproj, "from_agent": "other", "from_owner_user": None,
        "subject": draw(text), "body": draw(text),
        "nature": draw(st.sampled_from(("unknown", "measured"))), "evidence": draw(text),
        "created_at_ms": draw(st.integers(0, 20)),
        "approval_required": draw(st.booleans()),
        "approval_note": draw(st.sampled_from((None, "needs a look"))),
    }
    if draw(st.booleans()):  # a reply (threads): a later field some sends leave out
        body["in_reply_to"] = draw(st.sampled_from(MSG_IDS))
        body["thread_id"] = draw(st.sampled_from(MSG_IDS))
    return K.MSG_SEND, K.mailbox_key(ws, proj), body


@st.composite
def _msg_decide(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    ws, proj = draw(st.sampled_from(SCOPES))
    body = {"id": draw(st.sampled_from(MSG_IDS)), "by_user": draw(st.sampled_from((None, "u1"))),
            "by_agent": None, "reason": draw(st.sampled_from((None, "ok", "no"))),
            "at_ms": draw(small_int)}
    kind = K.MSG_APPROVE if draw(st.booleans()) else K.MSG_REJECT
    return kind, K.mailbox_key(ws, proj), body


@st.composite
def _msg_terminal(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    mid = draw(st.sampled_from(MSG_IDS))
    ws, proj = draw(st.sampled_from(SCOPES))
    if draw(st.booleans()):
        body = {"id": mid, "claimer_session": draw(st.sampled_from(SESSIONS)),
                "claimer_agent": draw(st.sampled_from((None, *HARNESSES))),
                "claimer_key": draw(st.sampled_from((None, "k1"))),
                "claimer_agent_id": draw(st.sampled_from((None, *AGENTS))),
                "request_id": draw(st.sampled_from(("r1", "r2"))), "at_ms": draw(small_int)}
        return K.MSG_CLAIM, K.mailbox_key(ws, proj), body
    body = {"id": mid, "by_workspace": ws, "by_project": proj, "at_ms": draw(small_int)}
    return K.MSG_CANCEL, K.mailbox_key(ws, proj), body


@st.composite
def _msg_complete(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    ws, proj = draw(st.sampled_from(SCOPES))
    body = {"id": draw(st.sampled_from(MSG_IDS)),
            "result": draw(st.sampled_from(("done", "blocked", "rejected"))),
            "note": draw(st.sampled_from((None, "ok", "stuck"))),
            "by_session": draw(st.sampled_from((None, *SESSIONS))),
            "by_agent": draw(st.sampled_from((None, *HARNESSES))),
            "by_key": None, "by_agent_id": draw(st.sampled_from((None, *AGENTS))),
            "from_workspace": ws, "from_project": proj, "at_ms": draw(small_int)}
    return K.MSG_COMPLETE, K.mailbox_key(ws, proj), body


@st.composite
def _msg_empty(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    ws, proj = draw(st.sampled_from(SCOPES))
    body = {"request_id": draw(st.sampled_from(("r1", "r2", "r3"))),
            "claimer_session": draw(st.sampled_from((None, *SESSIONS))),
            "claimer_agent": draw(st.sampled_from((None, *HARNESSES))), "at_ms": draw(small_int)}
    return K.MSG_EMPTY, K.mailbox_key(ws, proj), body


@st.composite
def _msg_hold(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    mid = draw(st.sampled_from(MSG_IDS))
    ws, proj = draw(st.sampled_from(SCOPES))
    if draw(st.booleans()):
        body = {"id": mid, "holder_session": draw(st.sampled_from(SESSIONS)),
                "holder_agent": None, "holder_user": draw(st.sampled_from((None, "u1"))),
                "at_ms": draw(small_int)}
        return K.MSG_HOLD, K.mailbox_key(ws, proj), body
    content = draw(st.one_of(st.none(), st.fixed_dictionaries(
        {"subject": st.sampled_from((None, "edited")), "body": text})))
    return K.MSG_RELEASE, K.mailbox_key(ws, proj), {"id": mid, "at_ms": draw(small_int),
                                                     "content": content}


@st.composite
def _msg_purge(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    ws, proj = draw(st.sampled_from(SCOPES))
    body = {"id": draw(st.sampled_from(("pg1", "pg2"))), "workspace": ws, "project": proj,
            "scope": draw(st.sampled_from(("project", "workspace"))), "by_user": "root",
            "reason": None, "at_ms": draw(st.integers(0, 40))}
    return K.MSG_PURGE, K.mailbox_key(ws, proj), body


@st.composite
def _link_put(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    src = draw(st.sampled_from(MEM_IDS))
    body = {"source_id": src, "target_id": draw(st.sampled_from(MEM_IDS)),
            "relation": draw(st.sampled_from(("related_to", "derived_from"))),
            "created_at_ms": draw(st.integers(0, 20))}
    return K.LINK_PUT, K.mem_key(src), body


@st.composite
def _grant_put(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    mid = draw(st.sampled_from(MEM_IDS))
    body = {"memory_id": mid, "agent_id": draw(st.sampled_from(AGENTS)),
            "permission": draw(st.sampled_from(("read", "write"))),
            "granted": draw(st.booleans()), "at_ms": draw(st.integers(0, 20))}
    return K.GRANT_PUT, K.mem_key(mid), body


@st.composite
def _nsub_put(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    agent = draw(st.sampled_from(AGENTS))
    body = {"agent_id": agent, "namespace": draw(st.sampled_from(("ns/a", "ns/b"))),
            "active": draw(st.booleans()), "at_ms": draw(st.integers(0, 20))}
    return K.NSUB_PUT, K.agent_key(agent), body


USERS = ("root", "u1")
KEY_IDS = ("k0", "k1")


@st.composite
def _user_put(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    body = {"name": draw(st.sampled_from(USERS)), "root": draw(st.booleans()),
            "password_hash": draw(st.sampled_from((None, "scrypt$a", "scrypt$b"))),
            "removed": draw(st.booleans()), "created_at_ms": draw(st.integers(0, 20))}
    return K.USER_PUT, K.IDENT_KEY, _maybe_ranked(draw, body)


@st.composite
def _apikey_put(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    body = {"id": draw(st.sampled_from(KEY_IDS)), "user": draw(st.sampled_from(USERS)),
            "agent": draw(st.sampled_from((None, *AGENTS))),
            "label": draw(st.sampled_from((None, "ci"))),
            "hash": draw(st.sampled_from(("h0", "h1"))), "created_at_ms": draw(st.integers(0, 20)),
            "revoked": draw(st.booleans())}
    return K.APIKEY_PUT, K.IDENT_KEY, _maybe_ranked(draw, body)


@st.composite
def _pgrant_put(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    ws, proj = draw(st.sampled_from(SCOPES))
    body = {"user": draw(st.sampled_from(USERS)), "workspace": ws,
            "project": draw(st.sampled_from((None, proj))),
            "access": draw(st.sampled_from(("read", "write"))), "granted": draw(st.booleans()),
            "at_ms": draw(st.integers(0, 20))}
    return K.PGRANT_PUT, K.IDENT_KEY, _maybe_ranked(draw, body)


op_content = st.one_of(_mem_put(), _mem_del(), _note_new(), _note_read(), _agent_reg(),
                       _agent_seen(), _session_start(), _msg_send(), _msg_terminal(),
                       _msg_empty(), _msg_hold(), _msg_hold(), _msg_complete(), _msg_decide(),
                       _msg_purge(), _link_put(), _grant_put(),
                       _nsub_put(), _user_put(), _apikey_put(), _pgrant_put())


@st.composite
def histories(draw: st.DrawFn, max_per_origin: int = 10) -> list[Op]:
    """Ops of up to three origins, each origin gap-free and HLC-increasing."""
    out: list[Op] = []
    for origin in ORIGINS:
        hlc = draw(st.integers(0, 4))
        for seq in range(1, draw(st.integers(0, max_per_origin)) + 1):
            hlc += draw(st.integers(1, 3))
            kind, key, body = draw(op_content)
            epoch = draw(st.integers(0, 2)) if kind in K.MAILBOX_KINDS else 0
            if "rank" in body:  # minted once per body: no two ops share one
                body["rank"] = [body["rank"][0], f"{body['rank'][1]}#{origin}.{seq}"]
            out.append(Op(origin=origin, seq=seq, hlc=hlc, kind=kind, key=key, body=body,
                          epoch=epoch))
    return out


@st.composite
def shuffled_batches(draw: st.DrawFn, ops: list[Op]) -> list[list[Op]]:
    """The same ops, permuted, some repeated, cut into batches."""
    extra = draw(st.lists(st.sampled_from(ops), max_size=len(ops))) if ops else []
    seq = draw(st.permutations(ops + extra))
    cuts = sorted(draw(st.lists(st.integers(0, len(seq)), max_size=4)))
    bounds = [0, *cuts, len(seq)]
    return [seq[a:b] for a, b in pairwise(bounds) if b > a]
