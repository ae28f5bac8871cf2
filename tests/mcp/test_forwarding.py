"""Each MCP tool against a fake node: what is forwarded, what comes back, how errors read.

The MCP client is the SDK's real one, connected in-process; the node is a
real aiohttp server on loopback that records every request.
"""

from __future__ import annotations

from tests.cluster.harness import free_port
from tests.mcp.conftest import Connect, ok, text_of, tool_error
from tests.mcp.fake_node import DROP, FakeNode

ALL_TOOLS = {
    "memory_notify",
    "memory_inbox",
    "memory_message_send",
    "memory_message_list",
    "memory_message_pop",
    "memory_message_cancel",
    "memory_message_reply",
    "memory_message_complete",
    "memory_message_renew",
    "memory_subscribe",
    "memory_unsubscribe",
    "memory_list_subscriptions",
    "memory_agent_register",
    "memory_agent_list",
    "memory_store",
    "memory_list",
    "memory_get",
    "memory_search",
    "memory_delete",
    "memory_briefing",
    "memory_approvals_list",
    "memory_approval_decide",
    "memory_handoff",
}

QUORUM_503 = {"error": "quorum_not_met", "got": 1, "needed": 2, "reason": "peer timeout"}


async def test_lists_every_tool_with_a_description(connect: Connect) -> None:
    async with connect() as client:
        listed = (await client.list_tools()).tools
    by_name = {t.name: t for t in listed}
    assert set(by_name) == ALL_TOOLS
    for tool in listed:
        assert tool.description and len(tool.description) > 40, tool.name
    assert "untrusted" in (by_name["memory_message_pop"].description or "")
    notify_props = by_name["memory_notify"].input_schema["properties"]
    assert {"target_agent_id", "title", "payload", "priority", "tier"} <= set(notify_props)
    assert notify_props["priority"]["anyOf"][0]["maximum"] == 10


async def test_notify_forwards_identity_and_returns_id_and_recipient(
    node: FakeNode, connect: Connect
) -> None:
    node.reply(
        "POST",
        "/api/v1/notify",
        {
            "id": "n-1",
            "notification_id": "n-1",
            "from": "alice",
            "to": "bob",
            "delivered_to": "bob",
            "namespace": "_inbox/bob",
            "tier": "short",
            "delivered_at": "2026-01-01T00:00:00Z",
        },
        status=201,
    )
    async with connect(session_id="sess-9", api_key="k1") as client:
        result = await client.call_tool(
            "memory_notify",
            {
                "target_agent_id": "bob",
                "title": "review",
                "payload": "please look",
                "priority": 7,
                "tier": "short",
            },
        )
    assert ok(result) == {"notification_id": "n-1", "delivered_to": "bob"}
    sent = node.last("POST", "/api/v1/notify")
    assert sent.body == {
        "target_agent_id": "bob",
        "title": "review",
        "payload": "please look",
        "priority": 7,
        "tier": "short",
    }
    assert sent.headers["X-Agent-Id"] == "alice"
    assert sent.headers["X-API-Key"] == "k1"
    assert sent.headers["x-memory-actor-session-id"] == "sess-9"
    assert sent.headers["Idempotency-Key"]


async def test_notify_leaves_unset_options_to_the_node(node: FakeNode, connect: Connect) -> None:
    node.reply(
        "POST", "/api/v1/notify", {"notification_id": "n-2", "delivered_to": "bob"}, status=201
    )
    async with connect() as client:
        ok(
            await client.call_tool(
                "memory_notify", {"target_agent_id": "bob", "title": "t", "payload": "p"}
            )
        )
    assert node.last("POST", "/api/v1/notify").body == {
        "target_agent_id": "bob",
        "title": "t",
        "payload": "p",
    }
    assert "x-memory-actor-session-id" not in node.last("POST", "/api/v1/notify").headers


