"""HTTP client for peer endpoints: one pooled session for all peers.

Every call has a timeout (``limits.peer_request_timeout_secs`` unless the
caller passes a shorter one); a transport failure, a timeout or a non-2xx
answer all raise :class:`PeerUnreachable`, which the node reports to the
failure detector. Bodies are msgpack both ways.

Requests are signed for the receiving member and for the boot id it last
told us (:mod:`daemon.peer.auth`). A receiver that restarted answers 401
with its new boot id in ``X-AIM-Boot``; the client remembers it and sends
the request again, once, signed afresh. A call made while serving a request
carries its ``X-Request-Id`` (see :mod:`daemon.runtime.logs`) and every call carries
the sender's ``X-AIM-Protocol`` and ``X-AIM-Incarnation`` (the incarnation
of its database, which a member that lost its disk changes; a receiver drops
what a replaced incarnation still had in flight, see
:meth:`federation.core.NodeCore.on_message`). A receiver's answer names its
own, and :meth:`PeerClient.call_from` returns it with the answer. Each call
is logged at debug level with peer, path, status and duration. Over https
each request and channel is opened with the TLS client context current at
that moment (``tls``, see :mod:`daemon.runtime.tls`), so a reloaded certificate is
used by the next connection.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import msgpack

from common import limits
from daemon.peer.auth import BOOT_HEADER, sign
from daemon.peer.channel import LINK_PATH, ChannelError, Channels, channel_key
from daemon.runtime.logs import HEADER as REQUEST_ID_HEADER
from daemon.runtime.logs import request_id
from federation.messages import PROTOCOL_VERSION

PROTOCOL_HEADER = "X-AIM-Protocol"  # the sender's peer protocol version (federation.messages)
INCARNATION_HEADER = "X-AIM-Incarnation"  # the incarnation of the sender's (or answerer's) database
MSGS_PATH = "/peer/v1/msgs"  # batched messages: a frame on the peer channel when it is open
BACKUP_PATH = "/api/v1/admin/backup"  # a donor's copy, signed like a peer request (seeding)

log = logging.getLogger("ai_memory.peer")


def pack(payload: Any) -> bytes:
    """A peer call's body: msgpack, binary strings as bin."""
    body: bytes = msgpack.packb(payload, use_bin_type=True)
    return body


class PeerUnreachable(Exception):
    def __init__(self, peer: str, reason: str) -> None:
        super().__init__(f"{peer}: {reason}")
        self.peer = peer
        self.reason = reason  # "unreachable" | "timeout" | "rejected"


