"""``--wait``: block on a daemon's push stream until something arrives.

:func:`wait` opens a Server-Sent Events stream (``/api/v1/inbox/stream``,
``/api/v1/messages/stream``) with ``http.client`` (stdlib, like the rest of
the CLI). Once the daemon says ``ready`` (it replays nothing on a first
connect, so ``ready`` comes at once) the caller's ``check`` runs: a first
look at what is already there, so nothing that arrived before the stream
opened is waited past. Then each event goes to ``on_event``; the first
non-None result ends the wait.

A stream that ends (the node's ``resume`` event, a restart, a dropped
connection) is reopened with ``Last-Event-ID``, so events sent while the
CLI was reconnecting are replayed, not missed; ``check`` runs again after
each reconnect. With ``timeout`` the whole wait is bounded and ends in
:class:`common.errors.WaitTimedOut` (exit 8). An error from ``check`` or
``on_event`` (the caller's own request) ends the wait as it is: only the
caller knows how to retry it safely (a pop, with its request id).
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from cli.client import ApiClient, CannotConnect, Response, TransportFailed, error_from_response
from common import __version__, limits, trust
from common.errors import AiMemoryError, Unavailable, WaitTimedOut

T = TypeVar("T")
RECONNECT_WAIT_MAX_SECS = 5.0


@dataclass(frozen=True, slots=True)
class Event:
    event: str
    data: Any
    id: str | None


class _Stream:
    """One open SSE response."""

    def __init__(self, client: ApiClient, path: str, params: Mapping[str, Any],
                 last_event_id: str | None, timeout: float) -> None:
        url = urllib.parse.urlsplit(client.url_for(path, params))
        if url.scheme == "https":
            self.conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                url.hostname or "127.0.0.1", url.port, timeout=timeout,
                context=trust.context(client.ca_cert))
        else:
            self.conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port,
                                                   timeout=timeout)
        headers = {"Accept": "text/event-stream", "User-Agent": f"ai-memory-cli/{__version__}"}
        if client.agent_id:
            headers["X-Agent-Id"] = client.agent_id
        if client.api_key:
            headers["X-API-Key"] = client.api_key
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        target = url.path + (f"?{url.query}" if url.query else "")
        origin = f"{url.scheme}://{url.netloc}"
        try:
            self.conn.request("GET", target, headers=headers)
            self.resp = self.conn.getresponse()
        except OSError as exc:
            self.conn.close()
            unverified = trust.explain(exc, origin)
            if unverified:
                raise CannotConnect(unverified, hint=trust.HINT) from exc
            if isinstance(exc, TimeoutError):
                raise TransportFailed(f"no answer from {origin} within {timeout:g}s") from exc
            raise CannotConnect(f"cannot connect to {origin}: {exc.strerror or exc}") from exc
        if self.resp.status != 200:
            body = self.resp.read()
            headers_in = {k.lower(): v for k, v in self.resp.getheaders()}
            self.conn.close()
            raise error_from_response(Response(self.resp.status, headers_in, body))
        self.retry_secs = limits.stream_retry_ms / 1000

    def events(self, read_timeout: Callable[[], float]) -> Iterator[Event]:
        """Yield events until the stream ends; ``read_timeout()`` bounds each read."""
        kind, seen_id = "message", None
        data: list[str] = []
        while True:
            sock = self.conn.sock
            if sock is not None:
                sock.settimeout(max(0.05, read_timeout()))
            raw = self.resp.readline()
            if not raw:
                return
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line == "":
                if data:
                    yield Event(kind, json.loads("\n".join(data)), seen_id)
                elif seen_id is not None:
                    yield Event("", None, seen_id)
                kind, data, seen_id = "message", [], None
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                seen_id = value
            elif name == "event":
                kind = value
            elif name == "data":
                data.append(value)
            elif name == "retry" and value.isdigit():
                self.retry_secs = int(value) / 1000

    def close(self) -> None:
        self.resp.close()
        self.conn.close()


class _CallerFailed(Exception):
    def __init__(self, error: AiMemoryError) -> None:
        super().__init__(str(error))
        self.error = error


def _backoff(failures: int, note: Callable[[str], None], why: str) -> float:
    delay = float(min(RECONNECT_WAIT_MAX_SECS, 0.1 * 2.0 ** failures))
    note(f"stream interrupted ({why}); reconnecting in {delay:g}s")
    return delay


def wait(client: ApiClient, path: str, params: Mapping[str, Any], *,
         timeout: float | None, check: Callable[[], T | None],
         on_event: Callable[[Event], T | None], what: str,
         note: Callable[[str], None] = lambda _t: None,
         sleep: Callable[[float], None] = time.sleep) -> T:
    """Wait on the stream at ``path`` (see the module docstring)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    last_id: str | None = None
    connected_once = False
    failures = 0

    def left() -> float:
        if deadline is None:
            return float(limits.cli_wait_read_secs)
        return float(min(limits.cli_wait_read_secs, deadline - time.monotonic()))

    while True:
        if deadline is not None and time.monotonic() >= deadline:
            raise WaitTimedOut(f"nothing {what} within {timeout:g}s", timeout_secs=timeout)
        stream: _Stream | None = None
        try:
            stream = _Stream(client, path, params, last_id, max(0.05, min(left(),
                                                                       limits.cli_http_timeout_secs)))
            connected_once = True
            failures = 0
            for ev in stream.events(left):
                if ev.id is not None:
                    last_id = ev.id
                try:
                    if ev.event == "ready":
                        found = check()
                    elif ev.event in ("", "resume"):
                        found = None
                    else:
                        found = on_event(ev)
                except AiMemoryError as exc:
                    # The caller's own request failed (a pop's 503 must be retried with
                    # its request id, which only the caller knows): not a stream problem.
                    raise _CallerFailed(exc) from exc
                if found is not None:
                    return found
                if deadline is not None and time.monotonic() >= deadline:
                    break
            retry = stream.retry_secs
            if deadline is None or time.monotonic() < deadline:
                note(f"stream ended by the node (a restart or a resume); reconnecting in "
                     f"{retry:g}s")
        except _CallerFailed as failed:
            raise failed.error from None
        except TimeoutError:
            retry = 0.0  # silent too long (or the deadline): reconnect, or give up above
        except CannotConnect:
            if not connected_once:
                raise  # nothing listens at --url: say so now (exit 7)
            retry = _backoff(failures := failures + 1, note, "the daemon is unreachable")
        except Unavailable as exc:  # every stream slot taken, node stopping, dropped reply
            retry = max(_backoff(failures := failures + 1, note, exc.message),
                        min(exc.retry_after, RECONNECT_WAIT_MAX_SECS))
        except (OSError, http.client.HTTPException) as exc:
            retry = _backoff(failures := failures + 1, note, str(exc) or type(exc).__name__)
        finally:
            if stream is not None:
                stream.close()
        if deadline is not None:
            retry = min(retry, max(0.0, deadline - time.monotonic()))
        if retry > 0:
            sleep(retry)
