"""The CLI's HTTP client: one request in, decoded JSON (or an error) out.

Built on the stdlib (``urllib``) so that ``ai-memory`` starts in a few tens of
milliseconds; the daemon is always one hop away and requests are small, so
connection reuse buys nothing here.

The seam is :class:`Transport`, one method that turns a request into a
:class:`Response`. :class:`UrllibTransport` is the real one; tests run the
real one against a stub aiohttp server instead of faking it.

Errors are translated exactly once, in :func:`error_from_response`: the
daemon's ``{"error", "code", ...}`` body becomes the matching class of
:mod:`common.errors`, whose ``exit_code`` the command line then uses. A
daemon that cannot be reached at all raises :class:`CannotConnect` (exit 7);
a connection that breaks or times out mid-request is :class:`TransportFailed`,
an ``Unavailable`` (exit 6), because the request may or may not have landed.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from common import __version__, limits, trust
from common.clients import key_headers, query_params
from common.errors import (
    AiMemoryError,
    BadRequest,
    QuorumNotMet,
    ServerError,
    Unavailable,
    from_reply,
)
from common.retry import retrying_once_blocking

DEFAULT_URL = "http://127.0.0.1:9077"

T = TypeVar("T")


class CannotConnect(Unavailable):
    """Nothing answered at the daemon's address (refused, unreachable, bad host)."""

    exit_code = 7
    code = "cannot_connect"


class TransportFailed(Unavailable):
    """The connection broke or timed out after the request may have been sent."""

    code = "transport_failed"


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else None


class Transport(Protocol):
    def send(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout: float
    ) -> Response: ...


class UrllibTransport:
    """Sends one request with ``urllib``; HTTP error statuses are returned, not raised.
    An https URL is verified against the cluster CA (:mod:`common.trust`)."""

    def __init__(self, ca_cert: str | None = None) -> None:
        self.ca_cert = ca_cert

    def send(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout: float
    ) -> Response:
        request = urllib.request.Request(url, data=body, headers=dict(headers), method=method)
        tls = trust.context(self.ca_cert) if url.startswith("https:") else None
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=tls) as reply:
                return Response(reply.status, _lower_keys(reply.headers.items()), reply.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return Response(exc.code, _lower_keys(exc.headers.items()), exc.read())
        except urllib.error.URLError as exc:
            reason = exc.reason
            unverified = trust.explain(exc, _origin(url))
            if unverified:  # nothing was sent: the handshake failed
                raise CannotConnect(unverified, hint=trust.HINT) from exc
            if isinstance(reason, TimeoutError):
                raise TransportFailed(f"no answer from {_origin(url)} within {timeout:g}s") from exc
            if isinstance(reason, OSError) and not isinstance(
                reason, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)
            ):  # refused, unreachable, unknown host: nothing was sent
                raise CannotConnect(
                    f"cannot connect to {_origin(url)}: {_reason_text(reason)}"
                ) from exc
            raise TransportFailed(
                f"request to {_origin(url)} failed: {_reason_text(reason)}"
            ) from exc
        except TimeoutError as exc:
            raise TransportFailed(f"no answer from {_origin(url)} within {timeout:g}s") from exc
        except (OSError, http.client.HTTPException) as exc:
            # Raised while reading the reply: RemoteDisconnected, resets, bad status lines.
            raise TransportFailed(f"request to {_origin(url)} failed: {_reason_text(exc)}") from exc


def _lower_keys(items: Any) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in items}


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _reason_text(reason: object) -> str:
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason) or type(reason).__name__


def error_from_response(response: Response) -> AiMemoryError:
    """Translate an HTTP error response into the class of :mod:`common.errors` it names."""
    return from_reply(response.status, response.body, response.headers.get("retry-after"))


