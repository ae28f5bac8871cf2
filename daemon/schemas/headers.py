"""Request headers the daemon reads, checked at the boundary.

aiohttp decodes header bytes as UTF-8 with ``surrogateescape``, so a
non-UTF-8 value reaches Python as a string with lone surrogates that fails
later, wherever it is encoded (SQLite, JSON, a log line). :func:`hostile_header`
finds such values, and control characters, in any header, so the request
guard in :mod:`daemon.http.errors` refuses them with a 400 before a handler
runs. Headers with a fixed shape get their own check here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from aiohttp import web

from common import limits
from common.errors import BadRequest

SESSION_HEADER = "x-memory-actor-session-id"
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_SESSION = re.compile(r"^[A-Za-z0-9_\-:@./]+$")


def hostile_header(headers: Mapping[str, str]) -> str | None:
    """The name of the first header whose value is not UTF-8 or carries a
    control character (tab allowed), or ``None``."""
    # Every request passes here: one scan of all headers joined (tab is
    # allowed, so it cannot hide a fault); only a hit walks them one by one.
    joined = "\t".join(f"{name}\t{value}" for name, value in headers.items())
    if joined.isascii() and _CONTROL.search(joined) is None:
        return None
    for name, value in headers.items():
        try:
            value.encode("utf-8")
            name.encode("utf-8")
        except UnicodeEncodeError:
            return name.encode("utf-8", "replace").decode("utf-8")
        if _CONTROL.search(value):
            return name
    return None


def session_id(request: web.Request) -> str | None:
    """The caller's ``x-memory-actor-session-id`` (absent or empty: None).

    Session ids are what ``POST /sessions`` accepts or makes: 1-128 of
    ``[A-Za-z0-9_-:@./]``. Anything else cannot name a session and is a 400
    rather than a silently truncated lookup."""
    value = request.headers.get(SESSION_HEADER)
    if not value:
        return None
    if len(value) > limits.request_id_max_chars or not _SESSION.fullmatch(value):
        raise BadRequest(
            f"{SESSION_HEADER} must be 1-{limits.request_id_max_chars} characters of "
            "[A-Za-z0-9_-:@./] (limits.request_id_max_chars)", header=SESSION_HEADER)
    return value
