"""HTTP handlers, one module per domain. Each exposes ``add_routes(app)``
and may export ``MIDDLEWARES`` (run after the error boundary, in this
order)."""

from __future__ import annotations

from typing import Any

from daemon.api import (
    agents,
    backup,
    mail,
    memories,
    notify,
    peer,
    routing,
    search,
    subscriptions,
    sync,
    system,
    webui,
)

ROUTE_MODULES: list[Any] = [routing, system, memories, notify, agents, mail, subscriptions, peer,
                            sync, search, backup, webui]
MIDDLEWARES: list[Any] = [m for mod in ROUTE_MODULES for m in getattr(mod, "MIDDLEWARES", [])]
