"""Backpressure: refuse new work before the core numbers any op for it.

The store's write queue is bounded (``limits.writer_queue_max``); a persist
the core already counts on must never find it full. So new writes and
mailbox requests are refused with 503 (``Retry-After``) once the queue is
half full, and while the node shuts down.
"""

from __future__ import annotations

from typing import Protocol

from common import limits
from common.errors import Unavailable
from daemon.runtime.metrics import Metrics
from daemon.runtime.tasks import Background


class QueueDepth(Protocol):
    def writer_queue_depth(self) -> int: ...


class Backpressure:
    def __init__(self, store: QueueDepth, background: Background, metrics: Metrics) -> None:
        self._store = store
        self._background = background
        self._metrics = metrics

    def check(self) -> None:
        if self._background.stopping:
            raise Unavailable("node shutting down")
        if self._store.writer_queue_depth() >= limits.writer_queue_max // 2:
            self._metrics.inc("overload_refusals_total")
            raise Unavailable("node overloaded: the store's write queue is half full "
                              "(limits.writer_queue_max)", retry_after=0.5)
