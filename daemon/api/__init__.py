"""HTTP handlers, one module per domain. ``ROUTE_MODULES`` lists them in
registration order; ``MIDDLEWARES`` run after the error boundary."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

_NAMES = ["system", "memories", "notify", "agents", "mail", "subscriptions", "peer", "sync", "mcp", "web"]


def _load() -> list[ModuleType]:
    mods = []
    for name in _NAMES:
        try:
            mods.append(importlib.import_module(f"daemon.api.{name}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"daemon.api.{name}":
                raise
    return mods


ROUTE_MODULES: list[Any] = _load()
MIDDLEWARES: list[Any] = [m for mod in ROUTE_MODULES for m in getattr(mod, "MIDDLEWARES", [])]