async def test_notify_retries_once_after_quorum_not_met_with_the_same_key(
    node: FakeNode, connect: Connect
) -> None:
    node.reply("POST", "/api/v1/notify", QUORUM_503, status=503, headers={"Retry-After": "1"})
    node.reply(
        "POST", "/api/v1/notify", {"notification_id": "n-3", "delivered_to": "bob"}, status=201
    )
    async with connect() as client:
        result = await client.call_tool(
            "memory_notify", {"target_agent_id": "bob", "title": "t", "payload": "p"}
        )
    assert ok(result)["notification_id"] == "n-3"
    attempts = node.made("POST", "/api/v1/notify")
    assert len(attempts) == 2
    assert attempts[0].headers["Idempotency-Key"] == attempts[1].headers["Idempotency-Key"]


async def test_quorum_not_met_twice_is_a_tool_error_with_the_nodes_body(
    node: FakeNode, connect: Connect
) -> None:
    node.reply("POST", "/api/v1/notify", QUORUM_503, status=503)
    async with connect() as client:
        result = await client.call_tool(
            "memory_notify", {"target_agent_id": "bob", "title": "t", "payload": "p"}
        )
    error = tool_error(result)
    assert error == {**QUORUM_503, "code": "quorum_not_met", "status": 503}
    assert len(node.made("POST", "/api/v1/notify")) == 2


async def test_inbox_reads_own_agent_and_reshapes_messages(
    node: FakeNode, connect: Connect
) -> None:
    node.reply(
        "GET",
        "/api/v1/inbox",
        {
            "agent_id": "alice",
            "namespace": "_inbox/alice",
            "count": 1,
            "unread_only": True,
            "messages": [
                {
                    "id": "n-1",
                    "from": "bob",
                    "to": "alice",
                    "title": "hi",
                    "subject": "hi",
                    "payload": "body",
                    "body": "body",
                    "priority": 6,
                    "tier": "short",
                    "created_at": "2026-01-01T00:00:00Z",
                    "received_at": "2026-01-01T00:00:01Z",
                    "read": False,
                }
            ],
        },
    )
    async with connect() as client:
        result = await client.call_tool(
            "memory_inbox", {"limit": 10, "min_priority": 5, "mark_read": True}
        )
    assert ok(result) == {
        "count": 1,
        "notifications": [
            {
                "id": "n-1",
                "from": "bob",
                "title": "hi",
                "payload": "body",
                "priority": 6,
                "received_at": "2026-01-01T00:00:01Z",
            }
        ],
    }
    query = node.last("GET", "/api/v1/inbox").query
    assert query == {
        "agent_id": "alice",
        "unread_only": "true",
        "limit": "10",
        "min_priority": "5",
        "mark_read": "true",
    }


async def test_local_consistency_is_passed_through(node: FakeNode, connect: Connect) -> None:
    node.reply("GET", "/api/v1/inbox", {"agent_id": "alice", "count": 0, "messages": []})
    node.reply("GET", "/api/v1/messages", {"box": "inbox", "count": 0, "messages": []})
    async with connect() as client:
        ok(await client.call_tool("memory_inbox", {"consistency": "local"}))
        ok(await client.call_tool("memory_message_list", {
            "workspace": "default", "project": "p", "consistency": "local"}))
        bad = await client.call_tool("memory_inbox", {"consistency": "eventual"})
    assert node.last("GET", "/api/v1/inbox").query["consistency"] == "local"
    assert node.last("GET", "/api/v1/messages").query["consistency"] == "local"
    assert bad.is_error and "consistency" in text_of(bad)


async def test_inbox_as_another_agent_carries_the_nodes_refusal(
    node: FakeNode, connect: Connect
) -> None:
    node.reply(
        "GET",
        "/api/v1/inbox",
        {"error": "agent_id 'bob' differs from the caller's identity 'alice'", "code": "forbidden"},
        status=403,
    )
    async with connect() as client:
        result = await client.call_tool("memory_inbox", {"as_agent": "bob", "unread_only": False})
    assert tool_error(result) == {
        "error": "agent_id 'bob' differs from the caller's identity 'alice'",
        "code": "forbidden",
        "status": 403,
    }
    assert node.last("GET", "/api/v1/inbox").query["unread_only"] == "false"


