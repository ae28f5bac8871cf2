"""The upstream daemon's subscription shapes on a real node: ``events`` as
``"*"``, a list or a comma-separated string; upstream's event names;
``namespace_filter`` and ``agent_filter``; ``DELETE ?id=``; dead-letter
replay; ``/metrics``."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from common import ops as K
from common.ops import Op
from common.policy import Principal
from daemon.identity.memory_directory import MemoryDirectory
from daemon.settings import AuthSettings, Member
from daemon.webhooks import signing
from daemon.webhooks.config import WebhookSettings
from federation.messages import Replicate
from tests.webhooks.conftest import (
    FAST,
    Daemon,
    Receiver,
    hooked_settings,
    hooks_with,
    wait_until,
)

BASE = "/api/v1/subscriptions"
T0 = 1_777_267_800_000


def as_agent(agent: str) -> dict[str, str]:
    return {"X-Agent-Id": agent}


async def subscribe(d: Daemon, body: dict[str, Any], agent: str = "alice") -> dict[str, Any]:
    resp = await d.c.post(BASE, json=body, headers=as_agent(agent))
    assert resp.status == 201, await resp.text()
    out: dict[str, Any] = await resp.json()
    return out


async def memory(d: Daemon, ns: str, agent: str = "alice", title: str = "t") -> str:
    resp = await d.c.post("/api/v1/memories", json={"title": title, "content": "c",
                                                    "namespace": ns}, headers=as_agent(agent))
    assert resp.status == 201, await resp.text()
    return str((await resp.json())["id"])


async def notify(d: Daemon, sender: str, target: str) -> str:
    resp = await d.c.post("/api/v1/notify", json={"target_agent_id": target, "title": "hi",
                                                  "payload": "p"}, headers=as_agent(sender))
    assert resp.status == 201, await resp.text()
    return str((await resp.json())["id"])


def events_at(rec: Receiver, path: str) -> list[dict[str, Any]]:
    return [json.loads(c.body) for c in rec.ok(path)]


async def test_events_accepted_in_every_upstream_shape(daemon: Daemon, receiver: Receiver) -> None:
    shapes: list[tuple[Any, list[str]]] = [
        ("*", []),
        (["*"], []),
        ("memory_store, notify", ["memory_store", "notify"]),
        ("memory_store,,memory_delete,", ["memory_store", "memory_delete"]),
        (["memory_link_created", "memory_consolidated", "approval_requested", "agent_notified"],
         ["memory_link_created", "memory_consolidated", "approval_requested", "agent_notified"]),
        (["notify", "agent_notified", "notify"], ["notify"]),  # one event: the first name wins
        ([], []),
    ]
    for i, (events, stored) in enumerate(shapes):
        made = await subscribe(daemon, {"url": receiver.at(f"/{i}"), "events": events})
        assert made["events"] == stored, events
    typed = await subscribe(daemon, {"url": receiver.at("/t"), "event_types": ["memory_promote"]})
    assert typed["events"] == ["memory_promote"]
    listed = (await (await daemon.c.get(BASE)).json())["subscriptions"]
    assert [s["events"] for s in listed] == [s for _, s in shapes] + [["memory_promote"]]


async def test_bad_events_say_what_is_wrong(daemon: Daemon, receiver: Receiver) -> None:
    cases = [("memory_store,memory_archive", "unknown event 'memory_archive'"),
             (["approval_granted"], "unknown event 'approval_granted'"),
             ("", "at least one event"),
             (7, "list of event names"),
             ([["memory_store"]], "must be a string")]
    for events, words in cases:
        resp = await daemon.c.post(BASE, json={"url": receiver.at("/x"), "events": events})
        assert resp.status == 400
        err = await resp.json()
        assert words in err["error"] and err["code"], (events, err)
    assert (await (await daemon.c.get(BASE)).json())["count"] == 0


async def test_upstream_names_are_delivered_under_those_names(daemon: Daemon,
                                                             receiver: Receiver) -> None:
    await subscribe(daemon, {"url": receiver.at("/up"),
                             "events": "agent_notified,memory_consolidated,memory_link_created"})
    await subscribe(daemon, {"url": receiver.at("/ours"), "events": "*"})
    a, b = await memory(daemon, "team/a", title="a"), await memory(daemon, "team/a", title="b")
    note = await notify(daemon, "alice", "bob")
    r = await daemon.c.post("/api/v1/links", json={"source_id": a, "target_id": b,
                                                   "relation": "related_to"},
                            headers=as_agent("alice"))
    assert r.status in (200, 201), await r.text()
    r = await daemon.c.post("/api/v1/consolidate", json={"ids": [a, b], "title": "a+b",
                                                         "summary": "merged"},
                            headers=as_agent("alice"))
    assert r.status == 201, await r.text()
    # consolidation links the merged memory to each source: two more link events
    names = ["agent_notified", "memory_link_created", "memory_consolidated",
             "memory_link_created", "memory_link_created"]
    await wait_until(lambda: len(receiver.ok("/up")) == len(names))
    up = receiver.ok("/up")
    assert [json.loads(c.body)["event"] for c in up] == names
    assert [c.headers[signing.EVENT] for c in up] == names
    assert json.loads(up[3].body)["relation"] == "derived_from"
    told = json.loads(up[0].body)
    assert told["id"] == note and told["agent_id"] == "alice" and told["to"] == "bob"
    link = json.loads(up[1].body)
    assert link["memory_id"] == a and link["source_id"] == a and link["target_id"] == b
    assert link["relation"] == "related_to" and link["namespace"] == "team/a"
    await wait_until(lambda: "memory_consolidate" in [e["event"] for e in events_at(receiver,
                                                                                    "/ours")])
    ours = [e["event"] for e in events_at(receiver, "/ours")]
    assert "notify" in ours and "agent_notified" not in ours
    assert "memory_consolidated" not in ours and "memory_link_created" in ours


async def test_namespace_filter_is_exact(daemon: Daemon, receiver: Receiver) -> None:
    made = await subscribe(daemon, {"url": receiver.at("/ns"), "events": "*",
                                    "namespace_filter": "team/a"})
    assert made["namespace_filter"] == "team/a" and made["agent_filter"] is None
    await subscribe(daemon, {"url": receiver.at("/prefix"), "namespace": "team/a"})
    wanted = await memory(daemon, "team/a")
    for ns in ("team/ab", "team/a/sub", "team/b"):
        await memory(daemon, ns)
    last = await memory(daemon, "team/a")
    await wait_until(lambda: len(receiver.ok("/prefix")) == 4)
    await wait_until(lambda: len(receiver.ok("/ns")) == 2)
    await asyncio.sleep(0.2)
    got = events_at(receiver, "/ns")
    assert [e["memory_id"] for e in got] == [wanted, last]
    assert {e["namespace"] for e in got} == {"team/a"}


async def test_agent_filter_gets_only_that_agents_events(daemon: Daemon,
                                                         receiver: Receiver) -> None:
    made = await subscribe(daemon, {"url": receiver.at("/bob"), "agent_filter": "bob",
                                    "namespace_filter": ""})  # "" is upstream's "no filter"
    assert made["agent_filter"] == "bob" and made["namespace_filter"] is None
    by_bob = await memory(daemon, "team/a", agent="bob")
    await memory(daemon, "team/a", agent="carol")
    to_bob = await notify(daemon, "carol", "bob")
    from_bob = await notify(daemon, "bob", "dave")
    await notify(daemon, "carol", "dave")
    last = await memory(daemon, "team/z", agent="bob")
    await wait_until(lambda: len(receiver.ok("/bob")) == 4)
    await asyncio.sleep(0.2)
    got = events_at(receiver, "/bob")
    assert [(e["event"], e.get("memory_id") or e.get("id")) for e in got] == [
        ("memory_store", by_bob), ("notify", to_bob), ("notify", from_bob),
        ("memory_store", last)]


async def test_filters_apply_to_replicated_ops(daemon_factory: Any, receiver: Receiver) -> None:
    d: Daemon = await daemon_factory(peers=(Member("node2", "http://127.0.0.1:1"),),
                                     write_quorum=1)
    await subscribe(d, {"url": receiver.at("/f"), "namespace_filter": "fed",
                        "agent_filter": "carol"})

    def put(seq: int, mid: str, ns: str, agent: str) -> Op:
        return Op("node2", seq, (T0 + seq) << 16, K.MEM_PUT, f"mem:{mid}",
                  {"id": mid, "title": "t", "content": "c", "tier": "mid", "namespace": ns,
                   "agent_id": agent, "created_at_ms": T0 + seq, "updated_at_ms": T0 + seq})

    ops = (put(1, "r1", "fed", "carol"), put(2, "r2", "fed", "dave"),
           put(3, "r3", "other", "carol"), put(4, "r4", "fed", "carol"))
    await d.n.receive("node2", [Replicate(ops=ops, ack=False)])
    await wait_until(lambda: len(receiver.ok("/f")) == 2)
    await asyncio.sleep(0.2)
    assert [e["memory_id"] for e in events_at(receiver, "/f")] == ["r1", "r4"]


async def test_filters_persist_and_count_for_idempotency(daemon_factory: Any,
                                                         receiver: Receiver) -> None:
    d: Daemon = await daemon_factory()
    body = {"url": receiver.at("/p"), "events": "memory_store", "namespace_filter": "team/a",
            "agent_filter": "bob", "signature_version": "sha256-key"}
    hdrs = {**as_agent("alice"), "Idempotency-Key": "wire-1"}
    first = await (await d.c.post(BASE, json=body, headers=hdrs)).json()
    again = await d.c.post(BASE, json=body, headers=hdrs)
    assert again.status == 201 and (await again.json())["replayed"] is True
    other = await d.c.post(BASE, json={**body, "agent_filter": "carol"}, headers=hdrs)
    assert other.status == 409
    await d.stop()
    await d.start()
    (sub,) = (await (await d.c.get(BASE)).json())["subscriptions"]
    assert sub["id"] == first["id"]
    assert (sub["events"], sub["namespace_filter"], sub["agent_filter"],
            sub["signature_version"]) == (["memory_store"], "team/a", "bob", "sha256-key")
    await memory(d, "team/a", agent="carol")
    wanted = await memory(d, "team/a", agent="bob")
    await wait_until(lambda: len(receiver.ok("/p")) == 1)
    assert json.loads(receiver.ok("/p")[0].body)["memory_id"] == wanted


async def test_delete_by_query_id(daemon: Daemon, receiver: Receiver) -> None:
    made = await subscribe(daemon, {"url": receiver.at("/d")})
    gone = await daemon.c.delete(BASE, params={"id": made["id"]}, headers=as_agent("alice"))
    assert gone.status == 200, await gone.text()
    assert (await gone.json()) == {"deleted": True, "id": made["id"], "undelivered_dropped": 0}
    assert (await (await daemon.c.get(BASE)).json())["count"] == 0
    again = await daemon.c.delete(BASE, params={"id": made["id"]})
    assert again.status == 404
    assert (await daemon.c.delete(BASE, params={"id": "bad id"})).status == 400
    # the namespace shape of the same path still works
    resp = await daemon.c.post(BASE, json={"agent_id": "alice", "namespace": "team/a"},
                               headers=as_agent("alice"))
    assert resp.status == 201
    out = await daemon.c.delete(BASE, params={"agent_id": "alice", "namespace": "team/a"},
                                headers=as_agent("alice"))
    assert out.status == 200 and (await out.json())["unsubscribed"] is True


def keyed(tmp_path: Any, hooks: WebhookSettings = FAST) -> Daemon:
    """A daemon in keys mode: ``ka`` is agent alice's key, ``kb`` bob's, ``kr`` root's."""
    directory = MemoryDirectory()
    directory.add("ka", Principal(mode="keys", user="a", agent="alice", agent_bound=True))
    directory.add("kb", Principal(mode="keys", user="b", agent="bob", agent_bound=True))
    directory.add("kr", Principal(mode="keys", user="admin", root=True))
    settings = replace(hooked_settings(tmp_path / "keys.db", hooks), auth=AuthSettings(mode="keys"))
    return Daemon(settings, directory)


