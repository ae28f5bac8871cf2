"""Run one node until SIGTERM/SIGINT, then shut down in order.

Before the node is built, a member with no database settles with the
others whether it bootstraps a new cluster or is seeded
(:mod:`daemon.replication.joining`); meanwhile it already answers ``/health``.

Order: stop accepting connections, let in-flight requests finish within
``server.shutdown_grace_secs``, stop the node (background tasks, peer links,
store). Under systemd (``Type=notify``) the node says READY=1 once it
serves and STOPPING=1 when it begins to shut down (:mod:`daemon.runtime.systemd`).
With ``[tls]`` the site serves HTTPS (:mod:`daemon.runtime.tls`); SIGHUP reloads the
certificate, key and CA files for new handshakes. uvloop is used when installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable

from aiohttp import web

from daemon.api import OPERATIONS
from daemon.api.app import build_app
from daemon.api.call import frame_runner
from daemon.http.errors import BoundaryRunner
from daemon.lanes.frames import FrameServer, ops_socket_path
from daemon.lanes.layout import lane_settings, socket_path
from daemon.lanes.router import call_runner
from daemon.replication.joining import prepare
from daemon.runtime import collector, tls
from daemon.runtime.logs import configure as configure_logs
from daemon.runtime.systemd import Notifier
from daemon.settings import Settings, check_exposure
from daemon.wiring import build_node

log = logging.getLogger("ai_memory.server")


async def serve(settings: Settings, *, ready: asyncio.Event | None = None,
                notifier: Notifier | None = None) -> None:
    notifier = notifier or Notifier(None)
    check_exposure(settings)
    settings = lane_settings(settings, settings.server.lane)  # unchanged without lanes
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGHUP, tls.reload_all)
    # A member with no database first finds out, with the others, whether
    # the cluster is new (daemon/replication/joining.py); a stop meanwhile ends it.
    joining = asyncio.ensure_future(prepare(settings, notifier))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({joining, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not joining.done():
        joining.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await joining
        log.info("stopped before joining the cluster")
        return
    settings = joining.result()
    node = await build_node(settings)
    await node.start()
    # From here on, whatever stops the start (a file a lane cannot open, a
    # port in use) stops the node too: its writer thread would otherwise keep
    # the process alive, a lane that neither serves nor exits.
    runner: BoundaryRunner | None = None
    frames: FrameServer | None = None
    stop_watching: Callable[[], None] | None = None
    try:
        app = build_app(node)
        runner = BoundaryRunner(app, access_log=None,
                                shutdown_timeout=settings.server.shutdown_grace_secs)
        await runner.setup()
        # What is alive now (the built node) is kept out of later collections;
        # done before the socket listens, so its full collection delays no request.
        collector.freeze_startup()
        stop_watching = collector.watch(node.metrics)
        frames = _frame_server(app, settings)
        if frames is not None:
            await frames.start()
        for site in _sites(runner, settings):
            await site.start()
        log.info("ai-memory %s serving on %s://%s:%s as %s%s (members: %s, W=%s)",
                 settings.version, "https" if settings.tls.enabled else "http",
                 settings.server.host, settings.server.port, node.node_id,
                 f" lane {settings.server.lane} of {settings.server.lanes} (port "
                 f"{settings.server.peer_port})" if settings.server.laned else "",
                 ",".join(settings.cluster.member_ids), settings.cluster.w)
        if ready is not None:
            ready.set()
        notifier.ready(f"serving on {settings.server.host}:{settings.server.port} as "
                       f"{node.node_id}")
        await stop.wait()
    finally:
        log.info("shutting down")
        if stop_watching is not None:
            stop_watching()
        await notifier.stopping()
        if frames is not None:
            await frames.stop(settings.server.shutdown_grace_secs)
        if runner is not None:
            await runner.cleanup()
        await node.stop()


def _sites(runner: web.AppRunner, settings: Settings) -> list[web.BaseSite]:
    """Where the node listens: its port; with lanes, every lane shares it
    (SO_REUSEPORT) and also listens on its own port (for its peers) and on
    its local socket (for its sibling lanes, daemon/lanes/hop.py)."""
    s = settings.server
    ssl = tls.server_context(settings)
    if not s.laned:
        return [web.TCPSite(runner, s.host, s.port, reuse_address=True, ssl_context=ssl)]
    sites: list[web.BaseSite] = [
        web.TCPSite(runner, s.host, s.port, reuse_address=True, reuse_port=True, ssl_context=ssl),
        web.TCPSite(runner, s.host, s.peer_port, reuse_address=True, ssl_context=ssl)]
    if s.lane_dir:
        sites.append(web.UnixSite(runner, socket_path(s.lane_dir, s.lane)))
    return sites


def _frame_server(app: web.Application, settings: Settings) -> FrameServer | None:
    """With lanes, the socket on which this lane runs its siblings' operations
    (daemon/lanes/frames.py)."""
    s = settings.server
    if not (s.laned and s.lane_dir):
        return None
    return FrameServer(ops_socket_path(s.lane_dir, s.lane),
                       call_runner(app, frame_runner(app, OPERATIONS)))


def run(settings: Settings, notifier: Notifier | None = None) -> None:
    configure_logs(settings.log_level, settings.log_format, settings.cluster.node_id)
    collector.tune()
    try:
        import uvloop

        uvloop.run(serve(settings, notifier=notifier))
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(serve(settings, notifier=notifier))
