"""Event names a subscription may ask for, and how it may write them.

Ours are :data:`daemon.webhooks.events.EVENTS`. The upstream daemon names
two of them differently, and a subscription may use either name
(:data:`ALIASES`): ``memory_consolidated`` is our ``memory_consolidate``,
``agent_notified`` our ``notify``. A subscription that asked by an alias
receives the event under that name (``event`` in the body and the
``X-AI-Memory-Event`` header), so an upstream receiver that dispatches on
the name keeps working; one that asked for every event gets our names.
Upstream's ``approval_requested`` is one of ours (the approval queue makes
it, with ``approval_decided``).

``events`` arrives as a list of names, as ``"*"`` (every event), or as a
comma-separated string (upstream's form); :func:`parse_events` turns all
three into the tuple stored with the subscription, where an empty tuple
means every event.
"""

from __future__ import annotations

from typing import Final

from common import limits
from daemon.webhooks.events import (
    EVENTS,
    MEMORY_CONSOLIDATE,
    NOTIFY,
)

ALL: Final = "*"
ALIASES: Final = {"memory_consolidated": MEMORY_CONSOLIDATE, "agent_notified": NOTIFY}
ACCEPTED: Final = (*EVENTS, *ALIASES)
MAX_NAMES: Final = len(ACCEPTED)


def canonical(name: str) -> str:
    """Our name for ``name`` (itself unless it is an alias)."""
    return ALIASES.get(name, name)


def parse_events(value: object) -> tuple[str, ...]:
    """The names ``value`` asks for, deduplicated in order; ``()`` for every
    event. Raises ``ValueError`` (a 400 through validation) on anything else:
    an unknown name, a non-string entry, an empty string, too many names.
    Two names for one event (``notify`` and ``agent_notified``) keep the
    first one given."""
    if value is None:
        return ()
    if isinstance(value, str):
        if len(value) > limits.webhook_events_text_max_chars:
            raise ValueError(f"events longer than {limits.webhook_events_text_max_chars} "
                             "characters (limits.webhook_events_text_max_chars)")
        names: list[object] = [part.strip() for part in value.split(",")]
        if not any(names):
            raise ValueError('events must name at least one event, or be "*" for all')
    elif isinstance(value, list):
        names = list(value)
    else:
        raise ValueError('events must be a list of event names, a comma-separated string, or "*"')
    if len(names) > MAX_NAMES:
        raise ValueError(f"events may name at most {MAX_NAMES} events")
    seen: dict[str, str] = {}
    every = False
    for name in names:
        if not isinstance(name, str):
            raise ValueError("each event name must be a string")
        if name == ALL:
            every = True
        elif name == "" and isinstance(value, str):
            continue  # "a,,b" or a trailing comma
        elif name not in ACCEPTED:
            raise ValueError(f"unknown event {name!r}; known events: {', '.join(ACCEPTED)}")
        else:
            seen.setdefault(canonical(name), name)
    return () if every else tuple(seen.values())


def delivered_name(event: str, wanted: tuple[str, ...]) -> str | None:
    """The name under which a subscription asking for ``wanted`` receives
    ``event`` (one of ours), or ``None`` when it does not want it."""
    if not wanted:
        return event
    for name in wanted:
        if canonical(name) == event:
            return name
    return None
