"""``/mcp`` on every node of a real 3-node cluster, driven by the official MCP client.

Three ``ai-memory serve`` processes (real SQLite, loopback, the cluster
harness of ``tests/cluster``) with static API keys required, so every call
is authenticated as the HTTP API authenticates it. The client is the SDK's
own (``mcp.client.Client`` over ``streamable_http_client``), once per node.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.cluster.harness import Cluster, http
from tests.mcp.conftest import ok, tool_error
from tests.mcp.test_forwarding import ALL_TOOLS

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

KEYS = {"key-alice": "alice", "key-bob": "bob", "key-carol": "carol"}


@pytest.fixture(scope="module")
def keyed_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("mcp-cluster")
    config = tmp / "auth.toml"
    config.write_text("[auth]\nrequire_api_key = true\n[auth.api_keys]\n"
                      + "".join(f'"{k}" = "{v}"\n' for k, v in KEYS.items()))
    c = Cluster(tmp)
    for p in c.procs.values():
        p.extra_env.update({"AI_MEMORY_CONFIG": str(config),
                            "AI_MEMORY_ALLOW_LOOPBACK_WEBHOOKS": "1"})
    try:
        c.start()
        yield c
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()


@asynccontextmanager
async def mcp(url: str, **headers: str) -> AsyncIterator[Client]:
    """An MCP client of ``url``/mcp sending ``headers`` on every request."""
    async with httpx2.AsyncClient(headers=headers, timeout=30.0) as client:
        async with Client(streamable_http_client(url + "/mcp", http_client=client)) as session:
            yield session


def start_session(c: Cluster, node: str, workspace: str, project: str, harness: str) -> str:
    sid = str(uuid.uuid4())
    status, body = c.call(node, "POST", "/api/v1/sessions",
                          {"workspace": workspace, "project": project, "harness": harness,
                           "session_id": sid}, headers={"X-API-Key": "key-alice"})
    assert status == 201, body
    return sid


async def test_every_node_serves_every_tool(keyed_cluster: Cluster) -> None:
    for nid in keyed_cluster.ids:
        async with mcp(keyed_cluster.url(nid), **{"X-API-Key": "key-alice"}) as client:
            tools = (await client.list_tools()).tools
        assert {t.name for t in tools} == ALL_TOOLS, nid
        pop = next(t for t in tools if t.name == "memory_message_pop")
        assert "untrusted" in (pop.description or "")


async def test_a_missing_or_wrong_key_is_refused(keyed_cluster: Cluster) -> None:
    url = keyed_cluster.url("node2") + "/mcp"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}}}
    accept = {"Accept": "application/json, text/event-stream"}
    for headers, code, status in [
        ({}, "key_required", 401),
        ({"X-API-Key": "not-a-key"}, "unknown_key", 401),
        ({"X-API-Key": "key-bob", "X-Agent-Id": "alice"}, "forbidden", 403),
        ({"X-API-Key": "key-bob", "Origin": "http://evil.example:9077"}, "bad_origin", 403),
        ({"X-API-Key": "key-bob", "Origin": "null"}, "bad_origin", 403),
    ]:
        got, body = http("POST", url, init, {**accept, **headers})
        assert (got, body["code"]) == (status, code), (headers, body)
        assert set(body) >= {"error", "code"}
    # and the SDK's client reports the refusal instead of connecting
    with pytest.raises(Exception):  # noqa: B017 - the SDK's own error type for a 401
        async with mcp(keyed_cluster.url("node2")) as client:
            await client.list_tools()
    for extra in ({}, {"Origin": "http://127.0.0.1:3000"}):
        got, body = http("POST", url, init, {**accept, "X-API-Key": "key-bob", **extra})
        assert got == 200 and body["result"]["serverInfo"]["name"] == "ai-memory"


async def test_notify_through_node1_is_read_through_node3(keyed_cluster: Cluster) -> None:
    async with mcp(keyed_cluster.url("node1"), **{"X-API-Key": "key-alice"}) as alice:
        sent = ok(await alice.call_tool("memory_notify", {
            "target_agent_id": "bob", "title": "review", "payload": "the draft is ready",
            "priority": 7, "tier": "mid"}))
    assert sent["delivered_to"] == "bob"
    async with mcp(keyed_cluster.url("node3"), **{"X-API-Key": "key-bob"}) as bob:
        inbox = ok(await bob.call_tool("memory_inbox", {"mark_read": True, "tier": "mid"}))
        again = ok(await bob.call_tool("memory_inbox", {}))
        old = ok(await bob.call_tool("memory_inbox", {
            "unread_only": False, "since": "2999-01-01T00:00:00Z"}))
        other = await bob.call_tool("memory_inbox", {"as_agent": "alice"})
    ids = [n["id"] for n in inbox["notifications"]]
    assert sent["notification_id"] in ids
    note = next(n for n in inbox["notifications"] if n["id"] == sent["notification_id"])
    assert (note["from"], note["title"], note["payload"]) == ("alice", "review",
                                                              "the draft is ready")
    assert sent["notification_id"] not in [n["id"] for n in again["notifications"]]
    assert old["count"] == 0  # nothing arrived after the year 2999
    assert tool_error(other)["status"] == 403  # the key decides whose inbox it is


async def test_mail_sent_through_node1_is_popped_once_through_node2(keyed_cluster: Cluster) -> None:
    suffix = uuid.uuid4().hex[:8]
    proj_a, proj_b = f"a-{suffix}", f"b-{suffix}"
    start_session(keyed_cluster, "node1", "default", proj_a, "kimi")
    sid_b = start_session(keyed_cluster, "node1", "default", proj_b, "claude-code")
    key = {"X-API-Key": "key-alice"}
    async with mcp(keyed_cluster.url("node1"), **key) as one:
        sent = ok(await one.call_tool("memory_message_send", {
            "to_workspace": "default", "to_project": proj_b, "subject": "export",
            "body": "add an NDJSON export endpoint",
            "from_workspace": "default", "from_project": proj_a}))
        second = ok(await one.call_tool("memory_message_send", {
            "to_workspace": "default", "to_project": proj_b, "body": "and a second thing",
            "from_workspace": "default", "from_project": proj_a}))
    async with mcp(keyed_cluster.url("node3"), **key) as three:
        listed = ok(await three.call_tool("memory_message_list", {
            "workspace": "default", "project": proj_b}))
        brief = ok(await three.call_tool("memory_briefing", {
            "workspace": "default", "project": proj_b}))
    assert [m["id"] for m in listed["messages"]] == [sent["message_id"], second["message_id"]]
    assert brief["pending_message_count"] == 2
    # node2 pops as B's hook session: the scope comes from the session header
    async with mcp(keyed_cluster.url("node2"), **key,
                   **{"x-memory-actor-session-id": sid_b}) as two:
        popped = ok(await two.call_tool("memory_message_pop", {}))
    assert popped["message"]["id"] == sent["message_id"]
    assert "untrusted-input" in popped["message"]["body"] and popped["security_notice"]
    assert (popped["workspace"], popped["project"]) == ("default", proj_b)
    async with mcp(keyed_cluster.url("node3"), **key) as three:
        # cancel without message_id clears A's outbox: only the unclaimed one is left to cancel
        cancelled = ok(await three.call_tool("memory_message_cancel", {
            "workspace": "default", "project": proj_a}))
        empty = ok(await three.call_tool("memory_message_pop", {
            "workspace": "default", "project": proj_b}))
    assert cancelled["cancelled"] == [second["message_id"]]
    assert empty["message"] is None


async def test_argument_errors_read_like_the_http_api_and_write_nothing(
        keyed_cluster: Cluster) -> None:
    suffix = uuid.uuid4().hex[:8]
    proj = f"c-{suffix}"
    start_session(keyed_cluster, "node2", "default", proj, "codex")
    async with mcp(keyed_cluster.url("node2"), **{"X-API-Key": "key-carol"}) as client:
        missing = tool_error(await client.call_tool("memory_message_send", {
            "to_workspace": "default", "to_project": proj}))
        bad_type = tool_error(await client.call_tool("memory_notify", {
            "target_agent_id": "bob", "title": "t", "payload": "p", "priority": "high"}))
        unknown = tool_error(await client.call_tool("memory_message_send", {
            "to_workspace": "default", "to_project": f"nope-{suffix}", "body": "x",
            "from_workspace": "default", "from_project": proj}))
        guessed = tool_error(await client.call_tool("memory_message_pop", {}))
        listed = ok(await client.call_tool("memory_message_list", {
            "box": "outbox", "workspace": "default", "project": proj}))
    assert missing == {"error": "body: Field required", "code": "bad_request", "status": 400}
    assert bad_type["code"] == "bad_request" and bad_type["error"].startswith("priority:")
    assert (unknown["code"], unknown["status"]) == ("not_found", 404)
    assert guessed["code"] == "conflict" and guessed["scope_source"]
    assert listed["count"] == 0  # nothing was sent
    # the HTTP API says the same words for the same bad field
    status, body = keyed_cluster.call("node2", "POST", "/api/v1/messages", {
        "to_workspace": "default", "to_project": proj}, headers={"X-API-Key": "key-carol"})
    assert (status, body) == (400, {"error": "body: Field required", "code": "bad_request"})


async def test_every_tool_answers_on_some_node(keyed_cluster: Cluster, tmp_path: Path) -> None:
    """The tools not exercised above, spread over the three nodes; all of them end up called."""
    called: set[str] = set()
    suffix = uuid.uuid4().hex[:8]
    proj_a, proj_b = f"t-{suffix}", f"u-{suffix}"
    start_session(keyed_cluster, "node1", "default", proj_a, "codex")
    start_session(keyed_cluster, "node1", "default", proj_b, "codex")

    async def call(client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
        called.add(name)
        return ok(await client.call_tool(name, args))

    key = {"X-API-Key": "key-carol"}
    async with (mcp(keyed_cluster.url("node1"), **key) as n1,
                mcp(keyed_cluster.url("node2"), **key) as n2,
                mcp(keyed_cluster.url("node3"), **key) as n3):
        reg = await call(n1, "memory_agent_register", {
            "agent_id": "carol", "agent_type": "reviewer", "capabilities": ["review"]})
        assert reg["agent_id"] == "carol"
        agents = await call(n2, "memory_agent_list", {})
        assert "carol" in [a["agent_id"] for a in agents["agents"]]
        await call(n3, "memory_notify", {"target_agent_id": "carol", "title": "self",
                                          "payload": "note to self"})
        inbox = await call(n1, "memory_inbox", {"limit": 5})
        assert inbox["count"] >= 1
        sent = await call(n2, "memory_message_send", {
            "to_workspace": "default", "to_project": proj_b, "body": "please",
            "from_workspace": "default", "from_project": proj_a, "to_agent": "codex",
            "nature": "measured", "evidence": "tests/x.py:1"})
        listed = await call(n3, "memory_message_list", {"workspace": "default",
                                                         "project": proj_b, "agent": "codex"})
        assert [m["id"] for m in listed["messages"]] == [sent["message_id"]]
        brief = await call(n1, "memory_briefing", {"workspace": "default", "project": proj_b})
        assert brief["pending_message_count"] == 1
        left = await call(n3, "memory_handoff", {"workspace": "default", "project": proj_a,
                                                  "body": "pick up the export"})
        status, started = keyed_cluster.call(
            "node1", "GET", f"/handoff?workspace=default&project={proj_a}", headers=key)
        assert status == 200 and started["handoff"]["id"] == left["handoff_id"], started
        popped = await call(n2, "memory_message_pop", {
            "workspace": "default", "project": proj_b, "message_id": sent["message_id"],
            "agent": "codex"})
        assert popped["message"]["nature"] == "measured"
        approvals = await call(n3, "memory_approvals_list", {"workspace": "default",
                                                             "project": proj_b})
        assert approvals["count"] == 0  # no admission hook held anything here
        called.add("memory_approval_decide")
        never_held = tool_error(await n1.call_tool("memory_approval_decide", {
            "message_id": sent["message_id"], "decision": "approve"}))
        assert never_held["status"] == 409, never_held  # claimed, never awaited approval
        cancelled = await call(n3, "memory_message_cancel", {"workspace": "default",
                                                              "project": proj_a})
        assert cancelled["count"] == 0  # already claimed: nothing left to retract
        sub = await call(n1, "memory_subscribe", {"url": "http://127.0.0.1:9/hook",
                                                   "events": ["memory_store"]})
        subs = await call(n1, "memory_list_subscriptions", {})
        assert sub["id"] in [s["id"] for s in subs["subscriptions"]]
        await call(n1, "memory_unsubscribe", {"subscription_id": sub["id"]})
        upstream = await call(n1, "memory_subscribe", {
            "url": "http://127.0.0.1:9/hook", "events": "memory_store,agent_notified",
            "namespace_filter": "team/a", "agent_filter": "bob"})
        assert upstream["events"] == ["memory_store", "agent_notified"]
        assert (upstream["namespace_filter"], upstream["agent_filter"]) == ("team/a", "bob")
        await call(n1, "memory_unsubscribe", {"subscription_id": upstream["id"]})
        stored = await call(n2, "memory_store", {
            "title": f"zebra {suffix}", "content": "striped horses graze", "tier": "long",
            "namespace": f"ns-{suffix}", "tags": ["animals"], "priority": 6})
        got = await call(n3, "memory_get", {"id": stored["id"]})
        assert got["title"] == f"zebra {suffix}"
        found = await call(n1, "memory_search", {"query": "zebra", "namespace": f"ns-{suffix}"})
        assert stored["id"] in json.dumps(found)
        listed_mem = await call(n2, "memory_list", {"namespace": f"ns-{suffix}"})
        assert [m["id"] for m in listed_mem["memories"]] == [stored["id"]]
        await call(n3, "memory_delete", {"id": stored["id"]})
        gone = tool_error(await n1.call_tool("memory_get", {"id": stored["id"]}))
        assert gone["status"] == 404
    assert called | THREAD_TOOLS == ALL_TOOLS


# the tests below
THREAD_TOOLS = {"memory_message_reply", "memory_message_complete", "memory_message_renew"}


async def test_reply_complete_and_threads_across_nodes(keyed_cluster: Cluster) -> None:
    """Mail and its reply, completion by the claimer only, and a notify reply, each
    step through another node; the sender reads the outcome on a third."""
    suffix = uuid.uuid4().hex[:8]
    proj_a, proj_b = f"q-{suffix}", f"r-{suffix}"
    start_session(keyed_cluster, "node1", "default", proj_a, "kimi")
    start_session(keyed_cluster, "node1", "default", proj_b, "claude-code")
    alice, bob = {"X-API-Key": "key-alice"}, {"X-API-Key": "key-bob"}
    async with mcp(keyed_cluster.url("node1"), **alice) as one:
        asked = ok(await one.call_tool("memory_message_send", {
            "to_workspace": "default", "to_project": proj_b, "subject": "decision: ship it?",
            "body": "question: ship?\noptions:\n- id: yes", "from_workspace": "default",
            "from_project": proj_a}))
    mid = asked["message_id"]
    async with mcp(keyed_cluster.url("node2"), **bob) as two:
        popped = ok(await two.call_tool("memory_message_pop", {
            "workspace": "default", "project": proj_b}))
        assert popped["message"]["id"] == mid
    async with mcp(keyed_cluster.url("node3"), **alice) as three:
        refused = tool_error(await three.call_tool("memory_message_complete", {
            "message_id": mid, "result": "done"}))
        assert refused["status"] == 403
    async with mcp(keyed_cluster.url("node3"), **bob) as three:
        done = ok(await three.call_tool("memory_message_complete", {
            "message_id": mid, "result": "done", "note": "shipped in 1.2"}))
        assert done["completion"]["result"] == "done"
        answer = ok(await three.call_tool("memory_message_reply", {
            "message_id": mid, "body": f"question_id: {mid}\noption: yes"}))
        assert answer["thread_id"] == mid and answer["to_project"] == proj_a
    async with mcp(keyed_cluster.url("node1"), **alice) as one:
        sent = ok(await one.call_tool("memory_message_list", {
            "box": "outbox", "workspace": "default", "project": proj_a, "all": True}))
        row = next(m for m in sent["messages"] if m["id"] == mid)
        assert row["state"] == "claimed"
        assert row["completion"]["result"] == "done"
        assert row["completion"]["note"] == "shipped in 1.2"
        thread = ok(await one.call_tool("memory_message_list", {
            "workspace": "default", "project": proj_a, "thread_id": mid}))
        assert [m["subject"] for m in thread["messages"]] == [f"decision-reply: {mid}"]
        note = ok(await one.call_tool("memory_notify", {
            "target_agent_id": "bob", "title": "thanks", "payload": "seen it"}))
    async with mcp(keyed_cluster.url("node2"), **bob) as two:
        back = ok(await two.call_tool("memory_notify", {
            "reply_to": note["notification_id"], "title": "np", "payload": "any time"}))
        assert back["delivered_to"] == "alice"
        assert back["thread_id"] == note["notification_id"]
    async with mcp(keyed_cluster.url("node3"), **alice) as three:
        inbox = ok(await three.call_tool("memory_inbox", {
            "thread_id": note["notification_id"]}))
        assert [n["id"] for n in inbox["notifications"]] == [back["notification_id"]]
        assert inbox["notifications"][0]["in_reply_to"] == note["notification_id"]


async def test_a_lease_renewed_then_let_run_out_goes_to_the_next_pop(
        keyed_cluster: Cluster) -> None:
    """A leased pop through node2, renewed through node3, then left to run
    out: the next pop (through node1) gets the same message as delivery 2,
    and the first holder's token is refused everywhere after that."""
    import asyncio
    suffix = uuid.uuid4().hex[:8]
    proj_a, proj_b = f"la-{suffix}", f"lb-{suffix}"
    start_session(keyed_cluster, "node1", "default", proj_a, "kimi")
    start_session(keyed_cluster, "node1", "default", proj_b, "claude-code")
    alice, bob = {"X-API-Key": "key-alice"}, {"X-API-Key": "key-bob"}
    async with mcp(keyed_cluster.url("node1"), **alice) as one:
        sent = ok(await one.call_tool("memory_message_send", {
            "to_workspace": "default", "to_project": proj_b, "subject": "lease me",
            "body": "do it", "from_workspace": "default", "from_project": proj_a}))
    mid = sent["message_id"]
    async with mcp(keyed_cluster.url("node2"), **bob) as two:
        popped = ok(await two.call_tool("memory_message_pop", {
            "workspace": "default", "project": proj_b, "lease_seconds": 2}))
        first = popped["message"]
        assert first["id"] == mid and first["delivery"] == 1 and first["lease_seconds"] == 2
        token = first["claim_token"]
    async with mcp(keyed_cluster.url("node3"), **bob) as three:
        renewed = ok(await three.call_tool("memory_message_renew", {
            "message_id": mid, "claim_token": token, "lease_seconds": 1}))
        assert renewed["lease_until"] > first["lease_until"] or renewed["lease_seconds"] == 1
        await asyncio.sleep(2.5)  # the lease runs out; its owner returns the message
        lost = tool_error(await three.call_tool("memory_message_renew", {
            "message_id": mid, "claim_token": token}))
        assert lost["status"] == 409 and lost["code"] == "lease_lost", lost
    async with mcp(keyed_cluster.url("node1"), **bob) as one:
        again = ok(await one.call_tool("memory_message_pop", {
            "workspace": "default", "project": proj_b, "lease_seconds": 30}))
        second = again["message"]
        assert second["id"] == mid and second["delivery"] == 2
        assert second["claim_token"] != token
        late = tool_error(await one.call_tool("memory_message_complete", {
            "message_id": mid, "result": "done", "claim_token": token}))
        assert late["status"] == 409 and late["code"] == "lease_lost"
        done = ok(await one.call_tool("memory_message_complete", {
            "message_id": mid, "result": "done", "note": "second try",
            "claim_token": second["claim_token"]}))
        assert done["completion"]["result"] == "done"
    async with mcp(keyed_cluster.url("node2"), **alice) as two:
        outbox = ok(await two.call_tool("memory_message_list", {
            "box": "outbox", "workspace": "default", "project": proj_a, "all": True}))
        row = next(m for m in outbox["messages"] if m["id"] == mid)
        assert (row["state"], row["deliveries"], row["completion"]["note"]) == (
            "claimed", 2, "second try")
        assert "claim_token" not in json.dumps(outbox)
