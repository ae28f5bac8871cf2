"""Run one node until SIGTERM/SIGINT, then shut down in order.

Order: stop accepting connections, let in-flight requests finish within
``server.shutdown_grace_secs``, stop the node (background tasks, peer links,
store). uvloop is used when installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from aiohttp import web

from daemon.app import build_app
from daemon.http_errors import BoundaryRunner
from daemon.settings import Settings
from daemon.wiring import build_node

log = logging.getLogger("ai_memory.server")


async def serve(settings: Settings, *, ready: asyncio.Event | None = None) -> None:
    node = await build_node(settings)
    await node.start()
    app = build_app(node)
    runner = BoundaryRunner(app, access_log=None,
                           shutdown_timeout=settings.server.shutdown_grace_secs)
    await runner.setup()
    site = web.TCPSite(runner, settings.server.host, settings.server.port, reuse_address=True)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        await node.stop()
        raise
    log.info("ai-memory %s serving on %s:%s as %s (members: %s, W=%s)",
             settings.version, settings.server.host, settings.server.port, node.node_id,
             ",".join(settings.cluster.member_ids), settings.cluster.w)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        await runner.cleanup()
        await node.stop()


def run(settings: Settings) -> None:
    logging.basicConfig(
        level=getattr(logging, settings.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        import uvloop

        uvloop.run(serve(settings))
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(serve(settings))