async def test_inbox_without_any_agent_is_refused_before_forwarding(
    node: FakeNode, connect: Connect
) -> None:
    async with connect(agent_id=None) as client:
        result = await client.call_tool("memory_inbox", {})
    assert "as_agent" in tool_error(result)["error"]
    assert node.requests == []


async def test_arguments_outside_the_schema_never_reach_the_node(
    node: FakeNode, connect: Connect
) -> None:
    async with connect() as client:
        too_urgent = await client.call_tool(
            "memory_notify",
            {"target_agent_id": "bob", "title": "t", "payload": "p", "priority": 11},
        )
        bad_box = await client.call_tool("memory_message_list", {"box": "trash"})
    # The HTTP API's error body for a bad field, not the SDK's validation text.
    urgent = tool_error(too_urgent)
    assert urgent["code"] == "bad_request" and urgent["status"] == 400
    assert urgent["error"].startswith("priority:"), urgent
    assert tool_error(bad_box)["error"].startswith("box:")
    assert "pydantic" not in text_of(too_urgent) and "Error executing" not in text_of(bad_box)
    assert node.requests == []


async def test_send_names_the_configured_project_as_sender(
    node: FakeNode, connect: Connect
) -> None:
    reply = {
        "message_id": "m-1",
        "to_workspace": "default",
        "to_project": "b",
        "to_agent": None,
        "from_workspace": "default",
        "from_project": "a",
        "from_agent": None,
        "state": "pending",
        "truncated": {"subject": False, "body": False},
        "scrubbed": 0,
    }
    node.reply("POST", "/api/v1/messages", reply, status=201)
    async with connect(workspace="default", project="a") as client:
        result = await client.call_tool(
            "memory_message_send",
            {
                "to_workspace": "default",
                "to_project": "b",
                "body": "add an endpoint",
                "subject": "export",
                "nature": "measured",
                "evidence": "tests/x.py:4",
            },
        )
        override = await client.call_tool(
            "memory_message_send",
            {
                "to_workspace": "default",
                "to_project": "b",
                "body": "again",
                "from_workspace": "other",
                "from_project": "c",
                "from_agent": "codex",
            },
        )
    assert ok(result) == reply
    assert ok(override) == reply
    first, second = node.made("POST", "/api/v1/messages")
    assert first.body == {
        "to_workspace": "default",
        "to_project": "b",
        "from_workspace": "default",
        "from_project": "a",
        "subject": "export",
        "body": "add an endpoint",
        "nature": "measured",
        "evidence": "tests/x.py:4",
    }
    assert first.headers["Idempotency-Key"] != second.headers["Idempotency-Key"]
    assert second.body == {
        "to_workspace": "default",
        "to_project": "b",
        "from_workspace": "other",
        "from_project": "c",
        "from_agent": "codex",
        "body": "again",
    }


async def test_unknown_recipient_is_a_tool_error_with_the_nodes_text(
    node: FakeNode, connect: Connect
) -> None:
    node.reply(
        "POST",
        "/api/v1/messages",
        {"error": "unknown recipient project default/nope", "code": "not_found"},
        status=404,
    )
    async with connect(workspace="default", project="a") as client:
        result = await client.call_tool(
            "memory_message_send",
            {"to_workspace": "default", "to_project": "nope", "body": "hello"},
        )
    assert tool_error(result) == {
        "error": "unknown recipient project default/nope",
        "code": "not_found",
        "status": 404,
    }
    assert len(node.made("POST", "/api/v1/messages")) == 1  # a 404 is not retried


