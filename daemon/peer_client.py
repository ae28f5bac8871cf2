"""Outbound peer HTTP: one pooled aiohttp session, signed msgpack requests.

Every call has a timeout (``limits.peer_request_timeout_secs`` unless the
caller passes a shorter one); a transport failure, a timeout or a non-2xx
answer all raise :class:`PeerUnreachable`, which the node reports to the
failure detector. Bodies are msgpack both ways. A call made while serving a
request carries its ``X-Request-Id`` (see :mod:`daemon.logs`); each call is
logged at debug level with peer, path, status and duration.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import aiohttp
import msgpack

from common import limits
from daemon.logs import HEADER as REQUEST_ID_HEADER
from daemon.logs import request_id
from daemon.peer_auth import sign
from federation.messages import PROTOCOL_VERSION

PROTOCOL_HEADER = "X-AIM-Protocol"  # the sender's peer protocol version (federation.messages)

log = logging.getLogger("ai_memory.peer")


class PeerUnreachable(Exception):
    def __init__(self, peer: str, reason: str) -> None:
        super().__init__(f"{peer}: {reason}")
        self.peer = peer
        self.reason = reason  # "unreachable" | "timeout" | "rejected"


class PeerClient:
    def __init__(self, node_id: str, urls: dict[str, str], secret: str | None) -> None:
        self.node_id = node_id
        self.urls = urls
        self.secret = secret
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit_per_host=16, keepalive_timeout=30)
        self._session = aiohttp.ClientSession(connector=connector)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call(self, peer: str, path: str, payload: Any, *,
                   timeout_s: float | None = None) -> Any:
        if self._session is None:
            raise PeerUnreachable(peer, "unreachable")
        url = self.urls.get(peer)
        if url is None:
            raise PeerUnreachable(peer, "unreachable")
        body = msgpack.packb(payload, use_bin_type=True)
        headers = {"Content-Type": "application/msgpack", "X-AIM-Node": self.node_id,
                   PROTOCOL_HEADER: str(PROTOCOL_VERSION)}
        rid = request_id.get()
        if rid is not None:
            headers[REQUEST_ID_HEADER] = rid
        started = time.monotonic()
        if self.secret:
            headers.update(sign(self.secret, self.node_id, "POST", path, body, time.time()))
        t = aiohttp.ClientTimeout(total=timeout_s or limits.peer_request_timeout_secs)
        try:
            async with self._session.post(url + path, data=body, headers=headers, timeout=t) as resp:
                raw = await resp.read()
                if resp.status >= 400:
                    raise PeerUnreachable(peer, f"rejected ({resp.status})")
        except TimeoutError:
            self._log_failure(peer, path, "timeout", started)
            raise PeerUnreachable(peer, "timeout") from None
        except (aiohttp.ClientError, OSError):
            self._log_failure(peer, path, "unreachable", started)
            raise PeerUnreachable(peer, "unreachable") from None
        except PeerUnreachable as exc:
            self._log_failure(peer, path, exc.reason, started)
            raise
        log.debug("peer call", extra={"fields": {
            "peer": peer, "path": path, "status": resp.status, "bytes_out": len(body),
            "ms": round((time.monotonic() - started) * 1000, 1)}})
        return msgpack.unpackb(raw, raw=False) if raw else None

    @staticmethod
    def _log_failure(peer: str, path: str, reason: str, started: float) -> None:
        log.debug("peer call failed", extra={"fields": {
            "peer": peer, "path": path, "reason": reason,
            "ms": round((time.monotonic() - started) * 1000, 1)}})