class PeerClient:
    def __init__(self, node_id: str, urls: dict[str, str], secret: str | None, *,
                 now_s: Callable[[], float], incarnation: str = "",
                 tls: Callable[[str], ssl.SSLContext | bool] = lambda _peer: True) -> None:
        self.node_id = node_id
        self.incarnation = incarnation  # this node's database's, sent with every call
        self.now_s = now_s  # the node's clock (seconds): what signatures are checked against
        self.urls = urls
        self.secret = secret
        # The client context for the next connection to a member (mutual TLS;
        # its handshake checks that the certificate names that member).
        self.tls = tls
        self._session: aiohttp.ClientSession | None = None
        self._boots: dict[str, str] = {}  # peer -> its boot id, as last learned
        self.channels: Channels | None = (
            Channels(self._open_channel) if limits.peer_channel_enabled else None)

    def over_http(self, peer: str) -> bool:
        """Do batches to ``peer`` go as HTTP requests (no channel), each
        taking one of the pooled connections the node's other calls share?"""
        return self.channels is None or self.channels.plain(peer)

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit_per_host=limits.peer_connections_per_host_max,
                                        keepalive_timeout=limits.peer_keepalive_secs)
        self._session = aiohttp.ClientSession(connector=connector)

    async def close(self) -> None:
        if self.channels is not None:
            await self.channels.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call(self, peer: str, path: str, payload: Any, *,
                   timeout_s: float | None = None) -> Any:
        raw, _ = await self.call_from(peer, path, payload, timeout_s=timeout_s)
        return raw

    async def call_from(self, peer: str, path: str, payload: Any, *,
                        timeout_s: float | None = None) -> tuple[Any, str]:
        """The answer and the incarnation of the process that gave it ("" if
        it did not say): what the answer carries of that member's own ops is
        that incarnation's."""
        return await self.call_packed(peer, path, pack(payload), timeout_s=timeout_s)

    async def call_packed(self, peer: str, path: str, body: bytes, *,
                          timeout_s: float | None = None) -> tuple[Any, str]:
        """:meth:`call_from` for a payload already packed (:func:`pack`): a
        caller that weighs a batch by its packed size packs it once. A body
        the receiver would refuse as too large is refused here, before it
        is sent: as a frame it would close the channel for every exchange."""
        if len(body) > limits.peer_body_max_bytes:
            self._log_failure(peer, path, "rejected (413)", time.monotonic())
            raise PeerUnreachable(peer, "rejected (413)")
        if self._session is None:
            raise PeerUnreachable(peer, "unreachable")
        url = self.urls.get(peer)
        if url is None:
            raise PeerUnreachable(peer, "unreachable")
        if path == MSGS_PATH and self.channels is not None:
            budget = timeout_s or limits.peer_request_timeout_secs
            deadline = time.monotonic() + budget
            ch = await self._channel(peer, budget)
            if ch is not None:  # one deadline for opening and the exchange
                raw = await self._exchange(ch, body, max(deadline - time.monotonic(), 0.001))
                return raw, ch.incarnation
        t = aiohttp.ClientTimeout(total=timeout_s or limits.peer_request_timeout_secs)
        started = time.monotonic()
        for attempt in (1, 2):
            headers = {"Content-Type": "application/msgpack", "X-AIM-Node": self.node_id,
                       PROTOCOL_HEADER: str(PROTOCOL_VERSION),
                       INCARNATION_HEADER: self.incarnation}
            rid = request_id.get()
            if rid is not None:
                headers[REQUEST_ID_HEADER] = rid
            boot = self._boots.get(peer, "")
            if self.secret:
                headers.update(sign(self.secret, self.node_id, peer, "POST", path, body,
                                    self.now_s(), boot))
            try:
                async with self._session.post(url + path, data=body, headers=headers,
                                              timeout=t, ssl=self.tls(peer)) as resp:
                    raw = await resp.read()
                    new_boot = resp.headers.get(BOOT_HEADER)
                    incarnation = resp.headers.get(INCARNATION_HEADER, "")
                    status = resp.status
            except TimeoutError:
                self._log_failure(peer, path, "timeout", started)
                raise PeerUnreachable(peer, "timeout") from None
            except aiohttp.ClientConnectorCertificateError as exc:
                raise self._bad_certificate(peer, path, exc, started) from None
            except (aiohttp.ClientError, OSError):
                self._log_failure(peer, path, "unreachable", started)
                raise PeerUnreachable(peer, "unreachable") from None
            if status == 401 and new_boot and new_boot != boot and attempt == 1:
                self._boots[peer] = new_boot
                continue
            if status >= 400:
                self._log_failure(peer, path, f"rejected ({status})", started)
                raise PeerUnreachable(peer, f"rejected ({status})")
            break
        log.debug("peer call", extra={"fields": {
            "peer": peer, "path": path, "status": status, "bytes_out": len(body),
            "ms": round((time.monotonic() - started) * 1000, 1)}})
        return (msgpack.unpackb(raw, raw=False) if raw else None), incarnation

    # -- the peer channel (daemon/peer/channel.py) ---------------------------

    async def _channel(self, peer: str, timeout_s: float) -> Any:
        assert self.channels is not None
        started = time.monotonic()
        try:
            return await self.channels.get(peer, timeout_s)
        except TimeoutError:
            self._log_failure(peer, LINK_PATH, "timeout", started)
            raise PeerUnreachable(peer, "timeout") from None

    async def _exchange(self, ch: Any, body: bytes, timeout_s: float | None) -> Any:
        started = time.monotonic()
        try:
            return await ch.exchange(body, timeout_s or limits.peer_request_timeout_secs)
        except TimeoutError:
            self._log_failure(ch.peer, LINK_PATH, "timeout", started)
            raise PeerUnreachable(ch.peer, "timeout") from None
        except ChannelError as exc:
            self._log_failure(ch.peer, LINK_PATH, str(exc), started)
            reason = str(exc) if str(exc).startswith("rejected") else "unreachable"
            raise PeerUnreachable(ch.peer, reason) from None

    async def _open_channel(self, peer: str, timeout_s: float) -> Any:
        """Open the WebSocket of the channel to ``peer``: (ws, frame key, the
        incarnation of the process that accepted it), or None if the peer
        does not serve it (an older version)."""
        if self._session is None:
            raise PeerUnreachable(peer, "unreachable")
        url = self.urls[peer]
        started = time.monotonic()
        for attempt in (1, 2):
            boot = self._boots.get(peer, "")
            headers = {"X-AIM-Node": self.node_id, PROTOCOL_HEADER: str(PROTOCOL_VERSION),
                       INCARNATION_HEADER: self.incarnation}
            if self.secret:
                headers.update(sign(self.secret, self.node_id, peer, "GET", LINK_PATH, b"",
                                    self.now_s(), boot))
            try:
                async with asyncio.timeout(timeout_s):
                    ws = await self._session.ws_connect(
                        url + LINK_PATH, headers=headers, autoping=True, compress=0,
                        ssl=self.tls(peer),
                        max_msg_size=limits.peer_body_max_bytes + 64,
                        heartbeat=limits.peer_channel_heartbeat_secs,
                        timeout=aiohttp.ClientWSTimeout(ws_close=1.0))
            except aiohttp.WSServerHandshakeError as exc:
                new_boot = exc.headers.get(BOOT_HEADER) if exc.headers else None
                if exc.status == 401 and new_boot and new_boot != boot and attempt == 1:
                    self._boots[peer] = new_boot
                    continue
                if exc.status in (404, 405):
                    return None
                self._log_failure(peer, LINK_PATH, f"rejected ({exc.status})", started)
                raise PeerUnreachable(peer, f"rejected ({exc.status})") from None
            except TimeoutError:
                raise
            except aiohttp.ClientConnectorCertificateError as exc:
                raise self._bad_certificate(peer, LINK_PATH, exc, started) from None
            except (aiohttp.ClientError, OSError):
                self._log_failure(peer, LINK_PATH, "unreachable", started)
                raise PeerUnreachable(peer, "unreachable") from None
            key = channel_key(self.secret, headers.get("X-AIM-Sig", ""))
            log.debug("peer channel open", extra={"fields": {"peer": peer}})
            # aiohttp keeps the upgrade's response on the socket object only.
            upgrade = getattr(ws, "_response", None)
            incarnation = "" if upgrade is None else upgrade.headers.get(INCARNATION_HEADER, "")
            return ws, key, incarnation
        raise PeerUnreachable(peer, "rejected (boot)")

    @classmethod
    def _bad_certificate(cls, peer: str, path: str, exc: aiohttp.ClientConnectorCertificateError,
                         started: float) -> PeerUnreachable:
        reason = f"rejected (certificate: {exc.certificate_error})"
        cls._log_failure(peer, path, reason, started)
        return PeerUnreachable(peer, reason)

    @staticmethod
    def _log_failure(peer: str, path: str, reason: str, started: float) -> None:
        log.debug("peer call failed", extra={"fields": {
            "peer": peer, "path": path, "reason": reason,
            "ms": round((time.monotonic() - started) * 1000, 1)}})
