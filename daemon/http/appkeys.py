"""The aiohttp application keys, in one module both the app and the route
modules import (so neither imports the other to find them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from daemon.node import Node

NODE: web.AppKey[Node] = web.AppKey("node")
