"""``ai-memory mcp-bridge``: a stdio MCP server for harnesses, relaying to a node's ``/mcp``.

A harness (Claude Code, Codex, Kimi) spawns the bridge; the bridge is an MCP
*client* of a node's ``/mcp`` (the official SDK's ``Client`` over streamable
HTTP) and relays ``tools/list`` and ``tools/call`` unchanged, so the tools,
their schemas and their errors are exactly the node's.

What it adds:

* **The harness session.** Every request carries the session id as
  ``x-memory-actor-session-id``: ``--session-id``, else the first of
  :data:`SESSION_ENV` that is set (the variables the harnesses export to the
  processes they spawn), so the node resolves the caller's project from the
  session its SessionStart hook recorded and the agent need not name it.
* **Failover.** ``--url`` may list several members. Each call opens its
  connection to the member that answered last; a member that cannot be
  reached while connecting (nothing was sent yet) is skipped for the next
  one, so a dead node costs one refused connection. A failure after the call
  went out is reported, not retried elsewhere: the call may have happened.
* **The inbox channel** (``--channel inbox``, off by default). The bridge then
  advertises the experimental ``claude/channel`` capability and polls the
  node's count-only notice (``GET /handoff?inbox_only=1``: the project's mail
  and the unread notifications of the bridge's ``--agent-id``): every
  ``poll_fast_secs`` (5 s) after the text changed, doubling up to
  ``poll_slow_secs`` (60 s) while it stays the same; it sends
  ``notifications/claude/channel`` whose content is that notice, and only when
  the notice text changed to a new one. :class:`NoticeSchedule` is that rule,
  with no I/O.

A fresh connection per call costs two loopback requests (the client's
``server/discover`` probe and the call); it also means no connection state
crosses the tasks the SDK runs handlers in.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx2
import mcp_types as types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp_types.version import LATEST_MODERN_VERSION

from common import __version__, limits, trust
from common.errors import AiMemoryError, Unavailable
from daemon.mcp.node_client import SESSION_HEADER
from daemon.mcp.server import INSTRUCTIONS, tool_error
from daemon.mcp.settings import SESSION_ENV, session_from_env

__all__ = ["SESSION_ENV", "Bridge", "BridgeSettings", "NoticeSchedule", "run_bridge",
           "session_from_env"]

log = logging.getLogger("ai_memory.mcp_bridge")
T = TypeVar("T")

CHANNEL_CAPABILITY = "claude/channel"
CHANNEL_METHOD = "notifications/claude/channel"


@dataclass(frozen=True, slots=True)
class BridgeSettings:
    urls: tuple[str, ...]
    agent_id: str | None = None
    api_key: str | None = None
    session_id: str | None = None
    harness: str | None = None
    workspace: str | None = None
    project: str | None = None
    channel: bool = False
    poll_fast_secs: float = limits.bridge_poll_fast_secs
    poll_slow_secs: float = limits.bridge_poll_slow_secs
    timeout_secs: float = limits.mcp_http_timeout_secs
    ca_cert: str | None = None  # the cluster CA an https node is verified against (common.trust)

    def __post_init__(self) -> None:
        if not self.urls:
            raise ValueError("at least one --url")
        if bool(self.workspace) != bool(self.project):
            raise ValueError("workspace and project must be given together")
        if not 0 < self.poll_fast_secs <= self.poll_slow_secs:
            raise ValueError("poll intervals must satisfy 0 < fast <= slow")

    def headers(self) -> dict[str, str]:
        headers = {"User-Agent": f"ai-memory-mcp-bridge/{__version__}"}
        if self.agent_id:
            headers["X-Agent-Id"] = self.agent_id
        if self.api_key:
            headers["X-API-Key"] = self.api_key
        if self.session_id:
            headers[SESSION_HEADER] = self.session_id
        return headers


class NoticeSchedule:
    """When to poll the notice next, and whether a polled notice is news.

    After a change the next poll is ``fast`` seconds away; each poll that sees
    the same text doubles the wait, up to ``slow``. A notice is sent when its
    text differs from the last one sent (no notice, ``None``, is never sent but
    is remembered, so the same text coming back later is news again).
    """

    def __init__(self, fast: float, slow: float) -> None:
        self.fast, self.slow = fast, slow
        self.delay = fast
        self._last: str | None = None

    def observe(self, notice: str | None) -> bool:
        changed = notice != self._last
        self._last = notice
        self.delay = self.fast if changed else min(self.slow, self.delay * 2)
        return changed and notice is not None

    def failed(self) -> None:
        """A poll that reached no node: back off as if nothing changed."""
        self.delay = min(self.slow, self.delay * 2)


class Upstream:
    """The cluster as the bridge sees it: the ``--url`` list, the member that answered last."""

    def __init__(self, settings: BridgeSettings) -> None:
        self.settings = settings
        self.current = 0
        self._http: dict[str, httpx2.AsyncClient] = {}

    def _http_for(self, url: str) -> httpx2.AsyncClient:
        """One pooled HTTP client per member, kept for the bridge's life."""
        client = self._http.get(url)
        if client is None:
            client = httpx2.AsyncClient(headers=self.settings.headers(),
                                        timeout=self.settings.timeout_secs,
                                        verify=trust.verify_value(self.settings.ca_cert))
            self._http[url] = client
        return client

    async def aclose(self) -> None:
        clients, self._http = list(self._http.values()), {}
        for client in clients:
            await client.aclose()

    def _order(self) -> list[int]:
        n = len(self.settings.urls)
        return [(self.current + i) % n for i in range(n)]

    async def call(self, fn: Callable[[Client], Awaitable[T]]) -> T:
        """``fn`` with an MCP client of the member that answered last, failing over.

        A member whose connection is refused (nothing was sent: ``ConnectError``)
        is skipped for the next. Any other failure is reported as ``transport_failed``
        (the request may have been carried out) and the next call starts one member on.
        """
        failures: list[str] = []
        for i in self._order():
            url = self.settings.urls[i].rstrip("/")
            client = Client(streamable_http_client(url + "/mcp", http_client=self._http_for(url)),
                            mode=LATEST_MODERN_VERSION)
            try:
                async with client:
                    result = await fn(client)
            except AiMemoryError:
                raise
            except Exception as exc:
                if _never_sent(exc):
                    failures.append(f"{url}: {_reason(exc)}")
                    log.info("%s unreachable, trying the next member: %s", url, _reason(exc))
                    continue
                self.current = (i + 1) % len(self.settings.urls)
                failed = Unavailable(f"the request to {url} got no answer ({_reason(exc)}); it "
                                     "may have taken effect")
                failed.code = "transport_failed"
                raise failed from exc
            self.current = i
            return result
        raise _unreachable(failures)

    async def get_json(self, path: str, params: Mapping[str, str]) -> Any:
        """A plain HTTP GET of the public API, with the same failover and headers."""
        failures: list[str] = []
        for i in self._order():
            url = self.settings.urls[i].rstrip("/")
            try:
                reply = await self._http_for(url).get(url + path, params=dict(params))
            except Exception as exc:
                failures.append(f"{url}: {_reason(exc)}")
                continue
            self.current = i
            reply.raise_for_status()
            return reply.json()
        raise _unreachable(failures)


