"""The hand-off's lean link client (daemon/lanes/hop.py, ``Siblings.forward``).

A real aiohttp server stands for the owning lane on its Unix socket and a
real aiohttp server for the receiving lane, whose handler hands every
request over; the client talks to the receiving one over loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from common.errors import Unavailable
from daemon.lanes.hop import HOP_HEADER, Siblings
from daemon.lanes.layout import socket_path

BIG = b"x" * (1 << 20)


async def _echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.json_response({
        "method": request.method, "path_qs": request.raw_path, "length": len(body),
        "same": body == BIG if len(body) == len(BIG) else body.decode(),
        "headers": {k.lower(): v for k, v in request.headers.items()},
    }, status=201, headers={"X-Answer": "yes"})


async def _stream(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i in range(3):
        await resp.write(f"data: {i}\n\n".encode())
        await asyncio.sleep(0.01)
    await resp.write_eof()
    return resp


async def _empty(request: web.Request) -> web.Response:
    return web.Response(status=204)


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[tuple[str, Siblings, list[int]]]:
    owner = web.Application()
    owner.router.add_route("*", "/echo", _echo)
    owner.router.add_get("/stream", _stream)
    owner.router.add_delete("/empty", _empty)
    owner_runner = web.AppRunner(owner)
    await owner_runner.setup()
    await web.UnixSite(owner_runner, socket_path(str(tmp_path), 1)).start()

    siblings = Siblings(str(tmp_path), 0, 2)

    async def hand_over(request: web.Request) -> web.StreamResponse:
        return await siblings.forward(request, 1, await request.read())

    receiver = web.Application()
    receiver.router.add_route("*", "/{tail:.*}", hand_over)
    runner = web.AppRunner(receiver)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", siblings, []
    finally:
        await siblings.close()
        await runner.cleanup()
        await owner_runner.cleanup()


async def test_a_request_and_its_answer_cross_whole(front: tuple[str, Siblings, list[int]]) -> None:
    url, siblings, _ = front
    async with aiohttp.ClientSession() as s:
        for body in (b'{"to": "bob"}', BIG):
            async with s.post(url + "/echo?a=1&b=%20x", data=body,
                              headers={"X-Agent-Id": "alice", "Content-Type": "application/json"}) as r:
                assert r.status == 201
                assert r.headers["X-Answer"] == "yes"
                got = await r.json()
            assert got["method"] == "POST"
            assert got["path_qs"] == "/echo?a=1&b=%20x"
            assert got["length"] == len(body)
            assert got["same"] == (True if body is BIG else body.decode())
            assert got["headers"]["x-agent-id"] == "alice"
            assert got["headers"][HOP_HEADER.lower()] == "0"
            # the client's Host travels (with the scheme, the origin the web inbox checks)
            assert got["headers"]["host"] == url.removeprefix("http://")
            assert got["headers"]["x-ai-memory-lane-scheme"] == "http"
        async with s.get(url + "/echo") as r:  # no body, no Content-Length
            assert r.status == 201
            got = await r.json()
            assert got["length"] == 0
            assert "content-length" not in got["headers"]
        async with s.delete(url + "/empty") as r:
            assert r.status == 204
            assert await r.read() == b""
    assert len(siblings._links) == 1  # one keep-alive connection served them all


async def test_a_stream_is_relayed_chunk_by_chunk(front: tuple[str, Siblings, list[int]]) -> None:
    url, siblings, _ = front
    async with aiohttp.ClientSession() as s:
        async with s.get(url + "/stream") as r:
            assert r.headers["Content-Type"].startswith("text/event-stream")
            assert await r.read() == b"".join(f"data: {i}\n\n".encode() for i in range(3))
        async with s.post(url + "/echo", data=json.dumps({"after": "stream"})) as r:
            assert r.status == 201  # the connection is reused after a chunked answer
    assert len(siblings._links) == 1


async def test_a_lane_that_is_down_is_a_retryable_503(tmp_path: Path) -> None:
    siblings = Siblings(str(tmp_path), 0, 2)  # nobody listens on lane 1's socket

    async def hand_over(request: web.Request) -> web.StreamResponse:
        try:
            return await siblings.forward(request, 1, await request.read())
        except Unavailable as exc:
            return web.json_response({"retry_after": exc.retry_after}, status=503)

    app = web.Application()
    app.router.add_post("/x", hand_over)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with aiohttp.ClientSession() as s, s.post(f"http://127.0.0.1:{port}/x", data=b"{}") as r:
            assert r.status == 503
            assert (await r.json())["retry_after"] == 1
    finally:
        await siblings.close()
        await runner.cleanup()


class _StatusNode:
    """Enough of a node for the lanes' ``status`` call."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.asked = 0

    def status(self) -> dict[str, object]:
        self.asked += 1
        return {"lane": 1, "filler": "y" * self.size}


