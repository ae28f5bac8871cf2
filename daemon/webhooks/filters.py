"""Which subscriptions want an event, and under which name.

A subscription has four filters, all of which must pass:

* ``events`` -- the names it asked for (empty: every event), ours or
  upstream's aliases (:mod:`daemon.webhooks.names`);
* ``namespace`` -- ours: a plain string prefix of the event's namespace
  (``team/a`` also matches ``team/ab``; write ``team/a/`` for the subtree);
* ``namespace_filter`` -- upstream's: the event's namespace exactly;
* ``agent_filter`` -- upstream's: one of the agents the event concerns
  exactly (:attr:`daemon.webhooks.events.Event.agents`: the actor, and the
  recipient of a notification or a message).

An event without a namespace (or without agents) fails a namespace (or
agent) filter. Pure functions, no I/O.
"""

from __future__ import annotations

from typing import Protocol

from daemon.webhooks.events import Event
from daemon.webhooks.names import delivered_name


class Filtered(Protocol):
    @property
    def events(self) -> tuple[str, ...]: ...
    @property
    def namespace(self) -> str | None: ...
    @property
    def namespace_filter(self) -> str | None: ...
    @property
    def agent_filter(self) -> str | None: ...


def route(event: Event, sub: Filtered) -> str | None:
    """The name ``sub`` receives ``event`` under, or ``None`` if it does not want it."""
    name = delivered_name(event.name, sub.events)
    if name is None:
        return None
    if sub.namespace is not None and not (
            event.namespace is not None and event.namespace.startswith(sub.namespace)):
        return None
    if sub.namespace_filter is not None and event.namespace != sub.namespace_filter:
        return None
    if sub.agent_filter is not None and sub.agent_filter not in event.agents:
        return None
    return name
