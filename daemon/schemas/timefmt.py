"""Timestamps on the wire.

Inside the daemon every time is an int of Unix milliseconds; on the wire it
is an RFC3339 string in UTC with a ``Z`` suffix and millisecond precision
(``2026-04-27T05:30:00.123Z``). Parsing accepts any RFC3339 offset and
treats a time without one as UTC, so SDK callers that send naive ISO
strings get what they meant.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from functools import lru_cache

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@lru_cache(maxsize=4096)
def _whole_seconds(secs: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))


def rfc3339(ms: int | None) -> str | None:
    # Hot path (every inbox row has two timestamps): the formatted seconds
    # are cached, since rows of one page tend to share them.
    if ms is None:
        return None
    secs, millis = divmod(ms, 1000)
    return f"{_whole_seconds(secs)}.{millis:03d}Z"


def parse_rfc3339(value: str) -> int:
    """Unix ms of an RFC3339 / ISO-8601 time; ``ValueError`` if it is not one."""
    text = value.strip()
    if not text or len(text) > 40:
        raise ValueError("not an RFC3339 timestamp")
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not an RFC3339 timestamp: {value!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - _EPOCH
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000