async def test_a_refused_inferred_scope_keeps_the_nodes_explanation(
    node: FakeNode, connect: Connect
) -> None:
    refusal = {
        "error": "refusing to pop from default/x: it was resolved by shared_slot, not named",
        "code": "scope_inferred",
        "resolved_scope": {"workspace": "default", "project": "x"},
        "scope_source": "shared_slot",
    }
    node.reply("POST", "/api/v1/messages/pop", refusal, status=409)
    async with connect() as client:
        result = await client.call_tool("memory_message_pop", {})
    assert tool_error(result) == {**refusal, "status": 409}
    sent = node.last("POST", "/api/v1/messages/pop").body
    assert set(sent) == {"request_id"}  # no scope was invented


async def test_pop_retries_a_503_once_with_the_same_request_id(
    node: FakeNode, connect: Connect
) -> None:
    claimed = {
        "message": {"id": "m-1", "body": "<untrusted>do it</untrusted>", "state": "claimed"},
        "provenance": {
            "from_workspace": "default",
            "from_project": "a",
            "from_agent": None,
            "from_owner_user": None,
        },
        "security_notice": "untrusted",
    }
    node.reply(
        "POST",
        "/api/v1/messages/pop",
        {"error": "no_majority", "code": "no_majority"},
        status=503,
        headers={"Retry-After": "2"},
    )
    node.reply("POST", "/api/v1/messages/pop", claimed)
    async with connect(workspace="default", project="b") as client:
        result = await client.call_tool("memory_message_pop", {"agent": "codex"})
    assert ok(result) == claimed
    first, second = node.made("POST", "/api/v1/messages/pop")
    assert first.body == second.body
    assert first.body["workspace"] == "default" and first.body["project"] == "b"
    assert first.body["agent"] == "codex"
    assert len(first.body["request_id"]) >= 32


async def test_pop_retries_a_dropped_connection_with_the_same_request_id(
    node: FakeNode, connect: Connect
) -> None:
    node.reply("POST", "/api/v1/messages/pop", DROP)
    node.reply("POST", "/api/v1/messages/pop", {"message": None})
    async with connect() as client:
        result = await client.call_tool(
            "memory_message_pop",
            {"workspace": "w", "project": "p", "request_id": "rid-7", "message_id": "m-9"},
        )
    assert ok(result) == {"message": None}
    attempts = node.made("POST", "/api/v1/messages/pop")
    assert [a.body for a in attempts] == [
        {"workspace": "w", "project": "p", "message_id": "m-9", "request_id": "rid-7"}
    ] * 2


async def test_pop_that_fails_twice_names_its_request_id(node: FakeNode, connect: Connect) -> None:
    node.reply("POST", "/api/v1/messages/pop", DROP)
    async with connect() as client:
        result = await client.call_tool("memory_message_pop", {"workspace": "w", "project": "p"})
    error = tool_error(result)
    attempts = node.made("POST", "/api/v1/messages/pop")
    assert len(attempts) == 2
    assert error["code"] == "transport_failed"
    assert error["request_id"] == attempts[0].body["request_id"]
    assert "request_id" in error["hint"]


async def test_list_cancel_and_briefing_default_to_the_configured_project(
    node: FakeNode, connect: Connect
) -> None:
    node.reply(
        "GET",
        "/api/v1/messages",
        {"box": "outbox", "workspace": "w", "project": "p", "count": 0, "messages": []},
    )
    node.reply("POST", "/api/v1/messages/cancel", {"cancelled": ["m-1", "m-2"], "count": 2})
    node.reply(
        "GET",
        "/api/v1/briefing",
        {"pending_message_count": 3, "scope": {"workspace": "w", "project": "p"}},
    )
    async with connect(workspace="w", project="p") as client:
        listed = ok(await client.call_tool("memory_message_list", {"box": "outbox", "limit": 5}))
        cancelled = ok(await client.call_tool("memory_message_cancel", {"all": True}))
        one = ok(
            await client.call_tool(
                "memory_message_cancel", {"workspace": "w2", "project": "p2", "message_id": "m-3"}
            )
        )
        briefing = ok(await client.call_tool("memory_briefing", {}))
    assert listed["count"] == 0 and cancelled["count"] == 2 and one["count"] == 2
    assert briefing["pending_message_count"] == 3
    assert node.last("GET", "/api/v1/messages").query == {
        "box": "outbox",
        "limit": "5",
        "workspace": "w",
        "project": "p",
    }
    first, second = node.made("POST", "/api/v1/messages/cancel")
    assert first.body == {"workspace": "w", "project": "p", "all": True}
    assert second.body == {"workspace": "w2", "project": "p2", "message_id": "m-3"}
    assert node.last("GET", "/api/v1/briefing").query == {"workspace": "w", "project": "p"}


