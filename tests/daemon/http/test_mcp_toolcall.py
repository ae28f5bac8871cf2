"""``/mcp``'s own ``tools/call`` path (daemon/mcp/toolcall.py) answers as the SDK does.

Every request below is sent twice to one in-process node: once as it is
served (a plain ``tools/call`` by :class:`daemon.mcp.toolcall.ToolCallPath`,
anything else by the SDK) and once with that path switched off, so the SDK's
transport answers it. Status, content type and the JSON answer must be the
same, for both protocol eras (the 2026-07-28 per-request envelope and every
``initialize``-era version), for results, refusals, argument errors, a
crashing tool and the shapes the path leaves to the SDK. Generated ids and
times are masked; nothing else is.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from mcp_types import HEADER_MISMATCH

from daemon.api.mcp import MCP_STATE
from daemon.mcp.direct import DirectClient

MODERN = "2026-07-28"
LEGACY = (None, "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {}}
ACCEPT = "application/json, text/event-stream"
_MASKS = [(re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<id>"),
          (re.compile(r'id=\\?"[0-9a-f]{12}\\?"'), "id=<fence>"),  # a popped body's fence
          (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"), "<time>")]


def _mask(text: str) -> str:
    for pattern, to in _MASKS:
        text = pattern.sub(to, text)
    return text


def _normal(value: Any) -> Any:
    """JSON with generated ids and times masked, text blocks decoded where they hold JSON."""
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, str):
        return _mask(value)
    return value


def call(name: str, arguments: Any = None, *, id_: Any = 1, version: str | None = MODERN,
         meta: dict[str, Any] | None = None, **params: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """A ``tools/call`` body and headers as the SDK's client sends them at ``version``."""
    p: dict[str, Any] = {"name": name, **params}
    if arguments is not None:
        p["arguments"] = arguments
    headers = {"Accept": ACCEPT, "X-Agent-Id": "alice"}
    if version is not None:
        headers["MCP-Protocol-Version"] = version
    if version == MODERN:
        p["_meta"] = {**ENVELOPE, **(meta or {})}
        headers |= {"Mcp-Method": "tools/call", "Mcp-Name": name}
    elif meta is not None:
        p["_meta"] = meta
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": p}, headers


async def both(client: TestClient, body: Any, headers: dict[str, str]) -> tuple[Any, Any, int]:
    """The answer with the path on, then off; and how many calls the path served."""
    path = client.app[MCP_STATE].context["transport"][1]  # type: ignore[index]
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    hdrs = {"Content-Type": "application/json", **headers}
    answers = []
    served = path.served
    for enabled in (True, False):
        path.enabled = enabled
        try:
            r = await client.post("/mcp", data=raw, headers=hdrs)
            text = await r.text()
        finally:
            path.enabled = True
        content_type = r.headers.get("Content-Type", "").split(";")[0]
        decoded = json.loads(text) if text and content_type == "application/json" else text
        answers.append((r.status, content_type, _normal(decoded)))
    return answers[0], answers[1], path.served - served


@pytest.fixture
async def mcp(client: TestClient) -> TestClient:
    """The client, after one tools/list started the transport, with a project to mail."""
    r = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 0, "method": "tools/list"},
                          headers={"Accept": ACCEPT, "MCP-Protocol-Version": "2025-06-18"})
    assert r.status == 200
    r = await client.post("/api/v1/sessions", headers={"X-Agent-Id": "alice"}, json={
        "workspace": "w", "project": "p", "harness": "t", "session_id": "s-1"})
    assert r.status in (200, 201)
    return client


SERVED = [
    ("memory_inbox", {}),
    ("memory_inbox", {"unread_only": False, "limit": 3, "mark_read": True}),
    ("memory_notify", {"target_agent_id": "alice", "title": "hé ✓", "payload": "x" * 50}),
    ("memory_notify", {"target_agent_id": ["bob", "carol"], "title": "t", "payload": "p",
                       "priority": 9, "tier": "mid"}),
    ("memory_inbox", {"unread_only": False}),  # what was just sent, non-ASCII title included
    ("memory_notify", {"title": "t", "payload": "p"}),  # a refusal: no target
    ("memory_notify", {"target_agent_id": "bob", "title": "t", "payload": "p", "priority": 99}),
    ("memory_notify", {"target_agent_id": "bob", "title": "", "payload": "p"}),
    ("memory_notify", {"target_agent_id": "bob", "title": "t"}),  # payload missing
    ("memory_inbox", {"limit": "7"}),  # a number as a string: the SDK's pre-parse
    ("memory_inbox", {"limit": 0}),
    ("memory_inbox", {"as_agent": "bob"}),  # another's inbox: refused by the node
    ("memory_inbox", {"unknown": 1}),
    ("memory_message_send", {"to_workspace": "w", "to_project": "p", "from_workspace": "w",
                             "from_project": "p", "subject": "s", "body": "b"}),
    ("memory_message_send", {"to_workspace": "w", "to_project": "nope", "from_workspace": "w",
                             "from_project": "p", "body": "b"}),
    ("memory_message_list", {"workspace": "w", "project": "p"}),
    ("memory_message_pop", {"workspace": "w", "project": "p", "request_id": "r-1"}),
    ("memory_message_pop", {"workspace": "w", "project": "p", "request_id": "r-1"}),  # replay
    ("memory_message_pop", {}),  # a guessed scope: refused
    ("memory_briefing", {"workspace": "w", "project": "p"}),
    ("memory_agent_list", None),  # no arguments at all
    ("memory_store", {"title": "t", "content": "c", "tags": ["a"]}),
    ("memory_get", {"id": "no/such"}),
]


