"""The one retry every client of a node makes: once, after an ``Unavailable``.

A request that is safe to repeat (it carries its own idempotency: a pop's
request id, a create's ``Idempotency-Key``) is sent; if it fails with
:class:`~common.errors.Unavailable` (a 503 such as a quorum not met in time,
a node that cannot be reached, a connection that broke), the client waits
what the node asked for (``Retry-After``), at most ``wait_max`` seconds, and
sends it exactly once more. A second failure is the caller's to report.

The rule is written once, as a coroutine (:func:`retrying_once`), which the
MCP tools' clients await. The CLI blocks instead: :func:`retrying_once_blocking`
runs the same coroutine with the CLI's plain functions, so nothing in it
ever suspends and it runs to its end without an event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

from common.errors import Unavailable

T = TypeVar("T")


async def retrying_once(call: Callable[[], Awaitable[T]], *, wait_max: float,
                        sleep: Callable[[float], Awaitable[object]]) -> T:
    """Await ``call()``; after an ``Unavailable``, sleep (capped) and await it once more."""
    try:
        return await call()
    except Unavailable as exc:
        await sleep(min(exc.retry_after, wait_max))
    return await call()


def retrying_once_blocking(call: Callable[[], T], *, wait_max: float,
                           sleep: Callable[[float], object]) -> T:
    """:func:`retrying_once` for a blocking ``call`` and ``sleep``."""
    async def attempt() -> T:
        return call()

    async def pause(secs: float) -> None:
        sleep(secs)

    run = retrying_once(attempt, wait_max=wait_max, sleep=pause)
    try:
        run.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    run.close()  # pragma: no cover - plain functions never suspend
    raise RuntimeError("a blocking retry suspended")  # pragma: no cover