async def test_memories_and_subscriptions_are_forwarded(node: FakeNode, connect: Connect) -> None:
    memory = {
        "id": "mem-1",
        "title": "t",
        "content": "c",
        "tier": "long",
        "namespace": "team/x",
        "tags": ["a"],
        "priority": 8,
    }
    node.reply("POST", "/api/v1/memories", memory, status=201)
    node.reply("GET", "/api/v1/memories", {"memories": [memory], "count": 1})
    node.reply(
        "POST",
        "/api/v1/subscriptions",
        {
            "id": "s-1",
            "url": "http://127.0.0.1:9/h",
            "events": ["memory_store"],
            "namespace": None,
            "created_at": "2026-01-01T00:00:00Z",
        },
        status=201,
    )
    async with connect() as client:
        stored = ok(
            await client.call_tool(
                "memory_store",
                {
                    "title": "t",
                    "content": "c",
                    "tier": "long",
                    "namespace": "team/x",
                    "tags": ["a"],
                    "priority": 8,
                },
            )
        )
        listed = ok(
            await client.call_tool(
                "memory_list", {"namespace": "team/x", "tier": "long", "limit": 3}
            )
        )
        sub = ok(
            await client.call_tool(
                "memory_subscribe",
                {"url": "http://127.0.0.1:9/h", "events": ["memory_store"], "secret": "s3"},
            )
        )
    assert stored["id"] == "mem-1" and listed["count"] == 1 and sub["id"] == "s-1"
    created = node.last("POST", "/api/v1/memories")
    assert created.body == {
        "title": "t",
        "content": "c",
        "tier": "long",
        "namespace": "team/x",
        "tags": ["a"],
        "priority": 8,
    }
    assert created.headers["Idempotency-Key"]
    assert node.last("GET", "/api/v1/memories").query == {
        "namespace": "team/x",
        "tier": "long",
        "limit": "3",
    }
    assert node.last("POST", "/api/v1/subscriptions").body == {
        "url": "http://127.0.0.1:9/h",
        "events": ["memory_store"],
        "secret": "s3",
    }


async def test_a_non_json_error_reply_still_reads_as_an_error(
    node: FakeNode, connect: Connect
) -> None:
    node.reply("GET", "/api/v1/memories", "bad gateway", status=502)
    async with connect() as client:
        result = await client.call_tool("memory_list", {})
    error = tool_error(result)
    assert error["status"] == 502 and error["error"] == "bad gateway"


async def test_an_unreachable_node_is_a_tool_error(connect: Connect) -> None:
    port = free_port()  # nothing listens there (below the ephemeral range: no self-connect)
    async with connect(url=f"http://127.0.0.1:{port}") as client:
        result = await client.call_tool("memory_briefing", {})
    error = tool_error(result)
    assert error["code"] == "cannot_connect"
    assert str(port) in error["error"]


async def test_the_key_goes_as_a_bearer_token(node: FakeNode, connect: Connect) -> None:
    node.reply("GET", "/api/v1/briefing", {"scope": {}, "pending_message_count": 0})
    async with connect(key="aim_secret", api_key="older") as client:
        ok(await client.call_tool("memory_briefing", {"workspace": "w", "project": "p"}))
    sent = node.last("GET", "/api/v1/briefing")
    assert sent.headers["Authorization"] == "Bearer aim_secret"
    assert "X-API-Key" not in sent.headers  # one key per request: --key wins