async def test_a_sibling_call_goes_as_a_frame_and_a_too_large_answer_over_http(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Siblings.call`` sends the lanes' own calls on the frame link; an
    answer over ``CALL_FRAME_MAX`` is refused there (it would close the link
    for every call on it) and asked for again over the HTTP socket."""
    from daemon.api.call import frame_runner
    from daemon.http.appkeys import NODE
    from daemon.lanes import router
    from daemon.lanes.frames import FrameServer, ops_socket_path

    monkeypatch.setattr(router, "CALL_FRAME_MAX", 4096)
    node = _StatusNode(10)
    app = web.Application()
    app[NODE] = node  # type: ignore[assignment]
    over_http: list[str] = []

    async def rpc(request: web.Request) -> web.StreamResponse:
        over_http.append(request.match_info["name"])
        return await router.rpc(request)
    app.router.add_post("/lane/v1/{name}", rpc)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.UnixSite(runner, socket_path(str(tmp_path), 1)).start()
    frames = FrameServer(ops_socket_path(str(tmp_path), 1),
                         router.call_runner(app, frame_runner(app, [])))
    await frames.start()
    siblings = Siblings(str(tmp_path), 0, 2)
    try:
        small = await siblings.call(1, "status", None)
        assert small == {"lane": 1, "filler": "y" * 10} and node.asked == 1
        assert over_http == []  # a frame
        node.size = 100_000  # over the (lowered) bound: refused as a frame, then over HTTP
        big = await siblings.call(1, "status", None)
        assert len(big["filler"]) == 100_000 and node.asked == 3
        assert over_http == ["status"]
        # a call that writes is answered as a frame whatever its size: it
        # must not run twice (a frame, then again over HTTP)
        ran: list[str] = []
        real = router.serve_call

        async def serve(node: object, name: str, payload: object) -> object:
            if name == "write":
                ran.append(name)
                return ["op" * 10_000]
            return await real(node, name, payload)
        monkeypatch.setattr(router, "serve_call", serve)
        assert await siblings.call(1, "write", []) == ["op" * 10_000]
        assert ran == ["write"] and over_http == ["status"]
        with pytest.raises(Exception, match="no lane call"):  # a refusal crosses as itself
            await siblings.call(1, "nonsense", None)
    finally:
        await siblings.close()
        await frames.stop()
        await runner.cleanup()


async def test_a_stopping_lane_answers_the_frames_it_runs_then_closes_its_links(
        tmp_path: Path) -> None:
    """At a graceful stop a lane takes no more frames, lets those it runs
    finish and answer (a write's share in flight lands and says so, up to
    the grace), and closes its links: a call still running past the grace
    fails at once (a retryable 503), not after its whole timeout."""
    from daemon.lanes.frames import CALL_FRAME, FrameLinks, FrameServer, ops_socket_path

    release = asyncio.Event()

    async def run(frame: object) -> tuple[int, bytes]:
        assert isinstance(frame, list) and frame[0] == CALL_FRAME
        if frame[1] == "slow":
            await release.wait()
        return 200, b"\xa2ok"

    server = FrameServer(ops_socket_path(str(tmp_path), 1), run)
    await server.start()
    links = FrameLinks(str(tmp_path), 0, 2)
    try:
        call = asyncio.create_task(links.call(1, [CALL_FRAME, "share", None], 30.0))
        slow = asyncio.create_task(links.call(1, [CALL_FRAME, "slow", None], 30.0))
        await asyncio.sleep(0.05)
        assert (await call) == (200, b"\xa2ok")
        loop = asyncio.get_running_loop()
        asyncio.get_running_loop().call_later(0.1, release.set)  # finishes within the grace
        started = loop.time()
        await server.stop(grace_s=5.0)
        assert (await slow) == (200, b"\xa2ok") and loop.time() - started < 2.0
        # a new server, a call that outlives the grace: failed at once, as a 503
        release.clear()
        server = FrameServer(ops_socket_path(str(tmp_path), 1), run)
        await server.start()
        links.close()
        stuck = asyncio.create_task(links.call(1, [CALL_FRAME, "slow", None], 30.0))
        await asyncio.sleep(0.05)
        started = loop.time()
        await server.stop(grace_s=0.2)
        with pytest.raises(Unavailable):
            await stuck
        assert loop.time() - started < 2.0
    finally:
        links.close()
        await server.stop()
