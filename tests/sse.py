"""A small Server-Sent Events reader for tests, over an aiohttp response.

It parses the wire format as a browser's EventSource does (``id:``,
``event:``, ``data:``, comment lines, a blank line ends an event) and keeps
the last event id, so a test can reconnect with ``Last-Event-ID`` exactly
as a real client would.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import aiohttp


@dataclass(frozen=True, slots=True)
class Event:
    event: str
    data: Any
    id: str | None


class SSEReader:
    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self.last_id: str | None = None
        self.comments = 0
        self.retry_ms: int | None = None

    async def next(self, within: float = 10.0) -> Event:
        """The next event (raises TimeoutError, or EOFError when the stream ends)."""
        return await asyncio.wait_for(self._next(), within)

    async def _next(self) -> Event:
        event, data, seen_id = "message", [], None
        while True:
            raw = await self.resp.content.readline()
            if not raw:
                raise EOFError("stream ended")
            line = raw.decode().rstrip("\r\n")
            if line == "":
                if seen_id is not None:
                    self.last_id = seen_id
                if data:
                    return Event(event, json.loads("\n".join(data)), self.last_id)
                event, data, seen_id = "message", [], None
                continue
            if line.startswith(":"):
                self.comments += 1
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                seen_id = value
            elif name == "event":
                event = value
            elif name == "data":
                data.append(value)
            elif name == "retry":
                self.retry_ms = int(value)

    async def until(self, kind: str, within: float = 10.0) -> Event:
        while True:
            ev = await self.next(within)
            if ev.event == kind:
                return ev
