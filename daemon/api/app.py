"""The aiohttp application: routes, middlewares, and nothing else.

Every public request passes :func:`daemon.http.auth.authenticate` (after the
error boundary and the request guard) before any route's middleware or
handler, so each handler finds its caller with
:func:`daemon.http.auth.principal_of`.

Handlers live in ``daemon/api/<domain>.py``; each module exposes
``add_routes(app)``. Handlers reach the node through ``request.app[NODE]``
(:mod:`daemon.http.appkeys`), parse and validate the request, and call
``daemon/services/*``, which own every store read and write; a handler never
touches SQLite or peers directly. Everything the routes use (webhooks, the
peer verifier, the last-seen throttle) was built by
:func:`daemon.wiring.build_node`.
"""

from __future__ import annotations

from aiohttp import web

from common import limits
from daemon.api import MIDDLEWARES, ROUTE_MODULES
from daemon.http.appkeys import NODE
from daemon.http.auth import authenticate
from daemon.http.errors import error_middleware, request_guard, set_server_header
from daemon.lanes import router as lanes
from daemon.lanes.router import lane_router
from daemon.node import Node
from daemon.runtime.logs import request_id_middleware

__all__ = ["NODE", "build_app"]


def build_app(node: Node) -> web.Application:
    app = web.Application(
        client_max_size=max(limits.request_body_max_bytes, limits.peer_body_max_bytes),
        middlewares=[request_id_middleware, error_middleware, request_guard, authenticate,
                     lane_router, *MIDDLEWARES],
    )
    app[NODE] = node
    app.on_response_prepare.append(set_server_header)
    for module in ROUTE_MODULES:
        module.add_routes(app)
    lanes.add_routes(app)
    return app
