"""Which lane serves each route (docs/lanes.md, "What a lane owns").

A :class:`Rule` per route says where a request is served:

* ``HERE``: where it arrived (peer and lane calls, which arrive at the
  right lane by their port; this lane's health; a route that reads and
  writes only records every lane keeps);
* ``HOME``: by the home lane (lane 0): namespace subscriptions, purges,
  signed sync calls, the SDK's cluster call;
* ``KEY``: by the lane of a key its request names (:attr:`Rule.lane`), or,
  where that answers :data:`ALL_LANES`, by every lane, the answers merged
  by :attr:`Rule.merge` (a route that reads one key or many by its query);
* ``EVERY``: by every lane (a record each lane keeps for itself);
* ``FANOUT``: asked of every lane, the answers merged (:attr:`Rule.merge`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgspec
from aiohttp import web

from common.lanes import lane_of_id
from common.policy import Principal
from daemon.http.appkeys import NODE
from daemon.http.auth import PRINCIPAL

if TYPE_CHECKING:
    from daemon.node import Node

HERE: Final = "here"
HOME: Final = "home"
KEY: Final = "key"
EVERY: Final = "every"
FANOUT: Final = "fanout"
ALL_LANES: Final = -1  # a KEY rule's answer: fan this request out (merged by Rule.merge)


class View:
    """What a rule may look at: the request's query, path, headers, caller
    and body (an HTTP request's, or an ``/mcp`` tool call's), and the node."""

    __slots__ = ("_json", "body", "headers", "match", "node", "principal", "query")

    def __init__(self, node: Node, *, query: Mapping[str, Any], match: Mapping[str, str],
                 headers: Mapping[str, str], principal: Principal | None, body: bytes = b"",
                 json: dict[str, Any] | None = None) -> None:
        self.node = node
        self.query = query
        self.match = match
        self.headers = headers
        self.principal = principal
        self.body = body
        self._json: Any = msgspec.UNSET if json is None else json

    @classmethod
    def of(cls, request: web.Request, body: bytes) -> View:
        return cls(request.app[NODE], query=request.query, match=request.match_info,
                   headers=request.headers, principal=request.get(PRINCIPAL), body=body)

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

    async def id_lane(self, record_id: str) -> int:
        """The lane of the record a message, notification or memory id names:
        the one its id names (:func:`common.lanes.lane_of_id`), unless an
        offline change of the lane count placed it elsewhere (its
        ``lane_moves`` row, which every lane holds)."""
        moved = await self.node.store.moved_lane(record_id)
        return lane_of_id(record_id, self.lanes) if moved is None else moved


LaneOf = Callable[[View], Awaitable[int | None]]
Merge = Callable[[View, list[Any]], Any]


EVERYWHERE: Final = ALL_LANES


@dataclass(frozen=True, slots=True)
class Rule:
    where: str
    # KEY: the lane; None to serve here (the route refuses the request);
    # EVERYWHERE to fan it out with ``merge`` (a list that spans mailboxes)
    lane: LaneOf | None = None
    merge: Merge | None = None  # FANOUT: every lane's answer, by lane, into one
    text: bool = False  # the answers are text (metrics), not JSON


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
    return rule_of(request.method, resource.canonical)


def rule_of(method: str, pattern: str) -> Rule:
    """The rule of the route ``method pattern`` (``/api/v1/memories/{id}``)."""
    found = _TABLE.get((method, pattern))
    if found is None and method == "HEAD":
        found = _TABLE.get(("GET", pattern))
    if found is None:
        found = _TABLE.get(("*", pattern))
    return found if found is not None else HERE_RULE


async def place(rule: Rule, view: View, own: int) -> int | None:
    """Where a request of ``rule`` is served: a lane, or None for every lane
    (EVERY, FANOUT); ``own`` (this lane) when it stays here."""
    if rule.where == HERE:
        return own
    if rule.where == HOME:
        return 0
    if rule.where == KEY:
        assert rule.lane is not None
        lane = await rule.lane(view)
        return own if lane is None else None if lane == EVERYWHERE else lane
    return None


def table() -> dict[tuple[str, str], Rule]:
    """Every rule registered (by :mod:`daemon.lanes.table`, which the router imports)."""
    return dict(_TABLE)
