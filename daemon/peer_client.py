"""Outbound peer HTTP: one pooled aiohttp session, signed msgpack requests.

Every call has a timeout (``limits.peer_request_timeout_secs`` unless the
caller passes a shorter one); a transport failure, a timeout or a non-2xx
answer all raise :class:`PeerUnreachable`, which the node reports to the
failure detector. Bodies are msgpack both ways.

Requests are signed for the receiving member and for the boot id it last
told us (:mod:`daemon.peer_auth`). A receiver that restarted answers 401
with its new boot id in ``X-AIM-Boot``; the client remembers it and sends
the request again, once, signed afresh.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
import msgpack

from common import limits
from daemon.peer_auth import BOOT_HEADER, sign


class PeerUnreachable(Exception):
    def __init__(self, peer: str, reason: str) -> None:
        super().__init__(f"{peer}: {reason}")
        self.peer = peer
        self.reason = reason  # "unreachable" | "timeout" | "rejected"


class PeerClient:
    def __init__(self, node_id: str, urls: dict[str, str], secret: str | None, *,
                 now_s: Callable[[], float]) -> None:
        self.node_id = node_id
        self.now_s = now_s  # the node's clock (seconds): what signatures are checked against
        self.urls = urls
        self.secret = secret
        self._session: aiohttp.ClientSession | None = None
        self._boots: dict[str, str] = {}  # peer -> its boot id, as last learned

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit_per_host=limits.peer_connections_per_host_max,
                                        keepalive_timeout=limits.peer_keepalive_secs)
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
        t = aiohttp.ClientTimeout(total=timeout_s or limits.peer_request_timeout_secs)
        for attempt in (1, 2):
            headers = {"Content-Type": "application/msgpack", "X-AIM-Node": self.node_id}
            boot = self._boots.get(peer, "")
            if self.secret:
                headers.update(sign(self.secret, self.node_id, peer, "POST", path, body,
                                    self.now_s(), boot))
            try:
                async with self._session.post(url + path, data=body, headers=headers,
                                              timeout=t) as resp:
                    raw = await resp.read()
                    new_boot = resp.headers.get(BOOT_HEADER)
                    status = resp.status
            except TimeoutError:
                raise PeerUnreachable(peer, "timeout") from None
            except (aiohttp.ClientError, OSError):
                raise PeerUnreachable(peer, "unreachable") from None
            if status == 401 and new_boot and new_boot != boot and attempt == 1:
                self._boots[peer] = new_boot
                continue
            if status >= 400:
                raise PeerUnreachable(peer, f"rejected ({status})")
            break
        return msgpack.unpackb(raw, raw=False) if raw else None
