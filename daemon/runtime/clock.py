"""The node's clock: the one place the daemon reads wall time.

Everything that needs the time (services, the core's inputs, peer request
signatures, admission signatures, webhooks) gets it from one :class:`Clock`,
built by :func:`daemon.wiring.build_node` from ``settings.clock_offset_ms``
(a debugging skew) and a time source tests can replace.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Clock:
    def __init__(self, source: Callable[[], float] = time.time, offset_ms: int = 0) -> None:
        self._source = source
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return int(self._source() * 1000) + self.offset_ms

    def now_s(self) -> float:
        return self.now_ms() / 1000
