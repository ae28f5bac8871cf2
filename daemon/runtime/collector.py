"""The cyclic garbage collector, set up for a long-running server.

CPython collects generation 0 whenever 700 more container objects were
allocated than freed. A node with a few dozen requests in flight holds more
than that in futures, effect lists and ops that reference counting frees a
moment later, so the collector ran every few requests and found nothing:
about 50 us of CPU per notify (1,155 collections in 19k notifies, measured
with :func:`watch`). So the threshold is ``limits.gc_young_objects_max``,
and everything alive once the node is built (modules, schemas, settings,
the loaded state, the started background tasks) is moved out of the
collector's sight with :func:`gc.freeze` just before the socket listens,
so the rare full collection walks what the node made since, not the whole
heap. Cycles among later objects are still collected, only less often; a
cycle that includes a frozen object never is (a bounded, one-time cost:
what was alive at startup).

:func:`watch` counts each collection's pause in the node's metrics
(``gc_pause_seconds{generation}``) and shows how many objects the freeze
keeps out of sight (``gc_frozen_objects``) and the threshold in force
(``gc_young_objects_max``), so the cost stays visible.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from common import limits
from daemon.runtime.metrics import Metrics

_Callback = Callable[[str, dict[str, Any]], None]


def tune() -> None:
    """The thresholds, for this process (call once, before serving)."""
    gc.set_threshold(limits.gc_young_objects_max, limits.gc_older_every, limits.gc_older_every)


def freeze_startup() -> None:
    """Collect once, then keep every object alive now out of later collections."""
    gc.collect()
    gc.freeze()


def watch(metrics: Metrics, clock: Callable[[], float] = time.perf_counter) -> Callable[[], None]:
    """Observe every collection's pause; returns the function that stops it."""
    started: list[float] = []

    # Called on whichever thread allocates when a collection is due (the
    # event loop or a store thread). Collections never overlap, and only
    # this callback writes its histogram, so the single-threaded Metrics
    # is safe here.
    def on_collect(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(clock())
        elif started:
            metrics.observe("gc_pause_seconds", clock() - started.pop(),
                            generation=str(info.get("generation", "")))

    callback: _Callback = on_collect
    gc.callbacks.append(callback)
    metrics.gauge("gc_frozen_objects", gc.get_freeze_count)
    metrics.gauge("gc_young_objects_max", lambda: float(gc.get_threshold()[0]))

    def stop() -> None:
        if callback in gc.callbacks:
            gc.callbacks.remove(callback)

    return stop
