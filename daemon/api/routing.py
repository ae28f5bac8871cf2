"""Unknown routes and wrong methods answer with the documented error codes.

aiohttp's router raises ``HTTPNotFound`` / ``HTTPMethodNotAllowed`` before
any handler runs; this middleware (inside the error boundary) turns them
into the same ``{"error", "code"}`` body as every other failure:
``not_found`` and ``method_not_allowed`` (with ``allowed``, the methods the
path does take, also in the ``Allow`` header).
"""

from __future__ import annotations

from aiohttp import web

from daemon.http.errors import Handler
from daemon.http.jsonio import json_response


@web.middleware
async def route_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed as exc:
        allowed = sorted(exc.allowed_methods)
        return json_response(
            {"error": f"{request.method} is not allowed on {request.path}; "
                      f"allowed: {', '.join(allowed)}",
             "code": "method_not_allowed", "allowed": allowed},
            status=405, headers={"Allow": ", ".join(allowed)})
    except web.HTTPNotFound as exc:
        if exc.content_type == "application/json":
            raise  # a handler's own JSON 404
        return json_response({"error": f"no route for {request.method} {request.path}",
                                  "code": "not_found"}, status=404)


MIDDLEWARES = [route_errors]


def add_routes(app: web.Application) -> None:
    """No routes of its own: only the middleware."""
