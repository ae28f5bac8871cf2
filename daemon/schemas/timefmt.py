"""Timestamps on the wire.

Inside the daemon every time is an int of Unix milliseconds; on the wire it
is an RFC3339 string in UTC with a ``Z`` suffix and millisecond precision
(``2026-04-27T05:30:00.123Z``). Parsing accepts any RFC3339 offset and
treats a time without one as UTC, so SDK callers that send naive ISO
strings get what they meant.
"""

from __future__ import annotations

from datetime import UTC, datetime

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def rfc3339(ms: int | None) -> str | None:
    if ms is None:
        return None
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


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
