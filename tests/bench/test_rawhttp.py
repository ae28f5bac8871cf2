"""The load generator's lean HTTP client against a real aiohttp server:
what it sends, keep-alive reuse, and every response it refuses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bench.rawhttp import RawSession, decode_json


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    seen: dict[str, Any] = {"peers": set(), "requests": 0}

    async def echo(request: web.Request) -> web.Response:
        seen["requests"] += 1
        seen["peers"].add(request.transport.get_extra_info("peername") if request.transport else None)
        body = await request.read()
        return web.json_response({
            "method": request.method, "path": request.path, "query": dict(request.query),
            "agent": request.headers.get("X-Agent-Id"), "type": request.content_type,
            "body": decode_json(body)})

    async def closing(request: web.Request) -> web.Response:
        seen["peers"].add(request.transport.get_extra_info("peername") if request.transport else None)
        return web.json_response({"ok": True}, headers={"Connection": "close"})

    async def chunked(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(b'{"ok": true}')
        await resp.write_eof()
        return resp

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(1.5)
        return web.json_response({})

    async def dies(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"half")
        request.transport.close()
        await asyncio.sleep(0.1)
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/close", closing)
    app.router.add_get("/chunked", chunked)
    app.router.add_get("/slow", slow)
    app.router.add_get("/dies", dies)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


async def test_a_request_carries_its_json_params_and_headers(server: tuple[str, dict[str, Any]]) -> None:
    base, _ = server
    async with RawSession((base,), 4, 5.0) as s:
        status, raw = await s.request("POST", base + "/echo", json={"to": "é", "n": [1, 2]},
                                      params={"agent_id": "a b", "limit": "50"},
                                      headers={"X-Agent-Id": "bench"})
        assert status == 200
        assert decode_json(raw) == {"method": "POST", "path": "/echo",
                                    "query": {"agent_id": "a b", "limit": "50"}, "agent": "bench",
                                    "type": "application/json", "body": {"to": "é", "n": [1, 2]}}
        status, raw = await s.request("GET", base + "/echo")
        assert status == 200 and decode_json(raw)["body"] is None
        status, raw = await s.request("GET", base + "/missing")
        assert status == 404


async def test_connections_are_kept_alive_and_bounded(server: tuple[str, dict[str, Any]]) -> None:
    base, seen = server
    async with RawSession((base,), 3, 5.0) as s:
        answers = await asyncio.gather(*(s.request("POST", base + "/echo", json={"i": i})
                                         for i in range(60)))
    assert sorted(decode_json(raw)["body"]["i"] for _, raw in answers) == list(range(60))
    assert seen["requests"] == 60 and len(seen["peers"]) <= 3  # 60 requests over at most 3 sockets


async def test_a_closing_server_gets_a_new_connection(server: tuple[str, dict[str, Any]]) -> None:
    base, seen = server
    async with RawSession((base,), 1, 5.0) as s:
        for _ in range(3):
            assert (await s.request("GET", base + "/close"))[0] == 200
        assert (await s.request("GET", base + "/echo"))[0] == 200
    assert len(seen["peers"]) == 4  # each closed connection was replaced, none reused


async def test_what_it_does_not_implement_fails_the_request_not_the_next(
        server: tuple[str, dict[str, Any]]) -> None:
    base, _ = server
    async with RawSession((base,), 1, 0.5) as s:
        with pytest.raises(aiohttp.ClientPayloadError, match="chunked"):
            await s.request("GET", base + "/chunked")
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await s.request("GET", base + "/dies")
        with pytest.raises(TimeoutError):
            await s.request("GET", base + "/slow")
        # The one connection allowed was dropped each time, never reused half-read.
        status, raw = await s.request("POST", base + "/echo", json={"after": True})
        assert status == 200 and decode_json(raw)["body"] == {"after": True}


async def test_a_refused_connection_is_a_client_error() -> None:
    async with RawSession(("http://127.0.0.1:9",), 1, 1.0) as s:
        with pytest.raises(aiohttp.ClientConnectionError):
            await s.request("GET", "http://127.0.0.1:9/echo")


async def test_requests_cancelled_while_they_wait_for_a_connection_leave_no_slot_taken(
        server: tuple[str, dict[str, Any]]) -> None:
    base, _ = server
    key = ("127.0.0.1", int(base.rsplit(":", 1)[1]))
    async with RawSession((base,), 1, 0.5) as s:
        slow = asyncio.ensure_future(s.request("GET", base + "/slow"))
        await asyncio.sleep(0.05)  # the only connection is now taken
        waiting = [asyncio.ensure_future(s.request("GET", base + "/echo")) for _ in range(3)]
        await asyncio.sleep(0.05)
        for w in waiting:
            w.cancel()  # as a timeout cancels them
        for w in waiting:
            with pytest.raises(asyncio.CancelledError):
                await w
        with pytest.raises(TimeoutError):
            await slow
        assert s._open[key] == 0 and not [w for w in s._waiters[key] if not w.done()]
        answers = await asyncio.gather(*(s.request("GET", base + "/echo") for _ in range(5)))
        assert [status for status, _ in answers] == [200] * 5
        assert s._open[key] == 1


async def test_a_connect_that_never_completes_times_out_and_frees_its_slot() -> None:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)  # never accepted: once its queue is full, connects hang
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        f = socket.socket()
        f.setblocking(False)
        f.connect_ex(("127.0.0.1", port))
        fillers.append(f)
    try:
        async with RawSession((f"http://127.0.0.1:{port}",), 1, 0.3) as s:
            for _ in range(2):  # a slot lost by the first would make the second wait, not connect
                with pytest.raises(TimeoutError):
                    await s.request("GET", f"http://127.0.0.1:{port}/")
            assert s._open[("127.0.0.1", port)] == 0
    finally:
        for f in fillers:
            f.close()
        listener.close()


async def test_a_waiter_cancelled_after_its_hand_over_passes_the_connection_on(
        server: tuple[str, dict[str, Any]]) -> None:
    base, _ = server
    key = ("127.0.0.1", int(base.rsplit(":", 1)[1]))
    async with RawSession((base,), 1, 5.0) as s:
        first = asyncio.ensure_future(s.request("GET", base + "/echo"))
        await asyncio.sleep(0)  # the first takes the only connection
        second = asyncio.ensure_future(s.request("GET", base + "/echo"))
        third = asyncio.ensure_future(s.request("GET", base + "/echo"))
        await asyncio.sleep(0)  # both wait for it
        release = s._release

        def release_then_cancel(k: tuple[str, int], conn: Any) -> None:
            release(k, conn)  # hands the connection to the second...
            if not second.done():
                second.cancel()  # ...which is cancelled before it resumes

        s._release = release_then_cancel  # type: ignore[method-assign]
        assert (await first)[0] == 200
        s._release = release  # type: ignore[method-assign]
        with pytest.raises(asyncio.CancelledError):
            await second
        assert (await asyncio.wait_for(third, 2.0))[0] == 200  # it got the connection passed on
        assert s._open[key] == 1
