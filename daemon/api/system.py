"""Health, metrics and cluster status."""

from __future__ import annotations

import time

from aiohttp import web

from daemon.http.appkeys import NODE
from daemon.http.jsonio import json_response
from daemon.services import system


async def health(request: web.Request) -> web.Response:
    node = request.app[NODE]
    server = node.settings.server
    lanes = {"lanes": server.lanes, "lane": server.lane,
             "lane_port_offset": server.lane_port_offset} if server.lanes > 1 else {}
    return json_response({**lanes,
        "status": "ok",
        "service": "ai-memory",
        "version": node.settings.version,
        "node_id": node.node_id,
        "federation_enabled": node.settings.cluster.enabled,
        "recovering": node.core.recovering,
        "state": "recovering" if node.core.recovering else "serving",
        "cluster_id": node.settings.cluster.cluster_id,
    })


async def metrics(request: web.Request) -> web.Response:
    node = request.app[NODE]
    return web.Response(text=node.metrics.render(), content_type="text/plain")


async def cluster_status(request: web.Request) -> web.Response:
    return json_response(await system.cluster_status(request.app[NODE]))


@web.middleware
async def timing(request: web.Request, handler):  # type: ignore[no-untyped-def]
    """Observe each request's time to answer, by route. A WebSocket (the
    peer channel) is counted, not timed: its handler returns when the
    socket closes, so its duration is the channel's life, not an answer's."""
    start = time.perf_counter()
    response = None
    try:
        response = await handler(request)
        return response
    finally:
        route = request.match_info.route.resource
        name = route.canonical if route is not None else "unmatched"
        metrics = request.app[NODE].metrics
        if isinstance(response, web.WebSocketResponse):
            metrics.inc("websockets_closed_total", route=name)
        else:
            metrics.observe("http_request_seconds", time.perf_counter() - start,
                            route=name, method=request.method)


MIDDLEWARES = [timing]


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/health", health)
    app.router.add_get("/api/v1/metrics", metrics)
    app.router.add_get("/metrics", metrics)  # Prometheus' default scrape path
    app.router.add_get("/api/v1/cluster/status", cluster_status)
