"""The MCP server's way to a node: async JSON over the public HTTP API.

Every MCP tool is forwarded to a node's ``/api/v1`` endpoints, the same
service layer that HTTP clients and the CLI reach, so an MCP client
connected to any member works across the cluster and sees exactly the
node's rules (scope refusal, quorum, claim-once). One ``aiohttp`` session is
opened for the life of the MCP server and reused by every call.

Each request carries the process's identity: ``X-Agent-Id``, the key
(``Authorization: Bearer``, or else the older ``X-API-Key``:
:func:`common.clients.key_headers`) and the hook session in ``x-memory-actor-session-id`` when configured.

Failures come back as :mod:`common.errors`, decoded in one place
(:func:`error_from_reply`): the node's ``{"error", "code", ...}`` body keeps
its text, code and details, and the HTTP status picks the class. A node that
cannot be reached, or a connection that breaks or times out mid-request, is
an :class:`~common.errors.Unavailable` (codes ``cannot_connect`` and
``transport_failed``), because a retry may help. :meth:`NodeClient.retrying_once`
repeats a call exactly once after such a failure or a 503, which is safe only
for calls that carry their own idempotency (a pop's request id, a create's
``Idempotency-Key``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiohttp

from common import __version__, trust
from common.clients import key_headers, query_params
from common.errors import (
    AiMemoryError,
    ServerError,
    Unavailable,
    from_reply,
)
from common.retry import retrying_once
from daemon.mcp.settings import McpSettings

SESSION_HEADER = "x-memory-actor-session-id"

T = TypeVar("T")

def error_from_reply(status: int, body: bytes, retry_after: str | None = None) -> AiMemoryError:
    """The :mod:`common.errors` instance for one HTTP error reply of a node."""
    return from_reply(status, body, retry_after)


def _unavailable(message: str, code: str) -> Unavailable:
    exc = Unavailable(message)
    exc.code = code
    return exc


class NodeClient:
    """JSON requests to one node with this process's identity headers."""

    def __init__(
        self,
        settings: McpSettings,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.base_url = settings.url.rstrip("/")
        self._sleep = sleep
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=trust.verify_value(self.settings.ca_cert)),
                timeout=aiohttp.ClientTimeout(total=self.settings.timeout_secs),
                headers=self._identity_headers(),
            )

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def __aenter__(self) -> NodeClient:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _identity_headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": f"ai-memory-mcp/{__version__}"}
        if self.settings.agent_id:
            headers["X-Agent-Id"] = self.settings.agent_id
        headers.update(key_headers(self.settings.key, self.settings.api_key))
        if self.settings.session_id:
            headers[SESSION_HEADER] = self.settings.session_id
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Send one request; decoded JSON back, or an :class:`AiMemoryError` raised."""
        if self._session is None:
            raise ServerError("the MCP server's HTTP session is not open")
        query = query_params(params)
        url = self.base_url + path
        try:
            async with self._session.request(
                method, url, params=query or None, json=json_body, headers=dict(headers or {})
            ) as reply:
                body = await reply.read()
                if reply.status >= 400:
                    raise error_from_reply(reply.status, body, reply.headers.get("Retry-After"))
        except aiohttp.ClientConnectorError as exc:
            unverified = trust.explain(exc, self.base_url)
            raise _unavailable(
                f"{unverified}; {trust.HINT}" if unverified else
                f"cannot connect to {self.base_url}: {exc.os_error.strerror or exc}",
                "cannot_connect",
            ) from exc
        except TimeoutError as exc:
            raise _unavailable(
                f"no answer from {self.base_url} within {self.settings.timeout_secs:g}s "
                "(limits.mcp_http_timeout_secs)",
                "transport_failed",
            ) from exc
        except aiohttp.ClientError as exc:
            raise _unavailable(
                f"{method} {path} to {self.base_url} failed: {exc or type(exc).__name__}",
                "transport_failed",
            ) from exc
        if not body:
            return None
        try:
            return json.loads(body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ServerError(f"the node sent invalid JSON for {method} {path}") from exc

    async def get(self, path: str, **params: Any) -> Any:
        return await self.request("GET", path, params=params)

    async def post(
        self, path: str, body: Mapping[str, Any], *, headers: Mapping[str, str] | None = None
    ) -> Any:
        return await self.request("POST", path, json_body=dict(body), headers=headers)

    async def delete(self, path: str) -> Any:
        return await self.request("DELETE", path)

    async def retrying_once(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call``; after a transport failure or a 503, wait (capped) and run it once more."""
        return await retrying_once(call, wait_max=self.settings.retry_wait_max_secs,
                                   sleep=self._sleep)