@pytest.mark.parametrize("version", [MODERN, *LEGACY])
async def test_a_plain_tool_call_is_answered_as_the_sdk_answers_it(
        mcp: TestClient, version: str | None) -> None:
    for name, arguments in SERVED:
        body, headers = call(name, arguments, version=version)
        fast, sdk, served = await both(mcp, body, headers)
        assert fast == sdk, (name, arguments)
        assert served == 1, (name, arguments)  # and it was the path that answered
    body, headers = call("memory_inbox", {}, id_="a string id", version=version)
    fast, sdk, served = await both(mcp, body, headers)
    assert fast == sdk and served == 1
    assert fast[0] == 200 and fast[2]["id"] == "a string id"


async def test_a_crashing_tool_reads_as_the_sdks_generic_failure(
        mcp: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    async def boom(*_: Any, **__: Any) -> Any:
        raise RuntimeError("secret detail")

    monkeypatch.setattr(DirectClient, "request", boom)
    for version in (MODERN, "2025-06-18"):
        body, headers = call("memory_inbox", {}, version=version)
        fast, sdk, served = await both(mcp, body, headers)
        assert fast == sdk and served == 1
        text = fast[2]["result"]["content"][0]["text"]
        assert fast[2]["result"]["isError"] is True and "secret" not in text


def _modern(**changes: Any) -> tuple[dict[str, Any], dict[str, str]]:
    body, headers = call("memory_inbox", {})
    body["params"] |= changes.pop("params", {})
    headers |= changes.pop("headers", {})
    body |= changes
    return body, headers


LEFT_TO_THE_SDK = [
    _modern(headers={"Mcp-Name": "memory_notify"}),  # the header disagrees with the body
    _modern(headers={"Mcp-Method": "tools/list"}),
    _modern(headers={"MCP-Protocol-Version": "2099-01-01"}),  # an unknown version
    _modern(params={"_meta": {}}),  # no envelope
    _modern(params={"_meta": {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": "2025-06-18"}}),
    _modern(params={"requestState": "x"}),
    _modern(params={"arguments": [1]}),
    _modern(params={"name": "no_such_tool"}, headers={"Mcp-Name": "no_such_tool"}),
    _modern(params={"name": ["memory_inbox"]}),
    ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": {"a": 1}}},
     {"Accept": ACCEPT, "MCP-Protocol-Version": "2025-06-18"}),
    _modern(id=True),
    _modern(id=None),
    _modern(jsonrpc="1.0"),
    _modern(headers={"Accept": "text/event-stream"}),
    call("memory_inbox", {}, version="2025-06-18", meta={"progressToken": []}),
    call("memory_inbox", [1], version="2025-06-18"),
    call("no_such_tool", {}, version="2025-06-18"),
    ({"jsonrpc": "2.0", "method": "notifications/initialized"},
     {"Accept": ACCEPT, "MCP-Protocol-Version": "2025-06-18"}),
    ([{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}],
     {"Accept": ACCEPT, "MCP-Protocol-Version": "2025-06-18"}),
]


@pytest.mark.parametrize("case", range(len(LEFT_TO_THE_SDK)))
async def test_anything_else_is_left_to_the_sdk(mcp: TestClient, case: int) -> None:
    body, headers = LEFT_TO_THE_SDK[case]
    fast, sdk, served = await both(mcp, body, headers)
    assert served == 0, fast
    assert fast == sdk


async def test_a_duplicated_routing_header_is_left_to_the_sdk(mcp: TestClient) -> None:
    body, headers = call("memory_inbox", {})
    raw = json.dumps(body).encode()
    path = mcp.app[MCP_STATE].context["transport"][1]  # type: ignore[index]
    served = path.served
    hdrs = [*{"Content-Type": "application/json", **headers}.items(),
            ("Mcp-Name", "memory_inbox")]
    r = await mcp.post("/mcp", data=raw, headers=hdrs)
    assert r.status == 400 and (await r.json())["error"]["code"] == HEADER_MISMATCH
    assert path.served == served