def key(k: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {k}"}


async def test_delete_by_query_id_checks_the_author(tmp_path: Any, receiver: Receiver) -> None:
    d = await keyed(tmp_path).start()
    try:
        ids = []
        for _ in range(2):
            resp = await d.c.post(BASE, json={"url": receiver.at("/a")}, headers=key("ka"))
            assert resp.status == 201, await resp.text()
            ids.append((await resp.json())["id"])
        denied = await d.c.delete(BASE, params={"id": ids[0]}, headers=key("kb"))
        assert denied.status == 403
        assert (await d.c.delete(BASE, params={"id": ids[0]}, headers=key("ka"))).status == 200
        assert (await d.c.delete(BASE, params={"id": ids[1]}, headers=key("kr"))).status == 200
    finally:
        await d.stop()


async def test_replay_a_dead_letter(daemon_factory: Any, receiver: Receiver) -> None:
    d: Daemon = await daemon_factory(hooks_with(retry_max=2))
    await subscribe(d, {"url": receiver.at("/r"), "secret": "replay-secret"})
    receiver.script = [500, 500]
    mid = await memory(d, "team/a")
    await wait_until(lambda: d.hooks.dispatcher is not None and d.hooks.dispatcher.dead == 1)
    (row,) = (await (await d.c.get(f"{BASE}/dead-letters")).json())["dead_letters"]
    failed = {c.headers[signing.DELIVERY] for c in receiver.calls}
    assert failed == {row["delivery_id"]} and row["attempts"] == 2
    resp = await d.c.post(f"{BASE}/dead-letters/{row['delivery_id']}/replay",
                          headers=as_agent("alice"))
    assert resp.status == 200, await resp.text()
    out = await resp.json()
    assert out["replayed"] is True and out["delivery_id"] == row["delivery_id"]
    assert out["replaced_seq"] == row["seq"] and out["seq"] > row["seq"]
    await wait_until(lambda: len(receiver.ok("/r")) == 1)
    delivered = receiver.ok("/r")[0]
    assert delivered.headers[signing.DELIVERY] == row["delivery_id"]
    assert json.loads(delivered.body)["memory_id"] == mid
    assert signing.verify_timestamped("replay-secret", delivered.headers[signing.TIMESTAMP],
                                      delivered.body, delivered.headers[signing.SIGNATURE])
    listing = await (await d.c.get(f"{BASE}/dead-letters")).json()
    assert listing["count"] == 0
    assert d.hooks.dispatcher is not None and d.hooks.dispatcher.dead == 0
    assert d.hooks.dispatcher.pending == 0
    assert (await d.c.post(f"{BASE}/dead-letters/{row['delivery_id']}/replay")).status == 404
    assert (await d.c.post(f"{BASE}/dead-letters/no-such/replay")).status == 404
    assert (await d.c.post(f"{BASE}/dead-letters/bad%20id/replay")).status == 400
    assert (await d.c.post(f"{BASE}/dead-letters/{'9' * 40}/replay")).status == 404
    assert (await d.c.post(f"{BASE}/dead-letters/%C2%B2/replay")).status == 400  # "²"
    text = await (await d.c.get("/metrics")).text()
    assert "webhook_replayed_total" in text


async def test_replay_by_seq_and_after_restart(daemon_factory: Any, receiver: Receiver) -> None:
    d: Daemon = await daemon_factory(hooks_with(retry_max=1))
    await subscribe(d, {"url": receiver.at("/s")})
    receiver.script = [503]
    await memory(d, "team/a")
    await wait_until(lambda: d.hooks.dispatcher is not None and d.hooks.dispatcher.dead == 1)
    await d.stop()
    await d.start()
    (row,) = (await (await d.c.get(f"{BASE}/dead-letters")).json())["dead_letters"]
    resp = await d.c.post(f"{BASE}/dead-letters/{row['seq']}/replay")
    assert resp.status == 200, await resp.text()
    await wait_until(lambda: len(receiver.ok("/s")) == 1)


async def test_replay_checks_the_author(tmp_path: Any, receiver: Receiver) -> None:
    d = await keyed(tmp_path, hooks_with(retry_max=1)).start()
    try:
        resp = await d.c.post(BASE, json={"url": receiver.at("/a")}, headers=key("ka"))
        assert resp.status == 201
        receiver.script = [500, 500]
        for _ in range(2):
            r = await d.c.post("/api/v1/memories", json={"title": "t", "content": "c"},
                               headers=key("kr"))
            assert r.status == 201, await r.text()
        await wait_until(lambda: d.hooks.dispatcher is not None and d.hooks.dispatcher.dead == 2)
        rows = (await (await d.c.get(f"{BASE}/dead-letters",
                                     headers=key("kb"))).json())["dead_letters"]
        paths = [f"{BASE}/dead-letters/{row['delivery_id']}/replay" for row in rows]
        assert (await d.c.post(paths[0], headers=key("kb"))).status == 403
        assert d.hooks.dispatcher.dead == 2
        assert (await d.c.post(paths[0], headers=key("ka"))).status == 200
        assert (await d.c.post(paths[1], headers=key("kr"))).status == 200
        await wait_until(lambda: len(receiver.ok("/a")) == 2)
    finally:
        await d.stop()


async def test_metrics_alias(daemon: Daemon) -> None:
    await memory(daemon, "team/a")
    plain = await daemon.c.get("/metrics")
    assert plain.status == 200 and plain.content_type == "text/plain"
    text = await plain.text()
    assert "# TYPE" in text and "http_request_seconds" in text
    api = await (await daemon.c.get("/api/v1/metrics")).text()
    assert api.splitlines()[0] == text.splitlines()[0]


async def test_metrics_alias_needs_a_key_like_the_api_path(tmp_path: Any) -> None:
    d = await keyed(tmp_path).start()
    try:
        for path in ("/metrics", "/api/v1/metrics"):
            assert (await d.c.get(path)).status == 401
            assert (await d.c.get(path, headers=key("kr"))).status == 200
    finally:
        await d.stop()
