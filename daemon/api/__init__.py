"""HTTP handlers, one module per domain. Each exposes ``add_routes(app)``
and may export ``MIDDLEWARES`` (run after the error boundary, in this
order) and ``OPERATIONS``, its routes written as operations
(:mod:`daemon.api.call`), which ``/mcp`` runs in process too."""

from __future__ import annotations

from typing import Any

from daemon.api import (
    agents,
    backup,
    identity,
    mail,
    mcp,
    memories,
    notify,
    peer,
    purge,
    routing,
    search,
    streams,
    subscriptions,
    sync,
    system,
    webui,
)
from daemon.api.call import Route

ROUTE_MODULES: list[Any] = [routing, system, memories, notify, agents, mail, purge, subscriptions,
                            peer, sync, search, backup, webui, identity, mcp, streams]
MIDDLEWARES: list[Any] = [m for mod in ROUTE_MODULES for m in getattr(mod, "MIDDLEWARES", [])]
OPERATIONS: list[Route] = [r for mod in ROUTE_MODULES for r in getattr(mod, "OPERATIONS", [])]