def _unreachable(failures: list[str]) -> Unavailable:
    down = Unavailable("no ai-memory node reachable: " + "; ".join(failures))
    down.code = "cannot_connect"
    return down


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _never_sent(exc: BaseException) -> bool:
    """True when every failure was a refused connection: the request never left."""
    leaves = _leaves(exc)
    return bool(leaves) and all(isinstance(e, httpx2.ConnectError | ConnectionRefusedError)
                                for e in leaves)


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class Bridge:
    def __init__(self, settings: BridgeSettings) -> None:
        self.settings = settings
        self.upstream = Upstream(settings)
        self._tools: types.ListToolsResult | None = None
        self._connection: Any = None
        self._connected = anyio.Event()
        self.server: Server[Any] = Server(
            "ai-memory-bridge", version=__version__, instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools, on_call_tool=self._call_tool)
        self.server.middleware.append(self._capture_connection)

    async def _capture_connection(self, ctx: ServerRequestContext[Any, Any],
                                  call_next: CallNext) -> HandlerResult:
        if self._connection is None:
            self._connection = getattr(ctx.session, "_connection", None)
            if self._connection is not None:
                self._connected.set()
        return await call_next(ctx)

    async def _list_tools(self, ctx: ServerRequestContext[Any, Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        async def listing(client: Client) -> types.ListToolsResult:
            return await client.list_tools()

        listed = await self.upstream.call(listing)
        self._tools = types.ListToolsResult(tools=listed.tools)
        return self._tools

    async def _call_tool(self, ctx: ServerRequestContext[Any, Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        async def calling(client: Client) -> types.CallToolResult:
            # The raw request: the node's result goes to the harness as it is (the harness
            # validates it against the schemas it listed), without the SDK client listing
            # every tool first on each new connection to do that itself.
            return await client.session.send_request(
                types.CallToolRequest(params=types.CallToolRequestParams(
                    name=params.name, arguments=params.arguments or {})),
                types.CallToolResult,
                request_read_timeout_seconds=self.settings.timeout_secs)

        try:
            return await self.upstream.call(calling)
        except AiMemoryError as exc:
            return tool_error(exc)

    def initialization_options(self) -> Any:
        experimental: dict[str, dict[str, Any]] | None = (
            {CHANNEL_CAPABILITY: {}} if self.settings.channel else None)
        return self.server.create_initialization_options(experimental_capabilities=experimental)

    def notice_params(self) -> dict[str, str]:
        params = {"inbox_only": "1", "handoff": "0", "recovery": "0", "profile_digest": "0"}
        harness = self.settings.harness or ("claude-code" if self.settings.channel else None)
        if harness:
            params["harness"] = harness
        if self.settings.workspace and self.settings.project:
            params.update(workspace=self.settings.workspace, project=self.settings.project)
        return params

    async def poll_notices(self) -> None:
        """The inbox channel: poll the notice, push it when its text changes."""
        await self._connected.wait()
        schedule = NoticeSchedule(self.settings.poll_fast_secs, self.settings.poll_slow_secs)
        while True:
            try:
                reply = await self.upstream.get_json("/handoff", self.notice_params())
            except Exception as exc:
                log.info("inbox notice poll failed: %s", _reason(exc))
                schedule.failed()
            else:
                notice = reply.get("notice") if isinstance(reply, dict) else None
                if schedule.observe(notice if isinstance(notice, str) else None):
                    unread = reply.get("unread_notification_count")
                    await self._connection.notify(CHANNEL_METHOD, {
                        "content": notice,
                        "meta": {"source": "ai-memory",
                                 "count": str(reply.get("pending_message_count", "")),
                                 "notifications": "" if unread is None else str(unread)},
                    })
            await anyio.sleep(schedule.delay)

    async def run(self) -> None:
        async with stdio_server() as (read, write), anyio.create_task_group() as tg:
            if self.settings.channel:
                tg.start_soon(self.poll_notices)
            try:
                await self.server.run(read, write, self.initialization_options())
            finally:
                tg.cancel_scope.cancel()
                await self.upstream.aclose()


def run_bridge(settings: BridgeSettings) -> None:
    """Serve the bridge on stdin/stdout until the harness closes the pipe."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    anyio.run(Bridge(settings).run)
