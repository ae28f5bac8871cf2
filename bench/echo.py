"""The ceiling: a bare aiohttp JSON echo server.

Whatever the daemon does per request (validation, SQLite, replication),
this server does none of it: it parses the JSON body and sends it back in
a JSON object, with status 201 for a POST and 200 otherwise, on any path.
Driven by the same client with the same requests, its throughput is the
most this machine's Python HTTP stack can give the daemon, so the daemon's
figures are reported as a ratio to it. It runs on uvloop when available,
one process, like one daemon node.

Run: ``python -m bench.echo --port 9100`` (loopback only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from aiohttp import web


async def _echo(request: web.Request) -> web.Response:
    body: Any = None
    if request.can_read_body:
        raw = await request.read()
        body = json.loads(raw) if raw else None
    status = 201 if request.method == "POST" else 200
    return web.json_response({"echo": body, "path": request.path}, status=status)


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "service": "echo"})


def make_app() -> web.Application:
    app = web.Application()
    app.router.add_get("/api/v1/health", _health)
    app.router.add_route("*", "/{tail:.*}", _echo)
    return app


def _loop_factory() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.echo", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    web.run_app(make_app(), host=args.host, port=args.port, print=None, access_log=None, loop=_loop_factory())


if __name__ == "__main__":
    main()
