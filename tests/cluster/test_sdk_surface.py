"""The official SDK against a real 3-node cluster: every public method of
``AiMemoryClient`` (and of ``AsyncAiMemoryClient``) is called with real
arguments and its result checked, with writes on one node and reads on
another, so each answer also proves replication and the read quorum."""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ai_memory import AiMemoryClient, AsyncAiMemoryClient
from ai_memory.errors import NotFoundError, ValidationError
from ai_memory.models import (
    AgentRegistration,
    Memory,
    RecallResponse,
    Stats,
    Subscription,
    UpdateMemory,
)

from tests.cluster.harness import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module", params=[1, 2], ids=["one-lane", "two-lanes"])
def trio(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three nodes, run once with one lane each and once with two (every
    memory, mail and notify route of the SDK through a node's one port: with
    two lanes about half of them land on a lane that does not own their key)."""
    c = Cluster(tmp_path_factory.mktemp("sdk3"), lanes=request.param)
    for p in c.procs.values():  # subscriptions below point at a closed loopback port
        p.extra_env["AI_MEMORY_ALLOW_LOOPBACK_WEBHOOKS"] = "1"
    try:
        c.start()
        yield c
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()


PUBLIC = sorted(n for n, f in inspect.getmembers(AiMemoryClient, inspect.isfunction)
                if not n.startswith("_") and n != "close")
CALLED: set[str] = set()


class Recorder:
    """Wraps a client and records which public methods a test called."""

    def __init__(self, client: Any) -> None:
        self._c = client

    def __getattr__(self, name: str) -> Any:
        CALLED.add(name)
        return getattr(self._c, name)


def test_every_sync_method_across_nodes(trio: Cluster) -> None:
    me, bob = _name("writer"), _name("bob")
    ns = _name("ns")
    with AiMemoryClient(trio.url("node1"), agent_id=me) as raw1, \
            AiMemoryClient(trio.url("node2"), agent_id=me) as raw2, \
            AiMemoryClient(trio.url("node3"), agent_id=bob) as raw3:
        c1, c2, c3 = Recorder(raw1), Recorder(raw2), Recorder(raw3)
        assert c1.health()["status"] == "ok"
        assert "ai_memory" in c2.metrics()

        # agents
        c3.register_agent(bob, "claude-code", ["inbox"])
        reg = c1.register_agent(me, "codex", ["notify"])
        assert reg["agent_id"] == me
        agents = {a.agent_id: a for a in c2.agents()}
        assert isinstance(agents[bob], AgentRegistration) and agents[bob].agent_type == "claude-code"

        # CRUD, written on node1, read on node2
        a = Memory.model_validate(c1.store(
            title="Quorum reads", content="R plus W exceeds N so reads see acknowledged writes",
            namespace=ns, tags=["federation", "quorum"], priority=8, tier="long"))
        b = Memory.model_validate(c1.store(
            title="Webhook signatures", content="HMAC over timestamp and raw body",
            namespace=ns, tags=["webhooks"], priority=4, tier="mid"))
        bulk = c1.bulk_store([{"title": f"bulk note {i}", "content": "filler text about nothing",
                               "namespace": ns, "tier": "short"} for i in range(3)])
        assert bulk.created == 3
        # GET /memories and GET /memories/{id} read the local copy (search and the
        # other cross-record reads below pass the read quorum themselves)
        trio.wait_converged()
        got = c2.get(a.id)
        assert got.title == "Quorum reads" and got.tags == ["federation", "quorum"]
        assert {m.id for m in c2.list(namespace=ns, limit=50)} == {a.id, b.id, *bulk.ids}
        assert c2.update(b.id, UpdateMemory(priority=6))["priority"] == 6
        trio.wait_converged()
        assert c3.promote(b.id)["tier"] == "long"

        # search (stored through node1, found through node3), filters, FTS syntax as text
        found = c3.search("acknowledged writes", namespace=ns)
        assert [m.id for m in found] == [a.id]
        assert isinstance(found[0], Memory)
        assert [m.id for m in c3.search("webhooks", namespace=ns)] == [b.id]  # tags are indexed
        assert c3.search("quorum", namespace=ns, min_priority=9) == []
        assert [m.id for m in c3.search("quorum", namespace=ns, tags="federation")] == [a.id]
        assert c3.search('NEAR("quorum" OR) * -', namespace=ns) == []  # never FTS syntax
        assert c3.search("quorum", namespace=ns, tier="short") == []

        recalled = c2.recall("how do quorum reads relate to webhook signatures", namespace=ns)
        assert isinstance(recalled, RecallResponse)
        assert {m.id for m in recalled.memories} == {a.id, b.id}
        assert recalled.count == 2

        # links, lineage
        link = c1.link(a.id, b.id, "related_to")
        assert link["linked"] is True
        links = c2.get_links(b.id)
        assert [(lk["source_id"], lk["target_id"], lk["relation"]) for lk in links] == [
            (a.id, b.id, "related_to")]
        c1.link(b.id, a.id, "derived_from")
        lin = c3.lineage(b.id)
        assert lin["direction"] == "ancestors" and [n["id"] for n in lin["nodes"]] == [a.id]
        assert [n["id"] for n in c3.lineage(a.id, direction="descendants")["nodes"]] == [b.id]

        # stats, namespaces
        stats = c2.stats()
        assert isinstance(stats, Stats) and stats.total >= 5 and stats.links_count >= 2
        by_ns = {n["namespace"]: n["count"] for n in c3.namespaces()}
        assert by_ns[ns] == 5

        # grants: stored and replicated
        g = c1.grant(a.id, bob, "read")
        assert g["granted"] is True
        status, held = trio.call("node3", "GET", f"/api/v1/memories/{a.id}/grants")
        assert status == 200 and [(x["agent_id"], x["permission"]) for x in held["grants"]] == [
            (bob, "read")]
        assert c3.revoke(a.id, bob)["revoked"] is True
        status, held = trio.call("node2", "GET", f"/api/v1/memories/{a.id}/grants")
        assert status == 200 and held["grants"] == []

        # notify / inbox
        sent = c1.notify({"to": bob, "subject": "look", "body": "at the quorum note"})
        assert sent["delivered_to"] == bob
        assert [m["subject"] for m in c3.inbox(agent_id=bob)] == ["look"]
        carol = _name("carol")
        fan = c1.notify({"to": [bob, carol], "subject": "fan-out", "body": "to both"})
        assert fan["delivered_to"] == [bob, carol]
        with AiMemoryClient(trio.url("node2"), agent_id=carol) as cc:
            assert [m["subject"] for m in cc.inbox()] == ["fan-out"]
        assert [m["subject"] for m in c3.inbox(agent_id=bob)] == ["fan-out", "look"]

        # subscriptions
        sub = c2.subscribe({"url": "http://127.0.0.1:9/x", "events": ["memory_consolidate"]})
        assert isinstance(sub, Subscription)
        assert sub.id in {s.id for s in c2.subscriptions()}
        assert c2.unsubscribe(sub.id)

        # upstream's namespace subscriptions replicate like any record
        status, _ = trio.call("node1", "POST", "/api/v1/subscriptions",
                              {"agent_id": bob, "namespace": ns})
        assert status == 201
        status, subs = trio.call("node3", "GET", f"/api/v1/subscriptions?agent_id={bob}")
        assert status == 200 and subs["namespaces"] == [ns]

        # cluster
        info = c3.cluster()
        assert {m["node_id"] for m in info["members"]} == {"node1", "node2", "node3"}
        assert info["quorum_healthy"] is True

        # export from node2, forget on node1, gone on every node
        dump = c2.export()
        assert {m["id"] for m in dump["memories"]} >= {a.id, b.id, *bulk.ids}
        assert len(dump["links"]) >= 2
        # after the export, so the re-import below does not bring it back
        brief = c1.store(title="short-lived", content="gone at the next gc",
                         namespace=_name("ttl"), ttl_secs=1)["id"]
        out = c1.forget(namespace=ns, pattern="bulk note")
        assert out["deleted"] == 3
        assert [m.id for m in c3.search("bulk note", namespace=ns)] == []  # at once, via quorum
        trio.wait_converged()
        for c in (c1, c2, c3):
            assert {m.id for m in c.list(namespace=ns, limit=50)} == {a.id, b.id}
            with pytest.raises(NotFoundError):
                c.get(bulk.ids[0])
        with pytest.raises(ValidationError):
            c1.forget()  # an empty filter would delete everything

        # gc tombstones what has expired (only ``brief`` in this cluster
        # so far), cluster-wide; expired memories are already invisible.
        deadline = time.monotonic() + 10
        while True:
            try:
                c2.get(brief)
            except NotFoundError:
                break
            assert time.monotonic() < deadline, "a 1 s memory still readable after 10 s"
            time.sleep(0.1)
        assert c2.gc()["expired_deleted"] == 1
        trio.wait_converged()
        assert c3.gc()["expired_deleted"] == 0  # the tombstone reached every member
        c3.delete(b.id)
        trio.wait_converged()
        with pytest.raises(NotFoundError):
            c1.get(b.id)

        # import is idempotent: the export re-imported changes nothing
        again = c3.import_(dump)
        assert again["imported"] == 0 and again["errors"] == []
        assert {m.id for m in c1.list(namespace=ns, limit=50)} == {a.id}

    missing = set(PUBLIC) - CALLED
    assert not missing, f"public SDK methods never called: {sorted(missing)}"


def test_export_import_into_fresh_cluster(trio: Cluster, tmp_path: Path) -> None:
    ns = _name("move")
    with AiMemoryClient(trio.url("node1"), agent_id=_name("mover")) as c:
        ids = [c.store(title=f"move {i}", content=f"content {i}", namespace=ns,
                       tags=["t"])["id"] for i in range(4)]
        c.link(ids[0], ids[1], "derived_from")
        dump = c.export()
    mine = {m["id"]: m for m in dump["memories"] if m["namespace"] == ns}
    assert set(mine) == set(ids)
    fresh = Cluster(tmp_path, lanes=trio.lanes)
    try:
        fresh.start()
        with AiMemoryClient(fresh.url("node2")) as f:
            first = f.import_({"memories": list(mine.values()), "links": dump["links"]})
            assert first["imported"] == 4 and first["errors"] == []
            second = f.import_({"memories": list(mine.values()), "links": dump["links"]})
            assert second["imported"] == 0 and second["unchanged"] == 4
        fresh.wait_converged()
        with AiMemoryClient(fresh.url("node3")) as f3:
            after = {m.id: m for m in f3.list(namespace=ns, limit=50)}
            assert set(after) == set(ids)
            for mid, m in after.items():
                src = Memory.model_validate(mine[mid])
                assert (m.title, m.content, m.tags, m.created_at, m.updated_at) == (
                    src.title, src.content, src.tags, src.created_at, src.updated_at)
            assert [n["id"] for n in f3.lineage(ids[0])["nodes"]] == [ids[1]]
            assert len(f3.export()["memories"]) == 4
    finally:
        fresh.stop()


async def test_every_async_method(trio: Cluster) -> None:
    me, other = _name("async"), _name("peer")
    ns = _name("ans")
    async with AsyncAiMemoryClient(trio.url("node2"), agent_id=me) as a, \
            AsyncAiMemoryClient(trio.url("node3"), agent_id=other) as b:
        assert (await a.health())["status"] == "ok"
        assert "ai_memory" in await a.metrics()
        await a.register_agent(me, "codex")
        assert me in {x.agent_id for x in await b.agents()}
        m1 = await a.store(title="async search target", content="zebra crossing", namespace=ns)
        m2 = await a.store(title="second", content="zebra herd", namespace=ns)
        bulk = await a.bulk_store([{"title": "tmp", "content": "to forget", "namespace": ns}])
        await asyncio.to_thread(trio.wait_converged)
        assert (await b.get(m1["id"])).title == "async search target"
        assert [m.id for m in await b.list(namespace=ns, limit=10)]
        assert (await a.update(m2["id"], {"priority": 9}))["priority"] == 9
        assert (await b.promote(m2["id"]))["tier"] == "long"
        assert {m.id for m in await b.search("zebra", namespace=ns)} == {m1["id"], m2["id"]}
        assert (await b.recall("zebra", namespace=ns)).count == 2
        await a.link(m1["id"], m2["id"], "derived_from")
        assert len(await b.get_links(m1["id"])) == 1
        assert (await b.lineage(m1["id"]))["count"] == 1
        assert (await b.stats()).total >= 3
        assert ns in {n["namespace"] for n in await b.namespaces()}
        assert (await a.grant(m1["id"], other))["granted"] is True
        assert (await a.revoke(m1["id"], other))["revoked"] is True
        await a.notify({"to": other, "subject": "hi", "body": "async"})
        assert [r["subject"] for r in await b.inbox()] == ["hi"]
        sub = await a.subscribe({"url": "http://127.0.0.1:9/a", "events": ["memory_consolidate"]})
        assert sub.id in {s.id for s in await a.subscriptions()}
        await a.unsubscribe(sub.id)
        assert len((await b.cluster())["members"]) == 3
        dump = await b.export()
        assert (await a.forget(namespace=ns, pattern="to forget"))["deleted"] == 1
        await asyncio.to_thread(trio.wait_converged)
        with pytest.raises(NotFoundError):
            await b.get(bulk.ids[0])
        assert "expired_deleted" in await a.gc()
        assert (await b.import_(dump))["imported"] == 0
        assert (await a.delete(m1["id"]))["deleted"] is True
