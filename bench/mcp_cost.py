"""``python -m bench --mcp``: what a tool call over ``/mcp`` costs the server, beside HTTP.

One real ``ai-memory serve`` node on 127.0.0.1 (no peers). The same two
pairs of operations are driven two ways, from this process:

- **MCP**: ``--mcp-sessions`` clients of the official SDK
  (``mcp.client.Client`` over ``streamable_http_client``, each with its own
  connection pool and its own ``X-Agent-Id``), connected once before the
  measured rounds, as an agent's harness stays connected;
- **HTTP**: as many workers of one aiohttp session (keep-alive
  connections) sending the requests those tools make.

The pairs are ``memory_notify`` + ``memory_inbox`` (a notification to the
session's own agent, then its unread inbox, marked read so it stays short)
and ``memory_message_send`` + ``memory_message_pop`` (mail to the session's
own project, then a claim from it). The HTTP requests carry what the tools
send: an ``Idempotency-Key`` on the notify and the send, a request id on
the pop, the inbox's ``unread_only``/``limit``/``mark_read`` query.

The figure is the server process's CPU time (user + system, from /proc,
:mod:`bench.cpu`) over each measured window divided by the tool calls (or
requests) in it; the client's own CPU is not counted. Each transport is
measured two ways. **Paced**, the headline: every transport at the same
call rates (``--mcp-rate``, one or more), because a node's CPU per call falls as its load
rises (the store writer commits fuller batches, the event loop wakes less
often per request), and a closed loop runs the light HTTP client faster
than the heavy MCP one, which would flatter HTTP. **Closed loop**: each
session's next call as soon as the last is answered, as an agent's
harness calls, at whatever rate the client reaches. Rounds alternate the
order of the transports so that drift on a shared machine hits them alike,
and each round's MCP figure is also divided by the HTTP figure measured
next to it (paired rounds). The node's idle CPU (timers, background tasks)
over a few quiet seconds is printed too: it is inside every window.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.cpu import CLK_TCK, cpu_ticks
from bench.procs import Cluster, post_json

WORKSPACE = "bench"
PAIRS = ("notify+inbox", "send+pop")
TRANSPORTS = ("http", "mcp", "mcp-legacy")
LABELS = {"http": "HTTP", "mcp": "MCP 2026-07-28", "mcp-legacy": "MCP legacy handshake"}


CLOSED = "closed loop"


def _table() -> dict[str, dict[str, list[float]]]:
    return {t: {p: [] for p in PAIRS} for t in TRANSPORTS}


@dataclass
class Figures:
    """Server CPU seconds per call and calls/s, per mode (a paced rate, or the closed
    loop), transport and pair; one entry per round."""

    modes: tuple[str, ...]
    per_call: dict[str, dict[str, dict[str, list[float]]]] = field(default_factory=dict)
    calls_per_s: dict[str, dict[str, dict[str, list[float]]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for m in self.modes:
            self.per_call[m], self.calls_per_s[m] = _table(), _table()


def _mode(rate: float) -> str:
    return f"paced at {rate:.0f} calls/s"


def _agent(i: int) -> str:
    return f"mcp-bench-{i}"


def _project(i: int) -> str:
    return f"mcp-bench-p{i}"


class HttpSide:
    """The requests the tools make, sent as plain HTTP by ``sessions`` workers."""

    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url, self.session = url, session

    async def _call(self, method: str, path: str, i: int, *, body: Any = None,
                    params: dict[str, str] | None = None,
                    headers: dict[str, str] | None = None) -> Any:
        async with self.session.request(method, self.url + path, json=body, params=params,
                                        headers={"X-Agent-Id": _agent(i), **(headers or {})}) as r:
            answer = await r.json()
            if r.status >= 300:
                raise RuntimeError(f"HTTP {method} {path}: {r.status} {answer}")
            return answer

    async def notify_inbox(self, i: int) -> None:
        await self._call("POST", "/api/v1/notify", i,
                         body={"target_agent_id": _agent(i), "title": "mcp bench",
                               "payload": "x" * 200},
                         headers={"Idempotency-Key": str(uuid.uuid4())})
        await self._call("GET", "/api/v1/inbox", i,
                         params={"agent_id": _agent(i), "unread_only": "true", "limit": "50",
                                 "mark_read": "true"})

    async def send_pop(self, i: int) -> None:
        await self._call("POST", "/api/v1/messages", i,
                         body={"to_workspace": WORKSPACE, "to_project": _project(i),
                               "from_workspace": WORKSPACE, "from_project": _project(i),
                               "subject": "mcp bench", "body": "y" * 200},
                         headers={"Idempotency-Key": str(uuid.uuid4())})
        got = await self._call("POST", "/api/v1/messages/pop", i,
                               body={"workspace": WORKSPACE, "project": _project(i),
                                     "request_id": str(uuid.uuid4())})
        if got.get("message") is None:
            raise RuntimeError("HTTP: an empty pop")


class McpSide:
    """The same pairs as tool calls of ``sessions`` official MCP clients."""

    def __init__(self, clients: list[Any]) -> None:
        self.clients = clients

    async def _tool(self, i: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await self.clients[i].call_tool(name, arguments)
        if result.is_error:
            raise RuntimeError(f"MCP {name}: {result.content}")
        got = result.structured_content
        if not isinstance(got, dict):
            raise RuntimeError(f"MCP {name}: no structured result")
        return got

    async def notify_inbox(self, i: int) -> None:
        await self._tool(i, "memory_notify", {"target_agent_id": _agent(i), "title": "mcp bench",
                                              "payload": "x" * 200})
        await self._tool(i, "memory_inbox", {"mark_read": True})

    async def send_pop(self, i: int) -> None:
        await self._tool(i, "memory_message_send", {
            "to_workspace": WORKSPACE, "to_project": _project(i), "from_workspace": WORKSPACE,
            "from_project": _project(i), "subject": "mcp bench", "body": "y" * 200})
        got = await self._tool(i, "memory_message_pop", {"workspace": WORKSPACE,
                                                         "project": _project(i)})
        if got.get("message") is None:
            raise RuntimeError("MCP: an empty pop")


@asynccontextmanager
async def mcp_clients(url: str, n: int, mode: str = "auto") -> AsyncIterator[list[Any]]:
    """``n`` connected official MCP clients of ``url``/mcp, one agent each.

    ``mode`` is the client's: ``auto`` (the SDK's default: ``server/discover``,
    then the 2026-07-28 per-request envelope) or ``legacy`` (the ``initialize``
    handshake, as clients built on earlier SDKs speak)."""
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async with AsyncExitStack() as stack:
        clients = []
        for i in range(n):
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers={"X-Agent-Id": _agent(i)}, timeout=60.0))
            clients.append(await stack.enter_async_context(
                Client(streamable_http_client(url + "/mcp", http_client=http), mode=mode)))
        yield clients


async def _window(pid: int, sessions: int, pairs: int, pair: Callable[[int], Awaitable[None]],
                  rate: float | None = None) -> tuple[float, float]:
    """``pairs`` pairs spread over ``sessions`` loops; (server CPU s per call, calls/s).

    Without ``rate`` each loop sends its next pair as soon as the last one is
    answered (closed loop); with it, the loops together start ``rate`` calls a
    second (a pair every ``2 * sessions / rate`` s in each, staggered), so
    every transport is measured at the same load.
    """
    per_session = [pairs // sessions + (1 if i < pairs % sessions else 0) for i in range(sessions)]
    every = 2 * sessions / rate if rate else 0.0
    t0, before = time.monotonic(), cpu_ticks(pid)

    async def loop(i: int) -> None:
        for k in range(per_session[i]):
            if every:
                await asyncio.sleep(max(0.0, t0 + (k + i / sessions) * every - time.monotonic()))
            await pair(i)

    await asyncio.gather(*(loop(i) for i in range(sessions)))
    spent, wall = (cpu_ticks(pid) - before) / CLK_TCK, time.monotonic() - t0
    return spent / (2 * pairs), 2 * pairs / wall


async def _measure(url: str, pid: int, rounds: int, pairs: int, sessions: int,
                   rates: tuple[float, ...]) -> Figures:
    paced = {_mode(r): r for r in rates}
    out = Figures((*paced, CLOSED))
    connector = aiohttp.TCPConnector(limit_per_host=sessions)
    async with aiohttp.ClientSession(connector=connector) as session, \
            mcp_clients(url, sessions) as clients, \
            mcp_clients(url, sessions, "legacy") as legacy:
        sides: dict[str, Any] = {"http": HttpSide(url, session), "mcp": McpSide(clients),
                                 "mcp-legacy": McpSide(legacy)}
        for side in sides.values():  # warm: connections, caches, the SDK's first import
            await _window(pid, sessions, sessions, side.notify_inbox)
            await _window(pid, sessions, sessions, side.send_pop)
        for r in range(rounds):
            for mode in out.modes:
                for t in TRANSPORTS if r % 2 == 0 else TRANSPORTS[::-1]:
                    side = sides[t]
                    for p, fn in zip(PAIRS, (side.notify_inbox, side.send_pop), strict=True):
                        per_call, got = await _window(pid, sessions, pairs, fn,
                                                      paced.get(mode))
                        out.per_call[mode][t][p].append(per_call)
                        out.calls_per_s[mode][t][p].append(got)
                    print(f"round {r + 1} {mode} {t}: " + ", ".join(
                        f"{p} {out.per_call[mode][t][p][-1] * 1e3:.3f} ms CPU per call "
                        f"({out.calls_per_s[mode][t][p][-1]:.0f} calls/s)" for p in PAIRS),
                        flush=True)
    return out


def _idle_cpu(pid: int, seconds: float = 3.0) -> float:
    """The node's own CPU per second while nothing is asked of it."""
    before = cpu_ticks(pid)
    time.sleep(seconds)
    return (cpu_ticks(pid) - before) / CLK_TCK / seconds