class ApiClient:
    """Talks to one daemon: base URL, identity headers, JSON in and out."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        agent_id: str | None = None,
        api_key: str | None = None,
        key: str | None = None,
        ca_cert: str | None = None,
        transport: Transport | None = None,
        timeout: float = limits.cli_http_timeout_secs,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.agent_id = agent_id
        self.api_key = api_key  # sent as X-API-Key, unless there is a key
        self.key = key  # sent as Authorization: Bearer (common.clients)
        self.ca_cert = ca_cert  # None: --ca-cert / AI_MEMORY_CA_CERT (common.trust)
        self.transport = transport or UrllibTransport(ca_cert)
        self.timeout = timeout
        self.sleep = sleep

    def url_for(self, path: str, params: Mapping[str, Any] | None = None) -> str:
        url = self.base_url + path
        query = query_params(params)
        return f"{url}?{urllib.parse.urlencode(query)}" if query else url

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Send one request; return decoded JSON (or text), raise an AiMemoryError on failure."""
        sent_headers = {"Accept": "application/json", "User-Agent": f"ai-memory-cli/{__version__}"}
        if self.agent_id:
            sent_headers["X-Agent-Id"] = self.agent_id
        sent_headers.update(key_headers(self.key, self.api_key))
        body: bytes | None = None
        if json_body is not None:
            body = json.dumps(json_body).encode("utf-8")
            sent_headers["Content-Type"] = "application/json"
        sent_headers.update(headers or {})
        response = self.transport.send(
            method, self.url_for(path, params), sent_headers, body, self.timeout
        )
        if response.status >= 400:
            raise error_from_response(response)
        if "json" in response.headers.get("content-type", "application/json"):
            try:
                return response.json()
            except ValueError as exc:
                raise ServerError(f"daemon sent invalid JSON for {method} {path}") from exc
        return response.body.decode("utf-8", "replace")

    def retrying_once(self, call: Callable[[], T]) -> T:
        """Run ``call``; after a transport failure or a 503, wait and run it exactly once more.

        Only for requests that are safe to repeat: a pop with its request id,
        a create with its Idempotency-Key.
        """
        return retrying_once_blocking(call, wait_max=limits.cli_retry_wait_max_secs,
                                      sleep=self.sleep)

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None, *, headers: Mapping[str, str] | None = None) -> Any:
        return self.request(
            "POST", path, json_body=body if body is not None else {}, headers=headers
        )

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def delete_with(self, path: str, **params: Any) -> Any:
        return self.request("DELETE", path, params=params)


def normalize_url(url: str) -> str:
    """``--url`` as the client uses it: a scheme is added when missing
    (``127.0.0.1:9077``); an API path (``.../api/v1``) is refused with the
    address to use instead, since the CLI adds ``/api/v1/...`` itself."""
    raw = url.strip()
    if "://" not in raw:
        raw = "http://" + raw
    parts = urllib.parse.urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest(f"--url {url!r} is not a daemon address; expected e.g. {DEFAULT_URL}")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise BadRequest(f"--url {url!r} has a bad port; expected e.g. {DEFAULT_URL}") from None
    path = parts.path.rstrip("/")
    if path == "/api" or "/api/v1" in path:
        base = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path.split("/api")[0], "", ""))
        raise BadRequest(
            f"--url is the daemon's address, without the API path: use --url {base} "
            "(the CLI adds /api/v1/... to it)")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def create_idempotently(client: ApiClient, path: str, body: Any, key: str | None) -> Any:
    """POST a create under an ``Idempotency-Key`` (``key`` or a new one),
    retried once after a 503 or a broken connection. When that fails too,
    the error says whether the write may still land and names the key to
    retry with, so the retry can never create a second record."""
    key = key or str(uuid.uuid4())
    headers = {"Idempotency-Key": key}
    try:
        return client.retrying_once(lambda: client.post(path, body, headers=headers))
    except Unavailable as exc:
        if isinstance(exc, QuorumNotMet):
            exc.details["hint"] = (
                "the write may still land: the members that hold it keep spreading it. "
                f"Retry the same command with --idempotency-key {key}; it is then "
                "written at most once")
        else:
            exc.details["hint"] = (
                "the write may or may not have landed; retry the same command with "
                f"--idempotency-key {key} so it is written at most once")
        exc.details["idempotency_key"] = key
        raise


def drop_none(body: Mapping[str, Any]) -> dict[str, Any]:
    """Omit unset optional fields so the daemon applies its own defaults."""
    return {k: v for k, v in body.items() if v is not None}
