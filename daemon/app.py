"""The aiohttp application: routes, middlewares, and nothing else.

Handlers live in ``daemon/api/<domain>.py``; each module exposes
``add_routes(app)``. Handlers reach the node through ``request.app[NODE]``
and call ``daemon/services/*``; they never touch SQLite or peers directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from common import limits
from daemon.http_errors import error_middleware

if TYPE_CHECKING:
    from daemon.node import Node

NODE: web.AppKey[Node] = web.AppKey("node")


def build_app(node: Node) -> web.Application:
    from daemon.api import MIDDLEWARES, ROUTE_MODULES
    from daemon.logs import request_id_middleware

    app = web.Application(
        client_max_size=max(limits.request_body_max_bytes, limits.peer_body_max_bytes),
        middlewares=[request_id_middleware, error_middleware, *MIDDLEWARES],
    )
    app[NODE] = node
    for module in ROUTE_MODULES:
        module.add_routes(app)
    return app
