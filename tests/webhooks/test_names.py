"""Event names and filters, without a node: ``events`` in each upstream
shape, aliases delivered under their own name, exact namespace and agent
filters, the link event, and a webhook file made before the filters existed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from common import ops as K
from common.ops import Op
from daemon.webhooks import db as webhook_db
from daemon.webhooks import events as E
from daemon.webhooks import intake, outbox
from daemon.webhooks.db import WebhookDB
from daemon.webhooks.filters import route
from daemon.webhooks.names import ACCEPTED, parse_events
from daemon.webhooks.registry import Registry, Subscription

T0 = 1_777_267_800_000


@pytest.mark.parametrize(("value", "parsed"), [
    (None, ()), ("*", ()), ([], ()), (["*"], ()), (["memory_store", "*"], ()),
    ("memory_store", ("memory_store",)),
    (" memory_store , notify ,", ("memory_store", "notify")),
    (["agent_notified", "notify"], ("agent_notified",)),
    (["memory_consolidate", "memory_consolidated"], ("memory_consolidate",)),
    (["approval_requested"], ("approval_requested",)),
])
def test_events_shapes(value: object, parsed: tuple[str, ...]) -> None:
    assert parse_events(value) == parsed


@pytest.mark.parametrize(("value", "words"), [
    ("", "at least one event"), (",", "at least one event"), (3, "list of event names"),
    ({"a": 1}, "list of event names"), ([3], "must be a string"),
    (["nope"], "unknown event 'nope'"), ("memory_store,nope", "unknown event 'nope'"),
    (["*", "nope"], "unknown event 'nope'"),
    (["notify"] * (len(ACCEPTED) + 1), "at most"),
])
def test_bad_events(value: object, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_events(value)


def sub(events: tuple[str, ...] = (), ns: str | None = None, ns_exact: str | None = None,
        agent: str | None = None) -> Subscription:
    return Subscription("s", "http://x/", events, ns, "k", T0, namespace_filter=ns_exact,
                        agent_filter=agent)


def test_route_names_and_filters() -> None:
    note = E.Event(E.NOTIFY, "_inbox/bob", {"event": "notify"}, ("alice", "bob"))
    assert route(note, sub()) == "notify"
    assert route(note, sub(("agent_notified",))) == "agent_notified"
    assert route(note, sub(("memory_store",))) is None
    assert route(note, sub(agent="bob")) == "notify" and route(note, sub(agent="alice"))
    assert route(note, sub(agent="carol")) is None
    mem = E.Event(E.MEMORY_STORE, "team/a", {}, ("alice",))
    assert route(mem, sub(ns_exact="team/a")) and route(mem, sub(ns="team/"))
    assert route(mem, sub(ns_exact="team")) is None
    assert route(E.Event(E.MEMORY_STORE, "team/ab", {}), sub(ns_exact="team/a")) is None
    assert route(E.Event(E.MEMORY_STORE, None, {}), sub(ns_exact="team/a")) is None
    assert route(E.Event(E.MEMORY_STORE, "team/a", {}), sub(agent="alice")) is None
    assert route(mem, sub(("memory_store",), "team", "team/a", "alice")) == "memory_store"
    assert route(mem, sub(("memory_store",), "other", "team/a", "alice")) is None


def test_alias_body_renames_only_the_event() -> None:
    ev = E.Event(E.NOTIFY, "ns", {"event": "notify", "id": "n1"})
    assert json.loads(ev.body_as("agent_notified")) == {"event": "agent_notified", "id": "n1"}
    assert ev.body_as("notify") == ev.body()


def test_link_event_takes_the_source_namespace() -> None:
    link = Op("n1", 9, T0 << 16, K.LINK_PUT, "mem:a",
              {"source_id": "a", "target_id": "b", "relation": "related_to",
               "created_at_ms": T0})
    assert E.version_key(link) == "a"
    known = E.MemoryVersion((1, "n1", 1), "mid", "team/a", "alice", None)
    ev = E.classify(link, known, "node1")
    assert ev is not None and ev.name == E.MEMORY_LINK_CREATED and ev.namespace == "team/a"
    assert ev.payload == {"event": "memory_link_created", "memory_id": "a", "source_id": "a",
                          "target_id": "b", "relation": "related_to", "namespace": "team/a",
                          "agent_id": None, "timestamp": "2026-04-27T05:30:00.000Z",
                          "node_id": "node1", "change_id": "n1#9"}
    unknown = E.classify(link, None, "node1")
    assert unknown is not None and unknown.namespace is None


async def test_alias_rows_carry_the_alias(tmp_path: Path) -> None:
    db = await WebhookDB.open(str(tmp_path / "a.webhooks.sqlite"))
    try:
        reg = Registry(db, cap=10)
        await reg.add(Subscription("up", "http://x/up", ("agent_notified",), None, "k", T0))
        await reg.add(Subscription("ours", "http://x/ours", (), None, "k", T0))
        note = Op("n1", 1, T0 << 16, K.NOTE_NEW, "agent:bob",
                  {"id": "n1", "from": "alice", "to": "bob", "namespace": "_inbox/bob"})
        res = await db.call(intake.admit, [note], reg.all(), "node1", T0, 100)
        assert dict(res.enqueued) == {"agent_notified": 1, "notify": 1}
        rows = {}
        for head in await db.call(outbox.heads):
            row = await db.call(outbox.fetch, head.seq)
            assert row is not None
            rows[row.sub_id] = (row.event, json.loads(row.body)["event"])
        assert rows == {"up": ("agent_notified", "agent_notified"), "ours": ("notify", "notify")}
    finally:
        await db.close()


async def test_a_file_from_before_the_filters_opens_with_none(tmp_path: Path) -> None:
    path = str(tmp_path / "old.webhooks.sqlite")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(f"BEGIN;\n{webhook_db.MIGRATIONS[0]}\nPRAGMA user_version = 1;\nCOMMIT;")
    conn.execute("INSERT INTO webhook_subscriptions VALUES"
                 " ('old', 'http://x/', '[\"notify\"]', 'team', 'k', 1, 'alice')")
    conn.close()
    db = await WebhookDB.open(path)
    try:
        reg = Registry(db, cap=10)
        await reg.load()
        (old,) = reg.all()
        assert (old.events, old.namespace, old.namespace_filter, old.agent_filter,
                old.signature_version) == (("notify",), "team", None, None, "secret")
        assert await db.call(lambda c: c.execute("PRAGMA user_version").fetchone()[0]) == 2
    finally:
        await db.close()
