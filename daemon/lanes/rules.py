"""Which lane serves each route (docs/lanes.md, "What a lane owns").

A :class:`Rule` per route says where a request is served:

* ``HERE``: where it arrived (peer and lane calls, which arrive at the
  right lane by their port; this lane's health; a route that reads and
  writes only records every lane keeps);
* ``HOME``: by the home lane (lane 0): memories, their links, grants and
  namespace subscriptions; the identity admin;
* ``KEY``: by the lane of a key its request names (:attr:`Rule.lane`), or,
  where that answers :data:`ALL_LANES`, by every lane, the answers merged
  by :attr:`Rule.merge` (a route that reads one key or many by its query);
* ``EVERY``: by every lane (a record each lane keeps for itself);
* ``FANOUT``: asked of every lane, the answers merged (:attr:`Rule.merge`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgspec
from aiohttp import web

if TYPE_CHECKING:
    from daemon.node import Node

HERE: Final = "here"
HOME: Final = "home"
KEY: Final = "key"
EVERY: Final = "every"
FANOUT: Final = "fanout"
ALL_LANES: Final = -1  # a KEY rule's answer: fan this request out (merged by Rule.merge)


class View:
    """What a rule may look at: the request, its body, the node."""

    __slots__ = ("_json", "body", "node", "request")

    def __init__(self, request: web.Request, body: bytes, node: Node) -> None:
        self.request = request
        self.body = body
        self.node = node
        self._json: Any = msgspec.UNSET

    def json(self) -> dict[str, Any]:
        """The body as a JSON object ({} when it is none or not one: the route refuses it)."""
        if self._json is msgspec.UNSET:
            try:
                found = msgspec.json.decode(self.body) if self.body else None
            except msgspec.DecodeError:
                found = None
            self._json = found if isinstance(found, dict) else {}
        return self._json  # type: ignore[no-any-return]

    @property
    def lanes(self) -> int:
        return self.node.settings.server.lanes


LaneOf = Callable[[View], Awaitable[int | None]]
Merge = Callable[[View, list[Any]], Any]


@dataclass(frozen=True, slots=True)
class Rule:
    where: str
    lane: LaneOf | None = None  # KEY: the lane, None to serve here (the route refuses it)
    merge: Merge | None = None  # FANOUT: every lane's answer, by lane, into one


HERE_RULE: Final = Rule(HERE)
HOME_RULE: Final = Rule(HOME)
EVERY_RULE: Final = Rule(EVERY)

_TABLE: dict[tuple[str, str], Rule] = {}


def register(method: str, path: str, rule: Rule) -> None:
    _TABLE[(method, path)] = rule


def rule_for(request: web.Request) -> Rule:
    """The rule of ``request``'s route; a path no route serves is answered here (404)."""
    resource = request.match_info.route.resource
    if resource is None:
        return HERE_RULE
    found = _TABLE.get((request.method, resource.canonical))
    if found is None and request.method == "HEAD":
        found = _TABLE.get(("GET", resource.canonical))
    if found is None:
        found = _TABLE.get(("*", resource.canonical))
    return found if found is not None else HERE_RULE


def table() -> dict[tuple[str, str], Rule]:
    """Every rule registered (by :mod:`daemon.lanes.table`, which the router imports)."""
    return dict(_TABLE)