def _load() -> str:
    with open("/proc/loadavg", encoding="ascii") as f:
        return " ".join(f.read().split()[:3])


def main(rounds: int, pairs: int, sessions: int, rates: tuple[float, ...]) -> int:
    with tempfile.TemporaryDirectory(prefix="aim-mcp-bench-") as tmp:
        node = Cluster(Path(tmp), 1, 1).start()
        try:
            url, pid = node.urls[0], node.nodes[0].pid
            for i in range(sessions):  # the projects the mail goes to must exist
                status, answer = post_json(url + "/api/v1/sessions", {
                    "workspace": WORKSPACE, "project": _project(i), "harness": "bench",
                    "session_id": f"mcp-bench-{i}-{uuid.uuid4().hex[:8]}"},
                    headers={"X-Agent-Id": _agent(i)})
                if status not in (200, 201):
                    raise RuntimeError(f"POST /api/v1/sessions: {status} {answer}")
            load_before = _load()
            got = asyncio.run(_measure(url, pid, rounds, pairs, sessions, rates))
            idle = _idle_cpu(pid)
        finally:
            node.stop()
    print(f"\nserver CPU per call, 1 node, {sessions} sessions, median of {rounds} rounds "
          f"({pairs} pairs of each kind per transport, mode and round); load average "
          f"{load_before} before, {_load()} after; the idle node used {idle * 1e3:.1f} ms of "
          "CPU per second")
    for mode in got.modes:
        print(f"\n{mode}" + (": each session's next call as soon as the last is answered"
                              if mode == CLOSED else ": every transport at the same load"))
        print(report(got, mode))
    return 0


def report(got: Figures, mode: str) -> str:
    """One mode's table: per pair kind, each transport's CPU per call and its ratio to HTTP."""
    lines = ["| pair | transport | server CPU per call | / HTTP | paired rounds "
             "(min-median-max) | calls/s |", "|---|---|---|---|---|---|"]
    for p in PAIRS:
        http = got.per_call[mode]["http"][p]
        for t in TRANSPORTS:
            mine = got.per_call[mode][t][p]
            ratio, paired = "", ""
            if t != "http" and statistics.median(http) > 0:  # a tiny run may see no tick
                ratio = f"{statistics.median(mine) / statistics.median(http):.2f}"
            if t != "http" and all(h > 0 for h in http):
                r = sorted(m / h for m, h in zip(mine, http, strict=True))
                paired = f"{r[0]:.2f}-{statistics.median(r):.2f}-{r[-1]:.2f}"
            lines.append(f"| {p} | {LABELS[t]} | {statistics.median(mine) * 1e3:.3f} ms | {ratio} "
                         f"| {paired} | {statistics.median(got.calls_per_s[mode][t][p]):.0f} |")
    return "\n".join(lines)
